"""Learning test: a tiny CMLM learns a generated transduction task through the CLI.

The data (``toydata.write_transduction`` with two styles): targets are the source
tokens mapped and locally reordered, every sentence written in one of two styles
the source does not reveal. A single pass mixes styles within a sentence (the
multimodality problem of non-autoregressive decoding); Mask-Predict's refinement
passes make each output consistent. Scored with fairseq-generate's BLEU against
the reference (whose style is random, so about 50 is the ceiling for consistent
outputs), plus two direct measures: content accuracy ignoring style, and the
fraction of outputs written in one style only.

Thresholds were set from four runs with three seeds on the 2-core CPU (see
docs/training.md, "Learning test"), below the worst of them; the test itself uses seed 1.
"""

import re
import shutil

import pytest
from cli import bleu, hypotheses, preprocess, run, tagged
from toydata import write_transduction


def style_free(text: str):
    return [token[1:] for token in text.split()]


def consistent(text: str) -> bool:
    return len({token[0] for token in text.split()}) <= 1


def transduction_data(tmp_path_factory, name: str, styles: int):
    """The learning data (4000 / 100 / 300 pairs), binarized, written in ``styles`` styles."""
    root = tmp_path_factory.mktemp(name)
    sizes = {"train": 4000, "valid": 100, "test": 300}
    write_transduction(root / "raw", sizes, seed=0, vocab=10, styles=styles)
    preprocess(root / "raw", root / "bin")
    return root


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return transduction_data(tmp_path_factory, "learn", styles=2)


def train(root, name, *extra):
    return run(
        "fairseq-train", root / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm",
        "--arch", "cmlm_plugin_tiny", "--criterion", "cmlm_plugin_loss", "--dropout", 0,
        "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", "2e-3",
        "--lr-scheduler", "inverse_sqrt", "--warmup-updates", 50, "--max-tokens", 1500,
        "--save-dir", root / name, "--cpu", "--seed", 1,
        "--no-epoch-checkpoints", "--no-save-optimizer-state", *extra,
    )  # fmt: skip


@pytest.fixture(scope="module")
def model(data):
    # the 400-update save point is the plain baseline of the --init-from-ar test
    train(data, "ckpt", "--disable-validation", "--max-update", 800,
          "--save-interval-updates", 400, "--keep-interval-updates", -1)  # fmt: skip
    return data


