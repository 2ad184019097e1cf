"""End to end: one CMLM for two tasks, tagged as users build and decode it.

Multi30k-like text in English, German and French (generated, ``.gz`` files as Multi30k's
task1/raw) goes through ``examples/translation/prepare-multi30k-tagged.sh`` (sentencepiece,
``<2de>``/``<2fr>`` in front of every source, one binarized pair), a tiny CMLM trains a
few updates on it, and the real commands decode: ``fairseq-generate`` on each task's test
split and on an untagged test set with ``--target-tag``, ``fairseq-interactive`` through
sentencepiece with the tag in the line, and the hub ``translate``. The model is poor; the
tests check where the tags go and the bad-input rows of docs/reliability.md.
"""

import gzip
import itertools
import os
from pathlib import Path

import pytest
from cli import environment, fails, invoke, run, run_python, tagged
from conftest import ROOT
from test_bad_input_e2e import assert_matches_readme
from toydata import write_transduction

SCRIPT = ROOT / "examples" / "translation" / "prepare-multi30k-tagged.sh"
SPLITS = {"train": 300, "val": 30, "test_2016_flickr": 12}
SYLLABLES = ["ka", "ro", "mi", "ten", "sul", "ba", "de", "lo", "fi", "nar", "pe", "tu"]
SPM_VOCAB = "200"  # the generated text allows a few hundred pieces
WORD_START = "\u2581"


