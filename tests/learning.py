"""Helpers of the learning tests (``test_learning*.py``): the generated transduction data,
training the tiny CMLM on it through fairseq-train, and scoring fairseq-generate's output.

The data (``toydata.write_transduction``): targets are the source tokens mapped and locally
reordered, every sentence written in one of ``styles`` styles the source does not reveal.
With two styles a single pass mixes styles within a sentence (the multimodality problem of
non-autoregressive decoding); Mask-Predict's refinement passes make each output consistent.
Outputs are scored with fairseq-generate's BLEU against the reference (whose style is
random, so about 50 is the ceiling for consistent outputs), plus two direct measures:
content accuracy ignoring style, and the fraction of outputs written in one style only.
"""

from cli import bleu, hypotheses, preprocess, run, tagged
from toydata import write_transduction

N_TEST = 300  # test pairs of the learning data


def style_free(text: str):
    """The tokens of ``text`` without their style letter."""
    return [token[1:] for token in text.split()]


def consistent(text: str) -> bool:
    """Whether ``text`` is written in one style only."""
    return len({token[0] for token in text.split()}) <= 1


def transduction_data(tmp_path_factory, name: str, styles: int):
    """The learning data (4000 / 100 / 300 pairs), binarized, written in ``styles`` styles."""
    root = tmp_path_factory.mktemp(name)
    sizes = {"train": 4000, "valid": 100, "test": N_TEST}
    write_transduction(root / "raw", sizes, seed=0, vocab=10, styles=styles)
    preprocess(root / "raw", root / "bin")
    return root


def train(root, name, *extra):
    """fairseq-train of the tiny CMLM on ``root``'s data into ``root / name``; its log."""
    return run(
        "fairseq-train", root / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm",
        "--arch", "cmlm_plugin_tiny", "--criterion", "cmlm_plugin_loss", "--dropout", 0,
        "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", "2e-3",
        "--lr-scheduler", "inverse_sqrt", "--warmup-updates", 50, "--max-tokens", 1500,
        "--save-dir", root / name, "--cpu", "--seed", 1,
        "--no-epoch-checkpoints", "--no-save-optimizer-state", *extra,
    )  # fmt: skip


def decode(root, passes, beam=1, *extra, checkpoint="ckpt"):
    """fairseq-generate of the test set: BLEU, content exact ignoring style, one-style share."""
    out = run(
        "fairseq-generate", root / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm",
        "--path", root / checkpoint / "checkpoint_last.pt", "--cpu", "--batch-size", 100,
        "--iter-decode-max-iter", passes, "--iter-decode-with-beam", beam, *extra,
    )  # fmt: skip
    hypos, refs = hypotheses(out), tagged(out, "T")
    assert len(hypos) == N_TEST
    exact = sum(style_free(h) == style_free(refs[str(i)]) for i, h in hypos.items())
    return {
        "bleu": bleu(out),
        "exact_ignoring_style": exact / len(hypos),
        "consistent": sum(map(consistent, hypos.values())) / len(hypos),
    }
