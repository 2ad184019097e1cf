"""End-to-end: the user's fairseq commands as subprocesses on tiny generated data.

fairseq-preprocess -> fairseq-train (a few updates) -> fairseq-generate at several
T and l -> fairseq-interactive, fairseq-validate and the hub interface.
"""

import re

import pytest
from cli import bleu, hypotheses, run, run_python, tagged
from conftest import N_TEST


@pytest.fixture(scope="module")
def trained(tiny_run):
    """The session's tiny run (conftest): preprocess + 12 training updates."""
    return tiny_run


def generate(root, *args):
    plugin = run(
        "cmlm-plugin-dir", stdout_only=True
    ).strip()  # the installed path works from anywhere
    return run(
        "fairseq-generate", root / "bin", "--user-dir", plugin, "--task", "cmlm",
        "--path", root / "ckpt" / "checkpoint_last.pt", "--cpu", "--batch-size", "8",
        "--gen-subset", "test", *args,
        cwd=root,
    )  # fmt: skip


@pytest.mark.parametrize("passes", [1, 4, 10])
@pytest.mark.parametrize("beam", [1, 3])
def test_generate(trained, passes, beam):
    out = generate(
        trained, "--iter-decode-max-iter", passes, "--iter-decode-with-beam", beam,
        "--print-step", "--scoring", "sacrebleu",
    )  # fmt: skip
    hypos = hypotheses(out)
    assert sorted(hypos) == list(range(N_TEST))  # one hypothesis per input
    assert not any("<mask>" in h for h in hypos.values())
    assert all(h.strip() for h in hypos.values())  # predicted lengths are >= 1
    steps = [int(s) for s in tagged(out, "I").values()]
    assert len(steps) == N_TEST and all(1 <= s <= passes for s in steps)
    bleu(out)  # the score line is printed


def test_force_max_iter_and_history(trained):
    out = generate(
        trained, "--iter-decode-max-iter", 5, "--iter-decode-force-max-iter",
        "--retain-iter-history", "--print-step",
    )  # fmt: skip
    steps = tagged(out, "I")
    assert set(steps.values()) == {"5"}
    history = tagged(out, "E")
    assert len(history) == 5 * N_TEST
    assert not any("<mask>" in h for h in history.values())
    final = hypotheses(out)
    for i in range(N_TEST):
        assert history[f"{i}_4"] == final[i]  # the last pass is the output


def test_interactive(trained):
    lines = ["a1 a2 a3", "a4 a5", "a6 a7 a8 a9 a10"]
    out = run(
        "fairseq-interactive", trained / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm",
        "--path", trained / "ckpt" / "checkpoint_last.pt", "--cpu", "--source-lang", "src",
        "--target-lang", "tgt", "--iter-decode-max-iter", 4, "--iter-decode-with-beam", 2,
        "--input", "-",
        stdin="\n".join(lines) + "\n",
    )  # fmt: skip
    hypos = hypotheses(out)
    assert sorted(hypos) == [0, 1, 2]
    assert not any("<mask>" in h for h in hypos.values())


def test_validate(trained):
    out = run(
        "fairseq-validate", trained / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm",
        "--path", trained / "ckpt" / "checkpoint_last.pt", "--cpu", "--valid-subset", "valid",
        "--criterion", "cmlm_plugin_loss", "--max-tokens", 1000,
    )  # fmt: skip
    assert "length_loss" in out and "| loss " in out


def test_hub_interface_translates_strings(trained):
    code = (
        "import cmlm_plugin\n"
        "from cmlm_plugin.models.cmlm_transformer import CMLMPluginModel\n"
        f"m = CMLMPluginModel.from_pretrained({str(trained / 'ckpt')!r}, "
        f"checkpoint_file='checkpoint_last.pt', data_name_or_path={str(trained / 'bin')!r})\n"
        "out = m.translate(['a1 a2 a3', 'a4 a5'], iter_decode_max_iter=3)\n"
        "assert isinstance(out, list) and len(out) == 2, out\n"
        "assert all(isinstance(s, str) and s and '<mask>' not in s for s in out), out\n"
        "print('HUB-OK', out)\n"
    )
    run_python(code, "HUB-OK")


def test_calibrate_then_decode_with_calibrated_confidence(trained):
    out = run(
        "cmlm-calibrate", trained / "bin", "--path", trained / "ckpt" / "checkpoint_last.pt",
        "--cpu", "--max-tokens", 1000, "--user-dir", "cmlm_plugin",
    )  # fmt: skip
    match = re.search(r"--calibration-temperature ([\d.]+)", out)
    assert match, out[-2000:]
    temperature = float(match.group(1))
    assert 0.05 <= temperature <= 20.0
    decoded = generate(
        trained, "--iter-decode-max-iter", 4, "--remask-confidence", "calibrated",
        "--calibration-temperature", temperature,
    )  # fmt: skip
    assert sorted(hypotheses(decoded)) == list(range(N_TEST))


@pytest.mark.parametrize("decoding", ["mask_predict", "diffusion"])
def test_interactive_infilling_keeps_the_template(trained, decoding):
    lines = ["a1 a2 a3 a4\tb2 <mask> <mask> b3", "a5 a6", "a7 a8 a9\t<mask> b7 <mask>"]
    out = run(
        "fairseq-interactive", trained / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm",
        "--path", trained / "ckpt" / "checkpoint_last.pt", "--cpu", "-s", "src", "-t", "tgt",
        "--decoding", decoding, "--iter-decode-max-iter", 3, "--constraints", "--input", "-",
        stdin="\n".join(lines) + "\n",
    )  # fmt: skip
    hypos = hypotheses(out)
    assert sorted(hypos) == [0, 1, 2]
    for i, template in ((0, "b2 <mask> <mask> b3"), (2, "<mask> b7 <mask>")):
        words, pattern = hypos[i].split(), template.split()
        assert len(words) == len(pattern) and "<mask>" not in words
        assert all(p == "<mask>" or w == p for w, p in zip(words, pattern))


def test_hub_infill(trained):
    code = (
        "import cmlm_plugin\n"
        "from cmlm_plugin.generation.infill import infill\n"
        "from cmlm_plugin.models.cmlm_transformer import CMLMPluginModel\n"
        f"m = CMLMPluginModel.from_pretrained({str(trained / 'ckpt')!r}, "
        f"checkpoint_file='checkpoint_last.pt', data_name_or_path={str(trained / 'bin')!r})\n"
        "out = infill(m, ['a1 a2 a3', 'a4 a5'], ['b9 <mask> b8', '<mask> <mask>'], iter_decode_max_iter=3)\n"
        "a, b = out[0].split(), out[1].split()\n"
        "assert len(a) == 3 and a[0] == 'b9' and a[2] == 'b8' and len(b) == 2, out\n"
        "assert '<mask>' not in out[0] + out[1], out\n"
        "print('INFILL-OK', out)\n"
    )
    run_python(code, "INFILL-OK")
