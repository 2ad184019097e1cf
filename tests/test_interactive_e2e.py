"""End-to-end: raw text of any shape through fairseq-interactive and the hub ``translate``.

Generated lines (empty, blanks, tabs, control characters, any script, typed special
symbols, lines longer than the model's positions) go through one fairseq-interactive
run and one hub run per example. Each input line gets exactly one output, in input
order; a line too long for the model gets an empty output and one warning on stderr
naming it, and the lines around it are translated; no output holds ``<mask>``.
"""

import json
import os
import re
import subprocess
import sys

import pytest
from cli import environment, invoke
from conftest import ROOT
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_bad_input_e2e import assert_matches_readme

MAX_POSITIONS = 1024  # the tiny model's source positions, EOS included
WORDS = [f"a{i}" for i in range(20)]  # the toy source vocabulary
SPECIALS = ["<mask>", "<s>", "</s>", "<pad>", "<unk>"]
WARNING = re.compile(r"^cmlm_plugin warning: input line (\d+) \(.*\) has (\d+) tokens", re.M)
EXAMPLES = int(os.environ.get("CMLM_INTERACTIVE_EXAMPLES", "1"))  # each costs two commands


def words(n: int) -> str:
    return " ".join(WORDS[i % len(WORDS)] for i in range(n))


# A line never holds "\n" or "\r": both end a line when fairseq-interactive reads text.
TEXT = st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r")
CONTROL = st.characters(whitelist_categories=("Cc",), blacklist_characters="\n\r")
TOKEN = st.sampled_from(WORDS + SPECIALS) | st.text(TEXT, min_size=1, max_size=6)
LINE = st.one_of(
    st.just(""),
    st.text(st.sampled_from(" \t\u00a0\u3000"), min_size=1, max_size=6),  # blanks only
    st.text(CONTROL, min_size=1, max_size=8),
    st.text(TEXT, max_size=40),  # any script, mixed
    st.lists(TOKEN, min_size=1, max_size=12).map(" ".join),
    st.lists(TOKEN, min_size=2, max_size=6).map("\t".join),  # tabs without --constraints
    st.integers(MAX_POSITIONS - 2, MAX_POSITIONS + 300).map(words),  # around the limit
)
EVERY_KIND = [
    "a1 a2 a3",
    "",
    "   ",
    "\t \t",
    "\x00\x07\x1b[31m\x7f",
    "a1\ta2\t<mask>",
    "Ein Mann фото 自転車 ☃ a3",
    "<mask> <mask> a4",
    "<s> </s> <pad> <unk>",
    words(MAX_POSITIONS - 1),  # the longest that fits (EOS included), over --max-tokens
    words(MAX_POSITIONS),  # one token too many
    "a5 a6",
    words(1100),
    "a7 a8 a9",
]


def too_long(line: str) -> bool:
    return len(line.split()) + 1 > MAX_POSITIONS  # + EOS


def blank(line: str) -> bool:
    return not line.split()


def tagged_in_order(stdout: str, tag: str):
    """``[(id, text)]`` of the ``TAG-id`` lines, in the order printed."""
    found = []
    for row in stdout.split("\n"):
        match = re.match(rf"^{tag}-(\d+)\t(?:\S+\t)?(.*)$", row)
        if match:
            found.append((int(match.group(1)), match.group(2)))
    return found


def check_outputs(lines, outputs, stderr, where):
    assert len(outputs) == len(lines), f"{where}: {len(outputs)} outputs for {len(lines)} lines"
    for i, (line, out) in enumerate(zip(lines, outputs)):
        assert isinstance(out, str), f"{where}: line {i} gave {out!r}"
        assert "<mask>" not in out, f"{where}: line {i} {line[:40]!r} gave {out!r}"
        if too_long(line) or blank(line):
            assert out == "", f"{where}: line {i} should give the empty output, gave {out!r}"
    warned = {int(i): int(n) for i, n in WARNING.findall(stderr)}
    expected = {i: len(line.split()) + 1 for i, line in enumerate(lines) if too_long(line)}
    assert warned == expected, f"{where}: warnings {warned}, expected {expected}"


