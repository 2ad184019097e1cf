"""End-to-end: the masked-diffusion objective and samplers through fairseq's commands."""

import re

import pytest
from cli import hypotheses, preprocess, run, tagged
from toydata import write_transduction

N_TEST = 12


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("diffusion")
    write_transduction(root / "raw", {"train": 300, "valid": 20, "test": N_TEST}, seed=4)
    preprocess(root / "raw", root / "bin")
    run(
        "fairseq-train", root / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm",
        "--objective", "diffusion", "--p-uncond", 0.1, "--arch", "cmlm_plugin_tiny",
        "--criterion", "cmlm_plugin_loss", "--label-smoothing", 0, "--optimizer", "adam",
        "--lr", "1e-3", "--max-tokens", 1000, "--max-update", 10, "--save-dir", root / "ckpt",
        "--cpu", "--no-epoch-checkpoints", "--seed", 3,
    )  # fmt: skip
    return root


def generate(root, *args):
    return run(
        "fairseq-generate", root / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm",
        "--path", root / "ckpt" / "checkpoint_last.pt", "--cpu", "--batch-size", 5,
        "--gen-subset", "test", "--print-step", *args,
    )  # fmt: skip


def test_validate_reports_the_bound_with_monte_carlo_samples(trained):
    outs = {}
    for k in (1, 4):
        out = run(
            "fairseq-validate", trained / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm",
            "--objective", "diffusion", "--mc-samples", k, "--criterion", "cmlm_plugin_loss",
            "--label-smoothing", 0, "--path", trained / "ckpt" / "checkpoint_last.pt", "--cpu",
            "--max-tokens", 1000,
        )  # fmt: skip
        outs[k] = {
            key: float(re.search(rf"\| {key} ([\d.]+)", out).group(1))
            for key in ("nll_loss", "wpb")
        }
    assert outs[4]["wpb"] == 4 * outs[1]["wpb"]  # four noise draws of the same tokens
    assert outs[1]["nll_loss"] > 0 and outs[4]["nll_loss"] > 0


@pytest.mark.parametrize(
    "flags, most_calls",
    [
        ((), 4),
        (("--block-length", 2), 4),
        (("--confidence-threshold", 0.3), None),
        (("--cfg-scale", 1.0), 4),
        (("--sampling-temperature", 1.0, "--remasking", "random"), 4),
    ],
)
def test_diffusion_sampler(trained, flags, most_calls):
    out = generate(trained, "--decoding", "diffusion", "--diffusion-steps", 4,
                   "--iter-decode-with-beam", 2, *flags)  # fmt: skip
    hypos = hypotheses(out)
    assert sorted(hypos) == list(range(N_TEST))
    assert not any("<mask>" in h for h in hypos.values())
    nfe = [int(v) for v in tagged(out, "I").values()]
    assert len(nfe) == N_TEST and min(nfe) >= 1
    if most_calls is not None:
        assert max(nfe) <= most_calls


def test_mask_predict_variants_through_the_cli(trained):
    out = generate(
        trained, "--iter-decode-max-iter", 5, "--remask-schedule", "cosine",
        "--remask-confidence", "consistency", "--monotone",
    )  # fmt: skip
    hypos = hypotheses(out)
    assert sorted(hypos) == list(range(N_TEST))
    assert not any("<mask>" in h for h in hypos.values())


def test_fixed_generation_length_with_eos_fill(tmp_path_factory, trained):
    root = tmp_path_factory.mktemp("eosfill")
    run(
        "fairseq-train", trained / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm",
        "--objective", "diffusion", "--eos-fill", "--arch", "cmlm_plugin_tiny",
        "--criterion", "cmlm_plugin_loss", "--label-smoothing", 0, "--optimizer", "adam",
        "--lr", "1e-3", "--max-tokens", 1000, "--max-update", 10, "--save-dir", root,
        "--cpu", "--no-epoch-checkpoints", "--seed", 3,
    )  # fmt: skip
    out = run(
        "fairseq-generate", trained / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm",
        "--path", root / "checkpoint_last.pt", "--cpu", "--batch-size", 5, "--gen-subset",
        "test", "--decoding", "diffusion", "--gen-length", 12, "--block-length", 4,
        "--diffusion-steps", 6, "--print-step",
    )  # fmt: skip
    hypos = hypotheses(out)
    assert sorted(hypos) == list(range(N_TEST))
    assert all(len(h.split()) <= 12 and "<mask>" not in h for h in hypos.values())
    assert all(1 <= int(n) <= 6 for n in tagged(out, "I").values())
