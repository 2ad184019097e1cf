"""End-to-end: each bad input of issue 6 through the real commands, checked against the docs.

The "Bad input" table of docs/reliability.md lists, per case, what the user sees. For an error,
the table shows the message with ``…`` where it varies; each test here produces the
case with fairseq's commands and checks that the last line of stderr matches the
table's message piece by piece. Cases without an error get a defined output,
asserted here too.
"""

import re
import shutil

import pytest
import torch
from cli import fails, hypotheses, run
from conftest import ROOT

PLUGIN = "cmlm_plugin"
BAD_INPUT_PAGE = "docs/reliability.md"
BAD_INPUT_SECTION = "## Bad input and what you see"


def readme_cases():
    """``{case id: what-you-see cell}`` from the bad-input table of ``BAD_INPUT_PAGE``."""
    text = (ROOT / BAD_INPUT_PAGE).read_text()
    section = text.split(BAD_INPUT_SECTION, 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z0-9-]+)` \|[^|]*\| (.*) \|$", section, re.M)
    return dict(rows)


def expected_message(case: str) -> str:
    cell = readme_cases()[case]
    match = re.search(r"`((?:cmlm_plugin error|cmlm_plugin warning|FileNotFoundError)[^`]*)`", cell)
    assert match, f"{BAD_INPUT_PAGE} row {case} shows no message"
    return match.group(1)


def assert_matches_readme(case: str, line: str) -> None:
    """Every piece of the table's message (split at ``…``) appears in order in ``line``."""
    position = 0
    for piece in expected_message(case).split("…"):
        found = line.find(piece.strip(), position)
        assert found >= 0, f"{case}: {BAD_INPUT_PAGE} piece {piece!r} not in:\n{line}"
        position = found + len(piece.strip())


def binarize_test(raw, destination, dictionaries):
    """Binarize ``raw/test.{src,tgt}`` with the dictionaries of ``dictionaries``."""
    run(
        "fairseq-preprocess", "--source-lang", "src", "--target-lang", "tgt",
        "--testpref", raw / "test", "--destdir", destination, "--workers", 1,
        "--srcdict", dictionaries / "dict.src.txt", "--tgtdict", dictionaries / "dict.tgt.txt",
    )  # fmt: skip


@pytest.fixture(scope="module")
def odd(tiny_run, tmp_path_factory):
    """The tiny run plus: odd test sources, an AR checkpoint and broken checkpoints."""
    root = tmp_path_factory.mktemp("bad")
    raw = root / "raw"
    raw.mkdir()
    (raw / "test.src").write_text("a1 a2 a3\n\nzz9 qq7\na4 a5\n")  # normal, empty, all-unknown
    (raw / "test.tgt").write_text("b2 b1 b3\nb1\nb1 b2\nb5 b4\n")
    binarize_test(raw, root / "bin", tiny_run / "bin")
    long_raw = root / "long"
    long_raw.mkdir()
    long_line = " ".join(f"a{i % 20}" for i in range(1100))
    (long_raw / "test.src").write_text(f"a1 a2\n{long_line}\n")
    (long_raw / "test.tgt").write_text("b2 b1\nb1\n")
    binarize_test(long_raw, root / "longbin", tiny_run / "bin")
    checkpoint = tiny_run / "ckpt" / "checkpoint_last.pt"
    (root / "truncated.pt").write_bytes(checkpoint.read_bytes()[:20000])
    torch.save({"model": Exploit()}, root / "unsafe.pt")
    run(
        "fairseq-train", tiny_run / "bin", "--task", "translation", "--arch", "transformer",
        "--encoder-layers", 1, "--decoder-layers", 1, "--encoder-embed-dim", 16,
        "--decoder-embed-dim", 16, "--encoder-ffn-embed-dim", 16, "--decoder-ffn-embed-dim", 16,
        "--encoder-attention-heads", 2, "--decoder-attention-heads", 2, "--optimizer", "adam",
        "--lr", "1e-3", "--max-tokens", 1000, "--max-update", 1, "--save-dir", root / "ar",
        "--cpu", "--no-epoch-checkpoints", "--no-save-optimizer-state",
    )  # fmt: skip
    big = root / "bigdict"  # one symbol more than the model's dictionary
    big.mkdir()
    for lang in ("src", "tgt"):
        text = (tiny_run / "bin" / f"dict.{lang}.txt").read_text() + "zzextra 1\n"
        (big / f"dict.{lang}.txt").write_text(text)
    for path in (tiny_run / "bin").glob("test.*"):
        shutil.copy(path, big / path.name)
    return {"run": tiny_run, "root": root, "checkpoint": checkpoint}


class Exploit:
    def __reduce__(self):
        return (shutil.which, ("ls",))


def generate_args(data, checkpoint, *extra):
    return [
        data, "--user-dir", PLUGIN, "--task", "cmlm", "--path", checkpoint, "--cpu",
        "--batch-size", 8, "--gen-subset", "test", *extra,
    ]  # fmt: skip


def interactive_args(odd, *extra):
    return [
        odd["run"] / "bin", "--user-dir", PLUGIN, "--task", "cmlm", "--path", odd["checkpoint"],
        "--cpu", "--source-lang", "src", "--target-lang", "tgt", *extra,
    ]  # fmt: skip


def test_empty_and_unknown_sources_decode_with_defined_outputs(odd):
    out = run("fairseq-generate", *generate_args(odd["root"] / "bin", odd["checkpoint"]))
    hypos = hypotheses(out)
    assert sorted(hypos) == [0, 1, 2, 3]  # the whole batch decodes
    assert hypos[1] == ""  # empty source -> empty hypothesis
    assert hypos[2].strip() and "<mask>" not in hypos[2]  # only <unk>: decoded like any
    assert hypos[0].strip() and hypos[3].strip()
    out = run("fairseq-interactive", *interactive_args(odd), stdin="a1 a2\n\nzz9 qq7\n")
    hypos = hypotheses(out)
    assert sorted(hypos) == [0, 1, 2] and hypos[1] == "" and hypos[2].strip()


def test_too_long_source(odd):
    line = fails("fairseq-generate", *generate_args(odd["root"] / "longbin", odd["checkpoint"]))
    assert_matches_readme("too-long", line)
    out = run(
        "fairseq-generate",
        *generate_args(odd["root"] / "longbin", odd["checkpoint"]),
        "--skip-invalid-size-inputs-valid-test",
    )
    assert sorted(hypotheses(out)) == [0]  # the long one skipped, as the table says


GENERATION_FLAG_CASES = {
    "max-iter": ["--iter-decode-max-iter", 0],
    "beam-zero": ["--iter-decode-with-beam", 0],
    "beam-too-large": ["--iter-decode-with-beam", 100],
    "diffusion-steps": ["--decoding", "diffusion", "--diffusion-steps", -1],
    "block-length": ["--decoding", "diffusion", "--gen-length", 8, "--block-length", 3],
    "int8-half": ["--decoder-impl", "int8", "--fp16"],
    "stop-and-force": ["--stop-unchanged", "--iter-decode-force-max-iter"],
    "remask-regions": ["--remask-regions", 0],
    "remask-ratio": ["--remask-schedule", "fixed", "--remask-ratio", 1.5],
    "calibration-temperature": [
        "--remask-confidence",
        "calibrated",
        "--calibration-temperature",
        0,
    ],
}


@pytest.mark.parametrize("case", sorted(GENERATION_FLAG_CASES))
def test_bad_generation_flags_fail_at_start_up(odd, case):
    args = generate_args(odd["run"] / "bin", odd["checkpoint"], *GENERATION_FLAG_CASES[case])
    assert_matches_readme(case, fails("fairseq-generate", *args))


@pytest.mark.parametrize(
    "case, checkpoint",
    [
        ("wrong-model", "ar/checkpoint_last.pt"),
        ("corrupt-checkpoint", "truncated.pt"),
        ("unsafe-checkpoint", "unsafe.pt"),
    ],
)
def test_bad_checkpoints_are_named(odd, case, checkpoint):
    path = odd["root"] / checkpoint
    line = fails("fairseq-generate", *generate_args(odd["run"] / "bin", path))
    assert_matches_readme(case, line)
    assert str(path) in line


def test_checkpoint_vocabulary_must_fit_the_data(odd):
    line = fails("fairseq-generate", *generate_args(odd["root"] / "bigdict", odd["checkpoint"]))
    assert_matches_readme("vocabulary-mismatch", line)
    assert str(odd["checkpoint"]) in line


@pytest.fixture(scope="module")
def other_vocabulary_ar(odd):
    """An AR ``transformer`` trained 1 update on ``bigdict``: one symbol where our <mask> is."""
    save = odd["root"] / "ar-bigdict"
    run(
        "fairseq-train", odd["root"] / "bigdict", "--task", "translation", "--arch", "transformer",
        "--train-subset", "test", "--valid-subset", "test", "--encoder-layers", 1,
        "--decoder-layers", 1, "--encoder-embed-dim", 16, "--decoder-embed-dim", 16,
        "--encoder-ffn-embed-dim", 16, "--decoder-ffn-embed-dim", 16,
        "--encoder-attention-heads", 2, "--decoder-attention-heads", 2, "--optimizer", "adam",
        "--lr", "1e-3", "--max-tokens", 1000, "--max-update", 1, "--save-dir", save, "--cpu",
        "--no-epoch-checkpoints", "--no-save-optimizer-state",
    )  # fmt: skip
    return save / "checkpoint_last.pt"


@pytest.mark.parametrize(
    "case, reranker",
    [
        ("rerank-missing", "nowhere.pt"),
        ("rerank-not-autoregressive", "cmlm"),
        ("rerank-vocabulary", "bigdict"),
    ],
)
def test_bad_rerankers_are_named(odd, request, case, reranker):
    paths = {"cmlm": odd["checkpoint"], "nowhere.pt": odd["root"] / "nowhere.pt"}
    if reranker == "bigdict":
        paths["bigdict"] = request.getfixturevalue("other_vocabulary_ar")
    path = paths[reranker]
    extra = ["--rerank-with", path, "--iter-decode-with-beam", 2]
    line = fails("fairseq-generate", *generate_args(odd["run"] / "bin", odd["checkpoint"], *extra))
    assert_matches_readme(case, line)
    assert str(path) in line


def test_one_candidate_reranking_warns(odd):
    extra = ["--rerank-with", odd["root"] / "ar" / "checkpoint_last.pt"]
    out = run("fairseq-generate", *generate_args(odd["root"] / "bin", odd["checkpoint"], *extra))
    warning = [line for line in out.splitlines() if "cmlm_plugin warning: --rerank-with" in line]
    assert len(warning) == 1
    assert_matches_readme("rerank-one-candidate", warning[0])
    assert sorted(hypotheses(out)) == [0, 1, 2, 3]  # decoded as without the flag


def test_split_dictionaries_are_refused(odd, tmp_path):
    preprocess_split = [
        "--source-lang", "src", "--target-lang", "tgt", "--trainpref",
        odd["run"] / "raw" / "train", "--destdir", tmp_path / "bin", "--workers", 1,
    ]  # fmt: skip
    run("fairseq-preprocess", *preprocess_split)  # no --joined-dictionary
    line = fails(
        "fairseq-train", tmp_path / "bin", "--user-dir", PLUGIN, "--task", "cmlm",
        "--arch", "cmlm_plugin_tiny", "--criterion", "cmlm_plugin_loss", "--optimizer", "adam",
        "--lr", "1e-3", "--max-tokens", 1000, "--max-update", 1, "--cpu", "--no-save",
    )  # fmt: skip
    assert_matches_readme("split-dictionaries", line)


def test_wrong_user_dir(odd, tmp_path):
    args = generate_args(odd["run"] / "bin", odd["checkpoint"])
    args[args.index("--user-dir") + 1] = tmp_path / "nowhere" / "cmlm_plugin"
    assert_matches_readme("user-dir-missing", fails("fairseq-generate", *args))
    old = tmp_path / "old" / "cmlm_plugin"
    shutil.copytree(ROOT / "cmlm_plugin", old, ignore=shutil.ignore_patterns("__pycache__"))
    version = old / "version.py"
    version.write_text(
        re.sub(r'__version__ = "[^"]+"', '__version__ = "0.0.1"', version.read_text())
    )
    args[args.index("--user-dir") + 1] = old
    assert_matches_readme("user-dir-old-copy", fails("fairseq-generate", *args))


def test_malformed_template(odd):
    line = fails(
        "fairseq-interactive", *interactive_args(odd, "--constraints"), stdin="a1 a2\tb1 </s>\n"
    )
    assert_matches_readme("bad-template", line)


def test_nonfinite_logits_message_is_the_readme_one():
    from cmlm_plugin.errors import CMLMPluginError, one_line
    from cmlm_plugin.generation.step import refuse_nonfinite

    bad = torch.tensor([False, True, True])
    with pytest.raises(CMLMPluginError) as info:
        refuse_nonfinite(bad, {"id": torch.tensor([4, 7, 9])})
    assert_matches_readme("nan-logits", one_line(info.value))


def test_convert_wrong_source(odd, tmp_path):
    line = fails(
        "cmlm-convert", "fairseq-cmlm", odd["checkpoint"], tmp_path / "out.pt",
        "--data", odd["run"] / "bin",
    )  # fmt: skip
    assert_matches_readme("convert-wrong-source", line)
    assert not (tmp_path / "out.pt").exists()


def test_average_too_few(odd, tmp_path):
    shutil.copy(odd["checkpoint"], tmp_path / "checkpoint1.pt")
    line = fails(
        "cmlm-average-checkpoints", "--inputs", tmp_path, "--num-last", 3,
        "--output", tmp_path / "avg.pt",
    )  # fmt: skip
    assert_matches_readme("average-too-few", line)
    assert not (tmp_path / "avg.pt").exists()


def test_readme_lists_every_case():
    cases = set(readme_cases())
    tested = set(GENERATION_FLAG_CASES) | {
        "empty-source", "unknown-source", "too-long", "too-long-raw", "wrong-model", "corrupt-checkpoint",
        "unsafe-checkpoint", "vocabulary-mismatch", "split-dictionaries", "user-dir-missing",
        "user-dir-old-copy", "bad-template", "template-no-mask", "nan-logits",
        "length-out-of-range", "no-mask",
        "convert-wrong-source", "average-too-few", "int8-gpu",
        "rerank-missing", "rerank-not-autoregressive", "rerank-vocabulary", "rerank-one-candidate",
        "unknown-tag", "missing-tag",  # tests/test_task_tags_e2e.py
        "init-ar-missing", "init-ar-shape",  # tests/test_ar_init_e2e.py
    }  # fmt: skip
    assert cases == tested