def interactive(tiny_run, lines, *extra):
    proc = invoke(
        "fairseq-interactive", tiny_run / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm",
        "--path", tiny_run / "ckpt" / "checkpoint_last.pt", "--cpu", "-s", "src", "-t", "tgt",
        "--iter-decode-max-iter", 2, "--buffer-size", 4, "--batch-size", 3,
        "--max-tokens", 1000, *extra,  # fewer than the longest line that fits the model
        stdin="".join(line + "\n" for line in lines), env={"PYTHONIOENCODING": "utf-8"},
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def check_interactive(tiny_run, lines):
    proc = interactive(tiny_run, lines)
    hypos = tagged_in_order(proc.stdout, "H")
    assert [i for i, _ in hypos] == list(range(len(lines))), "one H- line per input, in order"
    assert [i for i, _ in tagged_in_order(proc.stdout, "S")] == list(range(len(lines)))
    check_outputs(lines, [text for _, text in hypos], proc.stderr, "fairseq-interactive")
    detok = [text for _, text in tagged_in_order(proc.stdout, "D")]
    assert not any("<mask>" in text for text in detok)
    return hypos


HUB = """
import json, sys
import cmlm_plugin
from cmlm_plugin.models.cmlm_transformer import CMLMPluginModel
lines = json.load(open(sys.argv[1], encoding="utf-8"))
hub = CMLMPluginModel.from_pretrained(
    sys.argv[2], checkpoint_file="checkpoint_last.pt", data_name_or_path=sys.argv[3]
)
out = hub.translate(lines, iter_decode_max_iter=2)
json.dump(out, open(sys.argv[4], "w", encoding="utf-8"))
"""


def check_hub(tiny_run, lines, folder):
    (folder / "lines.json").write_text(json.dumps(lines), encoding="utf-8")
    args = [folder / "lines.json", tiny_run / "ckpt", tiny_run / "bin", folder / "out.json"]
    proc = subprocess.run(
        [sys.executable, "-c", HUB, *map(str, args)],
        cwd=ROOT, capture_output=True, text=True, env=environment(), timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    outputs = json.loads((folder / "out.json").read_text(encoding="utf-8"))
    check_outputs(lines, outputs, proc.stderr, "hub translate")


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@example(lines=EVERY_KIND)
@given(lines=st.lists(LINE, min_size=1, max_size=24))
def test_every_line_gets_one_output_in_order(tiny_run, tmp_path, lines):
    check_interactive(tiny_run, lines)
    check_hub(tiny_run, lines, tmp_path)


def test_a_too_long_line_costs_only_itself(tiny_run):
    """The issue's case: 12 lines, --buffer-size 4, line 5 longer than the model reads."""
    lines = [words(3 + i % 5) for i in range(12)]
    lines[5] = words(1100)
    proc = interactive(tiny_run, lines, "--skip-invalid-size-inputs-valid-test")
    hypos = dict(tagged_in_order(proc.stdout, "H"))
    assert sorted(hypos) == list(range(12))
    assert hypos[5] == "" and all(hypos[i].strip() for i in hypos if i != 5)
    warnings = [row for row in proc.stderr.split("\n") if "cmlm_plugin warning" in row]
    assert warnings == [
        "cmlm_plugin warning: input line 5 (a0 a1 a2 a3 a4 …) has 1101 tokens (EOS included) "
        "but the model reads at most 1024: skipped, its output is empty; split it into "
        "shorter sentences"
    ]
    assert_matches_readme("too-long-raw", warnings[0])  # the docs/reliability.md row


@pytest.mark.parametrize("length", [MAX_POSITIONS - 1, MAX_POSITIONS])
def test_the_limit_counts_the_eos_and_the_callers_list_is_kept(tmp_path, capsys, length):
    from tinymodel import setup, write_dictionaries

    task, _, _ = setup(write_dictionaries(tmp_path))
    lines = ["w1 w2", " ".join(["w3"] * length), "w4"]
    sources = [task.src_dict.encode_line(line, add_if_not_exist=False).long() for line in lines]
    before = list(sources)
    dataset = task.build_dataset_for_inference(sources, [s.numel() for s in sources])
    batches = task.get_batch_iterator(
        dataset=dataset, max_tokens=100, max_positions=(MAX_POSITIONS, MAX_POSITIONS)
    ).next_epoch_itr(
        shuffle=False
    )  # the long line is over max_tokens: a batch of its own
    real = {}
    for batch in batches:
        tokens = batch["net_input"]["src_tokens"]
        for row, i in enumerate(batch["id"].tolist()):
            real[i] = tokens[row].ne(task.src_dict.pad()).sum().item()
    kept = length + 1 <= MAX_POSITIONS
    assert real == {0: 3, 1: length + 1 if kept else 1, 2: 2}  # the source or EOS alone
    assert all(a is b for a, b in zip(sources, before)) and sources[1].numel() == length + 1
    assert not task.dataset_to_epoch_iter  # raw text is not cached
    warned = WARNING.findall(capsys.readouterr().err)
    assert warned == ([] if kept else [("1", str(length + 1))])