def decode(root, passes, beam=1, *extra, checkpoint="ckpt"):
    out = run(
        "fairseq-generate", root / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm",
        "--path", root / checkpoint / "checkpoint_last.pt", "--cpu", "--batch-size", 100,
        "--iter-decode-max-iter", passes, "--iter-decode-with-beam", beam, *extra,
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
    assert ten["exact_ignoring_style"] >= 0.8  # the content is learnt
    assert ten["bleu"] >= 40.0
    assert ten["bleu"] >= one["bleu"] + 8.0  # refinement beats a single pass
    assert ten["consistent"] >= 0.9
    assert one["consistent"] <= ten["consistent"] - 0.3


def test_glancing_makes_the_single_pass_better_than_the_plain_objectives(model):
    """Glancing (GLAT on the CMLM input) in the same 800 updates: one pass mixes the two
    styles far less. Measured 2026-12-01 (seeds 1/2/3; plain seed 1 re-run that day, seeds
    2/3 from docs/training.md): T=1 BLEU plain 37.41/29.53/30.97, glancing
    45.94/36.88/53.53 (+7.4 at worst); glancing T=1 in one style 0.92/0.82/1.00. At T=10
    glancing was not better on every seed (46.79/38.93/53.52 against 47.78/50.08/46.25),
    so only the single pass is asserted."""
    train(
        model, "ckpt_glancing", "--disable-validation", "--max-update", 800,
        "--glancing-ratio", 0.5, "--glancing-ratio-end", 0.3, "--glancing-anneal-updates", 800,
    )  # fmt: skip
    plain = decode(model, 1)
    glancing = decode(model, 1, checkpoint="ckpt_glancing")
    print(f"T=1 plain: {plain}\nT=1 glancing: {glancing}")
    assert glancing["bleu"] >= plain["bleu"] + 4.0
    assert glancing["consistent"] >= 0.75


# a fairseq transformer of cmlm_plugin_tiny's sizes, trained as train() trains the CMLM
AR_TINY = [
    "--task", "translation", "--arch", "transformer", "--encoder-layers", 2,
    "--decoder-layers", 2, "--encoder-embed-dim", 64, "--decoder-embed-dim", 64,
    "--encoder-ffn-embed-dim", 128, "--decoder-ffn-embed-dim", 128,
    "--encoder-attention-heads", 2, "--decoder-attention-heads", 2, "--share-all-embeddings",
    "--dropout", 0, "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", 0.1,
    "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", "2e-3",
    "--lr-scheduler", "inverse_sqrt", "--warmup-updates", 50, "--max-tokens", 1500,
    "--cpu", "--seed", 1, "--no-epoch-checkpoints", "--no-save-optimizer-state",
    "--disable-validation",
]  # fmt: skip


def test_starting_from_an_ar_model_learns_the_content_far_sooner(model):
    """--init-from-ar: the CMLM starts from a 200-update autoregressive model of its sizes
    and trains 400 updates, against the plain objective's own 400-update save point.
    Measured 2026-12-02 (these commands in a scratch script, one thread; AR and CMLM seeds
    1/2/3; plain runs trained to 400 updates, not save points): T=10 content exact
    0.847/0.877/0.863 from the AR model against 0.050/0.023/0.047 plain, T=10 BLEU
    43.94/44.41/49.18 against 6.55/3.68/7.48, T=1 BLEU 43.40/43.41/31.72 against
    2.57/0.00/0.00. The plain objective learns the content by 800 updates (1.000); the AR
    model's 200 updates make 600 in all here, so the test asserts the speed-up per CMLM
    update, not a lower total cost."""
    run("fairseq-train", model / "bin", *AR_TINY, "--max-update", 200, "--save-dir", model / "ar")
    train(
        model, "ckpt_init", "--disable-validation", "--max-update", 400, "--activation-fn",
        "relu", "--init-from-ar", model / "ar" / "checkpoint_last.pt",
    )  # fmt: skip
    (plain_400,) = (model / "ckpt").glob("checkpoint_*_400.pt")
    (model / "ckpt_400").mkdir()
    shutil.copy(plain_400, model / "ckpt_400" / "checkpoint_last.pt")
    plain = decode(model, 10, checkpoint="ckpt_400")
    started = decode(model, 10, checkpoint="ckpt_init")
    print(f"T=10 plain, 400 updates: {plain}\nT=10 from the AR model: {started}")
    assert started["exact_ignoring_style"] >= 0.6
    assert started["exact_ignoring_style"] >= plain["exact_ignoring_style"] + 0.4
    assert started["consistent"] >= 0.9


def test_diffusion_objective_learns_and_its_bound_decreases(data):
    log = train(
        data, "ckpt_diffusion", "--objective", "diffusion", "--label-smoothing", 0,
        "--mc-samples", 4, "--validate-interval-updates", 300, "--validate-interval", 1000,
        "--max-update", 1500,
    )  # fmt: skip
    bounds = [
        float(b)
        for b in re.findall(r"valid on 'valid' subset \| loss [\d.]+ \| nll_loss ([\d.]+)", log)
    ]
    sampled = decode(data, 10, 1, "--decoding", "diffusion", checkpoint="ckpt_diffusion")
    print(f"bounds (bits/token): {bounds}\ndiffusion S=10: {sampled}")
    assert len(bounds) >= 4
    assert bounds[-1] < bounds[0] - 1.0  # the likelihood bound falls during training
    assert sampled["exact_ignoring_style"] >= 0.8
    assert sampled["bleu"] >= 35.0


@pytest.fixture(scope="module")
def deterministic(tmp_path_factory):
    """One style only: every target is a function of its source, as distilled data is."""
    return transduction_data(tmp_path_factory, "learn-det", styles=1)


def test_self_correction_learns_deterministic_targets_as_fast_as_the_plain_objective(
    deterministic,
):
    """Self-correction (SMART/CMLMC's correction loss) on single-style targets, 600 updates
    beside the plain objective: the second-pass inputs built from the model's own
    predictions must not slow the learning of the content. Measured 2026-12-01 (seeds
    1/2/3, these commands with --save-interval-updates 200): T=1 content exact at 600
    updates plain 1.000/1.000/1.000, self-correction 0.997/0.997/1.000; at 400 updates
    0.643/0.573/0.560 against 0.623/0.543/0.607 (both rise sharply between 400 and 600).
    This test itself (seed 1): plain 1.000, self-correction 0.967 with two threads per
    command, 0.997 with one (2026-12-02, the suite's setting since then). On the
    two-style data self-correction reached only 0.70 in 800 updates, so the margin of 0.1
    still tells a slowed learner apart."""
    for name, extra in (("plain", ()), ("selfcorr", ("--self-correction", 0.5))):
        train(deterministic, name, "--disable-validation", "--max-update", 600, *extra)
    plain = decode(deterministic, 1, checkpoint="plain")
    fixed = decode(deterministic, 1, checkpoint="selfcorr")
    print(f"T=1 plain: {plain}\nT=1 self-correction: {fixed}")
    assert plain["exact_ignoring_style"] >= 0.9
    assert fixed["exact_ignoring_style"] >= 0.9
    assert fixed["exact_ignoring_style"] >= plain["exact_ignoring_style"] - 0.1
