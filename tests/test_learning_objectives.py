"""Learning tests of the other training objectives: the diffusion objective (LLaDA's masked
diffusion, its likelihood bound) and self-correction (SMART/CMLMC) (``learning.py`` holds the
data, training and scoring; ``test_learning.py`` the plain objective, glancing and the start
from an autoregressive model; ``test_learning_ctc.py`` CTC).

Thresholds were set from runs with three seeds on the 2-core CPU (see docs/training.md,
"Learning test", and each test's docstring), below the worst of them; the tests use seed 1.
"""

import re

import pytest
from cli import invoke
from learning import decode, train, transduction_data


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return transduction_data(tmp_path_factory, "learn", styles=2)


def test_diffusion_objective_learns_and_its_bound_decreases(data):
    """The diffusion objective from scratch, 1500 updates. Measured 2026-12-03 (seeds
    1/2/3, these commands with --save-interval-updates 100 and validation every 100):
    the bound fell from 2.63/2.82/2.75 bits (update 300) to 0.18/0.83/0.26 (1500); S=10
    content exact 1.00/0.53/0.93, BLEU 49.68/33.73/48.13. The content is learnt in a
    sudden step whose update depends on the seed (seed 1: between 800 and 1000, exact 0.95
    at 1000; seed 3: 0.44 at 1200; seed 2: 0.06 at 1200), so 1500 updates stay and the
    thresholds sit below seed 2's (the earlier 0.8 and 35, set on seed 1 alone, would fail
    it)."""
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
    assert sampled["exact_ignoring_style"] >= 0.4
    assert sampled["bleu"] >= 25.0


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