def write_three_languages(folder: Path) -> None:
    """toydata's transduction task spelled as English, German-like and French-like words."""
    words = ["".join(p) for p in itertools.product(SYLLABLES, repeat=2)]
    plain = folder / "plain"
    write_transduction(plain, SPLITS, seed=7, vocab=len(words), max_len=10)
    spell = {
        "en": lambda t: words[int(t[1:])],
        "de": lambda t: words[int(t[1:])][::-1] + "en",
        "fr": lambda t: "le" + words[int(t[1:])][::-1],
    }
    for split in SPLITS:
        for side, langs in (("src", ["en"]), ("tgt", ["de", "fr"])):
            lines = (plain / f"{split}.{side}").read_text().splitlines()
            for lang in langs:
                text = "".join(" ".join(map(spell[lang], ln.split())) + "\n" for ln in lines)
                with gzip.open(folder / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                    f.write(text)


@pytest.fixture(scope="module")
def tagged_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("tags")
    write_three_languages(root / "multi30k")
    proc = invoke(
        "bash", SCRIPT, root / "data", cwd=ROOT,
        env={"MULTI30K_DIR": str(root / "multi30k"), "SPM_VOCAB": SPM_VOCAB},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    run(
        "fairseq-train", root / "data" / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm",
        "--arch", "cmlm_plugin_tiny", "--criterion", "cmlm_plugin_loss", "--optimizer", "adam",
        "--lr", "1e-3", "--max-tokens", "1000", "--max-update", "8", "--save-dir", root / "ckpt",
        "--cpu", "--no-epoch-checkpoints", "--seed", "2", cwd=ROOT,
    )  # fmt: skip
    return root


def generate(run_root, data, *extra):
    return [
        data, "--user-dir", "cmlm_plugin", "--task", "cmlm", "--cpu", "--batch-size", 8,
        "--path", run_root / "ckpt" / "checkpoint_last.pt", "--iter-decode-max-iter", 2, *extra,
    ]  # fmt: skip


def sources(output: str):
    found = tagged(output, "S")
    return [found[i] for i in sorted(found, key=int)]


def test_prepared_data_has_one_tag_per_task(tagged_run):
    data = tagged_run / "data"
    tasks = [line.split("\t")[:2] for line in (data / "bin" / "tasks.txt").read_text().splitlines()]
    assert tasks == [["test", "<2de>"], ["test1", "<2fr>"]]
    symbols = [line.split()[0] for line in (data / "bin" / "dict.src.txt").read_text().splitlines()]
    assert "<2de>" in symbols and "<2fr>" in symbols
    train = (data / "spm" / "train.src").read_text().splitlines()
    assert len(train) == 2 * SPLITS["train"]  # every English sentence once per task
    assert [ln.split()[0] for ln in train] == ["<2de>"] * 300 + ["<2fr>"] * 300


def test_each_task_decodes_its_test_split(tagged_run):
    bin_ = tagged_run / "data" / "bin"
    for split, tag in (("test", "<2de>"), ("test1", "<2fr>")):
        out = run("fairseq-generate", *generate(tagged_run, bin_, "--gen-subset", split))
        srcs = sources(out)
        assert len(srcs) == SPLITS["test_2016_flickr"]
        assert all(s.split()[0] == tag and s.split()[1].startswith(WORD_START) for s in srcs)
        assert len(tagged(out, "H")) == SPLITS["test_2016_flickr"]


def test_untagged_test_set_takes_the_target_tag(tagged_run):
    data = tagged_run / "data"
    plain = tagged_run / "plainbin"
    run(
        "fairseq-preprocess", "--source-lang", "en", "--target-lang", "fr", "--workers", 1,
        "--testpref", data / "spm" / "test_2016_flickr", "--destdir", plain,
        "--srcdict", data / "bin" / "dict.src.txt", "--tgtdict", data / "bin" / "dict.tgt.txt",
    )  # fmt: skip
    line = fails("fairseq-generate", *generate(tagged_run, plain, "--gen-subset", "test"))
    assert_matches_readme("missing-tag", line)
    assert "split test: 12 of 12 source sentences" in line
    out = run(
        "fairseq-generate",
        *generate(tagged_run, plain, "--gen-subset", "test", "--target-tag", "<2fr>"),
    )
    assert [s.split()[0] for s in sources(out)] == ["<2fr>"] * SPLITS["test_2016_flickr"]
    line = fails(
        "fairseq-generate",
        *generate(tagged_run, plain, "--gen-subset", "test", "--target-tag", "<2es>"),
    )
    assert_matches_readme("unknown-tag", line)
    assert "this model knows <2de>, <2fr>" in line


def interactive(tagged_run, lines, *extra):
    data = tagged_run / "data"
    return invoke(
        "fairseq-interactive", data / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm",
        "--path", tagged_run / "ckpt" / "checkpoint_last.pt", "--cpu",
        "--source-lang", "src", "--target-lang", "tgt", "--iter-decode-max-iter", 2,
        "--bpe", "sentencepiece", "--sentencepiece-model", data / "spm" / "spm.model", *extra,
        stdin="".join(ln + "\n" for ln in lines), env={"PYTHONIOENCODING": "utf-8"}, timeout=300,
    )  # fmt: skip


def test_interactive_takes_the_tag_from_the_line(tagged_run):
    lines = ["<2de> kamiro tensul", "<2fr>baro", "kaka roro mimi"]
    proc = interactive(tagged_run, lines, "--target-tag", "<2de>")
    assert proc.returncode == 0, proc.stderr[-3000:]
    srcs = sources(proc.stdout)
    assert [s.split()[0] for s in srcs] == ["<2de>", "<2fr>", "<2de>"]  # the line's own wins
    assert all(s.split()[1].startswith(WORD_START) for s in srcs)  # the tag is not cut up
    assert len(tagged(proc.stdout, "H")) == 3
    proc = interactive(tagged_run, lines)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert_matches_readme("missing-tag", last)
    assert "input line 2 starts" in last
    proc = interactive(tagged_run, ["<2es> kamiro"])
    assert proc.returncode == 1
    assert_matches_readme("unknown-tag", proc.stderr.strip().splitlines()[-1])


def test_hub_translate_reads_the_tag(tagged_run):
    data = tagged_run / "data"
    code = (
        "import cmlm_plugin\n"
        "from cmlm_plugin.errors import CMLMPluginError\n"
        "from cmlm_plugin.models.cmlm_transformer import CMLMPluginModel\n"
        f"m = CMLMPluginModel.from_pretrained({str(tagged_run / 'ckpt')!r}, "
        f"checkpoint_file='checkpoint_last.pt', data_name_or_path={str(data / 'bin')!r}, "
        f"bpe='sentencepiece', sentencepiece_model={str(data / 'spm' / 'spm.model')!r})\n"
        "tokens = m.encode('<2fr> kamiro tensul')\n"
        "assert m.src_dict[tokens[0]] == '<2fr>', m.src_dict.string(tokens)\n"
        "out = m.translate(['<2de> kamiro', '<2fr> kamiro'], iter_decode_max_iter=2)\n"
        "assert len(out) == 2, out\n"
        "try:\n"
        "    m.translate('<2es> kamiro')\n"
        "except CMLMPluginError as e:\n"
        "    assert 'unknown task tag' in str(e), e\n"
        "    print('HUB-TAGS-OK')\n"
    )
    run_python(code, "HUB-TAGS-OK")
