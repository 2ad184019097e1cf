"""End to end: ``QUICK=1 bash examples/translation/quickstart.sh`` on generated data.

A few hundred generated sentence pairs are written as Multi30k's task1/raw files
(``train``, ``val``, ``test_2016_flickr`` ``.en.gz``/``.de.gz``) and the one-command
quickstart runs on them through ``MULTI30K_DIR``, as a user runs it: data preparation,
training, Mask-Predict decoding and sacreBLEU. The run must end with a sacreBLEU line
carrying its signature and leave ``checkpoint_last.pt``; a rerun with a larger
``MAX_UPDATE`` must continue from that checkpoint; bad input stops with one line.
"""

import gzip
import itertools
import os
import re
import subprocess
from pathlib import Path

import pytest
from cli import environment
from conftest import ROOT
from toydata import write_transduction

SCRIPT = ROOT / "examples" / "translation" / "quickstart.sh"
SPLITS = {"train": 300, "val": 40, "test_2016_flickr": 30}
SYLLABLES = ["ka", "ro", "mi", "ten", "sul", "ba", "de", "lo", "fi", "nar", "pe", "tu"]
# the generated text allows a few hundred sentencepiece pieces, not QUICK's default 1000
SPM_VOCAB = "200"
SIGNATURE = re.compile(
    r"^BLEU\|nrefs:1\|case:\w+\|eff:\w+\|tok:\w+\|smooth:\w+\|version:[\d.]+ = [\d.]+ "
)


def write_multi30k_like(folder: Path) -> None:
    """toydata's transduction task, its token ids spelled as English-/German-like words."""
    words = ["".join(p) for p in itertools.product(SYLLABLES, repeat=2)]
    plain = folder / "plain"
    write_transduction(plain, SPLITS, seed=5, vocab=len(words), max_len=12)

    def spell(token: str) -> str:
        word = words[int(token[1:])]
        return word if token[0] == "a" else word[::-1] + "en"

    for split in SPLITS:
        for side, lang in (("src", "en"), ("tgt", "de")):
            lines = (plain / f"{split}.{side}").read_text().splitlines()
            text = "".join(" ".join(spell(t) for t in line.split()) + "\n" for line in lines)
            with gzip.open(folder / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write(text)


def quickstart(work: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), str(work)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=environment(QUICK="1", OMP_NUM_THREADS=os.environ["OMP_NUM_THREADS"], **env),
        timeout=900,
    )


def last_lines(proc: subprocess.CompletedProcess, n: int = 2):
    return [line for line in proc.stdout.splitlines() if line.strip()][-n:]


@pytest.fixture(scope="module")
def multi30k_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("multi30k_raw")
    write_multi30k_like(folder)
    return folder


def test_quick_run_ends_with_signed_sacrebleu_and_resumes(multi30k_dir, tmp_path):
    work = tmp_path / "work"
    first = quickstart(work, MULTI30K_DIR=str(multi30k_dir), SPM_VOCAB=SPM_VOCAB, MAX_UPDATE="6")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-5000:]
    lines = first.stdout.splitlines()
    assert lines[1].startswith("time estimate: 6 updates at "), lines[:2]  # printed first
    header, score = last_lines(first)
    n_test = SPLITS["test_2016_flickr"]
    assert f"test_2016_flickr ({n_test} sentences)" in header and "T=10, l=5" in header
    assert "at 6 updates" in header
    assert SIGNATURE.match(score), score
    save = work / "checkpoints" / "quickstart-tiny"
    assert (save / "checkpoint_last.pt").exists()
    assert len((save / "test.hyp").read_text().splitlines()) == n_test
    # fairseq's progress is shown (fairseq-train logs to stdout or stderr, depending on
    # which of its modules first configures logging)
    assert re.search(r"\| train \| epoch \d+ \|", first.stdout + first.stderr)

    again = quickstart(work, MULTI30K_DIR=str(multi30k_dir), SPM_VOCAB=SPM_VOCAB, MAX_UPDATE="9")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-5000:]
    assert "MAX_UPDATE=9 (6 done)" in again.stdout
    assert "already prepared" in again.stdout
    log = again.stdout + again.stderr
    assert re.search(r"Loaded checkpoint \S+checkpoint_last\.pt \(epoch \d+ @ 6 updates\)", log)
    assert "num_updates: 9 >= max_update: 9" in log
    assert "at 9 updates" in last_lines(again)[0] and SIGNATURE.match(last_lines(again)[1])

    trained = (save / "checkpoint_last.pt").stat().st_mtime_ns
    done = quickstart(work, MULTI30K_DIR=str(multi30k_dir), SPM_VOCAB=SPM_VOCAB, MAX_UPDATE="9")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "already holds 9 updates (MAX_UPDATE=9): decoding only" in done.stdout
    assert (save / "checkpoint_last.pt").stat().st_mtime_ns == trained  # no extra update
    assert "at 9 updates" in last_lines(done)[0] and SIGNATURE.match(last_lines(done)[1])


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"MULTI30K_DIR": "{missing}"}, "is not a folder"),
        ({"MULTI30K_DIR": "{partial}"}, "val.en.gz not found"),
        ({"MULTI30K_DIR": "{raw}", "SPM_VOCAB": "5000"}, "set SPM_VOCAB="),
        ({"MAX_UPDATE": "ten"}, "MAX_UPDATE must be a positive integer"),
        ({"RECIPE": "best"}, "RECIPE=best has no QUICK=1 smoke run: drop QUICK=1"),
        ({"RECIPE": "fastest"}, "RECIPE must be single or best, got 'fastest'"),
        ({"STUDENT": "ar"}, "STUDENT must be cmlm or ctc, got 'ar'"),
        ({"STUDENT": "ctc"}, "STUDENT=ctc belongs to RECIPE=best"),
    ],
)
def test_bad_input_stops_with_one_line(multi30k_dir, tmp_path, env, expected):
    partial = tmp_path / "partial"
    partial.mkdir()
    for name in ("train.en.gz", "train.de.gz"):
        (partial / name).write_bytes((multi30k_dir / name).read_bytes())
    paths = {"missing": tmp_path / "nowhere", "partial": partial, "raw": multi30k_dir}
    env = {key: value.format(**paths) for key, value in env.items()}
    env.setdefault("MULTI30K_DIR", str(multi30k_dir))
    proc = quickstart(tmp_path / "work", **env)
    assert proc.returncode != 0
    last = [line for line in proc.stderr.splitlines() if line.strip()][-1]
    assert last.startswith("quickstart error: ") and expected in last, proc.stderr[-2000:]
    assert not (
        tmp_path / "work" / "checkpoints" / "quickstart-tiny" / "checkpoint_last.pt"
    ).exists()
