"""Learning test: a tiny CMLM learns a generated transduction task through the CLI.

The data (``toydata.write_transduction`` with two styles): targets are the source
tokens mapped and locally reordered, every sentence written in one of two styles
the source does not reveal. A single pass mixes styles within a sentence (the
multimodality problem of non-autoregressive decoding); Mask-Predict's refinement
passes make each output consistent. Scored with fairseq-generate's BLEU against
the reference (whose style is random, so about 50 is the ceiling for consistent
outputs), plus two direct measures: content accuracy ignoring style, and the
fraction of outputs written in one style only.

Thresholds were set from runs on the 2-core CPU (see README, "Learning test"),
with margin.
"""

import pytest
from cli import bleu, hypotheses, preprocess, run, tagged
from toydata import write_transduction


def style_free(text: str):
    return [token[1:] for token in text.split()]


def consistent(text: str) -> bool:
    return len({token[0] for token in text.split()}) <= 1


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    root = tmp_path_factory.mktemp("learn")
    sizes = {"train": 4000, "valid": 100, "test": 300}
    write_transduction(root / "raw", sizes, seed=0, vocab=10, styles=2)
    preprocess(root / "raw", root / "bin")
    run(
        "fairseq-train", root / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm",
        "--arch", "cmlm_plugin_tiny", "--criterion", "cmlm_plugin_loss", "--dropout", 0,
        "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", "2e-3",
        "--lr-scheduler", "inverse_sqrt", "--warmup-updates", 50, "--max-tokens", 1500,
        "--max-update", 800, "--save-dir", root / "ckpt", "--cpu", "--seed", 1,
        "--no-epoch-checkpoints", "--no-save-optimizer-state", "--disable-validation",
    )  # fmt: skip
    return root


def decode(root, passes, beam=1):
    out = run(
        "fairseq-generate", root / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm",
        "--path", root / "ckpt" / "checkpoint_last.pt", "--cpu", "--batch-size", 100,
        "--iter-decode-max-iter", passes, "--iter-decode-with-beam", beam,
    )  # fmt: skip
    hypos, refs = hypotheses(out), tagged(out, "T")
    assert len(hypos) == 300
    exact = sum(style_free(h) == style_free(refs[str(i)]) for i, h in hypos.items())
    return {
        "bleu": bleu(out),
        "exact_ignoring_style": exact / len(hypos),
        "consistent": sum(map(consistent, hypos.values())) / len(hypos),
    }


def test_tiny_model_learns_and_refinement_helps(model):
    one, ten = decode(model, 1), decode(model, 10)
    print(f"T=1: {one}\nT=10: {ten}")
    assert ten["exact_ignoring_style"] >= 0.9  # the content is learnt
    assert ten["bleu"] >= 40.0
    assert ten["bleu"] >= one["bleu"] + 12.0  # refinement beats a single pass
    assert ten["consistent"] >= 0.9
    assert one["consistent"] <= ten["consistent"] - 0.3
