"""End-to-end: infilling templates through a real sentencepiece model, as users run it.

A sentencepiece model is trained on toy English-German text with the project's
``examples/translation/sentencepiece_bpe.py`` (``<mask>`` a user-defined symbol, as
there), the text is encoded with it, binarized, and a tiny CMLM trains a few updates.
``fairseq-interactive --bpe sentencepiece --constraints`` and the hub ``infill`` then
fill templates. The model is poor; the tests check the template's structure: the given
pieces stay in order, no ``▁`` piece of its own stands next to a mask, each ``<mask>``
is one generated piece (``<mask:N>`` N of them), the detokenized output has no double
space, and a template without ``<mask>`` gets one warning and is output as given.
"""

import copy
import random
import subprocess
import sys
from types import SimpleNamespace

import pytest
from cli import environment, invoke, preprocess, run, run_python, tagged
from conftest import ROOT
from test_bad_input_e2e import assert_matches_readme

SCRIPT = ROOT / "examples" / "translation" / "sentencepiece_bpe.py"
WORD_START = "\u2581"
SUBJECTS = [("A man", "Ein Mann"), ("A woman", "Eine Frau"), ("A dog", "Ein Hund"),
            ("A child", "Ein Kind"), ("A boy", "Ein Junge"), ("A girl", "Ein Mädchen")]  # fmt: skip
VERBS = [("rides", "fährt"), ("pushes", "schiebt"), ("repairs", "repariert"),
         ("paints", "bemalt"), ("sees", "sieht"), ("buys", "kauft")]  # fmt: skip
ADJECTIVES = [("red", "rotes"), ("blue", "blaues"), ("small", "kleines"), ("old", "altes"),
              ("new", "neues")]  # fmt: skip
OBJECTS = [("bike", "Fahrrad"), ("car", "Auto"), ("boat", "Boot"), ("house", "Haus")]
# 200 pieces: every word of this text is one piece and no target holds a lone "▁"
VOCAB_SIZE = 200

LINES = [
    "A man rides a red bike .\tEin Mann <mask> <mask> <mask> Fahrrad .",
    "A woman sees a new car .\tEine Frau <mask:2> neues Auto .",
    "A dog pushes a small boat .",  # no template: translated
    "A child buys a old house .\t<mask> Kind kauft ein altes <mask>",
    "A boy paints a blue car .\tEin <mask",  # unclosed: no <mask> at all
]
TEMPLATED = {0: 3, 1: 2, 3: 2}  # line: pieces to generate
UNMASKED = 4


def sentences(count: int, rng: random.Random):
    pairs = []
    for _ in range(count):
        (s, t), (vs, vt) = rng.choice(SUBJECTS), rng.choice(VERBS)
        (a, at), (o, ot) = rng.choice(ADJECTIVES), rng.choice(OBJECTS)
        pairs.append((f"{s} {vs} a {a} {o} .", f"{t} {vt} ein {at} {ot} ."))
    return pairs


def python(*args, stdin=None) -> str:
    proc = subprocess.run(
        [sys.executable, *map(str, args)], input=stdin, capture_output=True, text=True,
        cwd=ROOT, env=environment(), timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module")
def spm_run(tmp_path_factory):
    """Toy text -> sentencepiece (the example script) -> binarized -> a 40-update CMLM."""
    root = tmp_path_factory.mktemp("spm")
    text, pieces = root / "text", root / "pieces"
    text.mkdir()
    pieces.mkdir()
    rng = random.Random(5)
    for split, count in {"train": 400, "valid": 20, "test": 10}.items():
        pairs = sentences(count, rng)
        for side, lang in enumerate(("src", "tgt")):
            (text / f"{split}.{lang}").write_text("\n".join(p[side] for p in pairs) + "\n")
    python(
        SCRIPT, "train", "--input", text / "train.src", text / "train.tgt",
        "--model-prefix", root / "spm", "--vocab-size", VOCAB_SIZE, "--model-type", "bpe",
    )  # fmt: skip
    for path in text.iterdir():
        raw = path.read_text()
        encoded = python(SCRIPT, "encode", "--model", root / "spm.model", stdin=raw)
        (pieces / path.name).write_text(encoded)
    targets = (pieces / "train.tgt").read_text().split()
    assert WORD_START not in targets and "<mask>" not in targets  # the data the tests assume
    preprocess(pieces, root / "bin")
    run(
        "fairseq-train", root / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm",
        "--arch", "cmlm_plugin_tiny", "--criterion", "cmlm_plugin_loss", "--optimizer", "adam",
        "--lr", "2e-3", "--max-tokens", "1000", "--max-update", "40", "--save-dir", root / "ckpt",
        "--cpu", "--no-epoch-checkpoints", "--seed", "2", "--no-save-optimizer-state",
        cwd=ROOT,
    )  # fmt: skip
    return root


@pytest.fixture(scope="module")
def template_bpe(spm_run):
    """The task's BPE of ``fairseq-interactive``: sentencepiece wrapped in ``TemplateBPE``."""
    from fairseq.data import Dictionary
    from fairseq.data.encoders.sentencepiece_bpe import SentencepieceBPE

    from cmlm_plugin.generation.templates import TemplateBPE
    from cmlm_plugin.symbols import MASK_SYMBOL

    bpe = SentencepieceBPE(
        SimpleNamespace(
            sentencepiece_model=str(spm_run / "spm.model"),
            sentencepiece_enable_sampling=False,
            sentencepiece_alpha=None,
        )
    )
    dictionary = Dictionary.load(str(spm_run / "bin" / "dict.tgt.txt"))
    dictionary.add_symbol(MASK_SYMBOL)  # as --task cmlm loads it
    return TemplateBPE(bpe, dictionary)


def test_templates_encode_mask_by_mask(template_bpe):
    from cmlm_plugin.errors import CMLMPluginError
    from cmlm_plugin.generation.templates import TemplateBPE

    sp = template_bpe.bpe
    template = "Ein Mann <mask> <mask> <mask> Fahrrad ."
    # sentencepiece alone fixes a "▁" piece in front of every mask: the encoding
    assert sp.encode(template).split().count(WORD_START) == 3
    expected = f"{sp.encode('Ein Mann')} <mask> <mask> <mask> {sp.encode('Fahrrad .')}"
    assert template_bpe.encode(template) == expected
    assert template_bpe.encode("Ein Mann <mask:3> Fahrrad .") == expected
    # text glued to a mask continues its word when the dictionary has the continuation piece;
    # the toy data's dictionary has word-initial pieces only
    assert template_bpe.encode("Ein <mask>.") == "▁Ein <mask> ▁."
    assert template_bpe.encode("<mask>Fahrrad") == "<mask> ▁Fahrrad"
    with_dot = copy.deepcopy(template_bpe.dictionary)
    with_dot.add_symbol(".")
    assert TemplateBPE(template_bpe.bpe, with_dot).encode("Ein <mask>.") == "▁Ein <mask> ."
    assert template_bpe.encode("A man rides a bike .") == sp.encode("A man rides a bike .")
    assert "<mask>" not in template_bpe.encode("Ein <mask")  # unclosed: text, not a mask

    with pytest.raises(CMLMPluginError, match=r"<mask:0>: write <mask:N> with 1 <= N"):
        template_bpe.encode("Ein <mask:0> .")


def test_interactive_fills_word_slots(spm_run, template_bpe):
    proc = invoke(
        "fairseq-interactive", spm_run / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm",
        "--path", spm_run / "ckpt" / "checkpoint_last.pt", "--cpu", "-s", "src", "-t", "tgt",
        "--bpe", "sentencepiece", "--sentencepiece-model", spm_run / "spm.model",
        "--constraints", "--iter-decode-max-iter", 4, "--iter-decode-with-beam", 2,
        "--buffer-size", 2, "--batch-size", 2,
        stdin="".join(line + "\n" for line in LINES), env={"PYTHONIOENCODING": "utf-8"},
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    given, hypos = tagged(proc.stdout, "C"), tagged(proc.stdout, "H")
    detok = tagged(proc.stdout, "D")
    assert sorted(int(i) for i in hypos) == list(range(len(LINES)))
    for line, count in TEMPLATED.items():
        template = LINES[line].split("\t")[1]
        pieces = given[str(line)].split()
        assert pieces == template_bpe.encode(template).split()  # the C- line
        assert WORD_START not in pieces and pieces.count("<mask>") == count
        score, text = hypos[str(line)].split("\t")
        out = text.split()
        assert len(out) == len(pieces), (pieces, out)  # one piece per <mask>
        assert [o for o, p in zip(out, pieces) if p != "<mask>"] == [
            p for p in pieces if p != "<mask>"
        ]  # the given pieces, unchanged and in order
        filled = [o for o, p in zip(out, pieces) if p == "<mask>"]
        assert "<mask>" not in filled and WORD_START not in filled, out
        words = detok[str(line)].split("\t")[1]
        assert "  " not in words and words == words.strip(), words
        assert words == template_bpe.decode(text)
    assert detok["0"].split("\t")[1].startswith("Ein Mann ")
    assert detok["0"].endswith(" Fahrrad .") and detok["1"].endswith(" neues Auto .")
    assert "2" not in given and hypos["2"].split("\t")[1].strip()  # translated normally
    # the template without <mask>: output as given, one warning naming its line
    assert "<mask>" not in given[str(UNMASKED)]
    assert hypos[str(UNMASKED)] == "0.0\t" + given[str(UNMASKED)]
    warnings = [row for row in proc.stderr.split("\n") if "cmlm_plugin warning" in row]
    assert len(warnings) == 1 and f"input line {UNMASKED}:" in warnings[0], warnings
    assert_matches_readme("template-no-mask", warnings[0])  # the docs/reliability.md row
    assert f"template ({given[str(UNMASKED)][:5]}" in warnings[0], warnings[0]


def test_hub_infill_through_sentencepiece(spm_run):
    code = (
        "import cmlm_plugin\n"
        "from cmlm_plugin.generation.infill import infill\n"
        "from cmlm_plugin.models.cmlm_transformer import CMLMPluginModel\n"
        f"m = CMLMPluginModel.from_pretrained({str(spm_run / 'ckpt')!r}, "
        f"checkpoint_file='checkpoint_last.pt', data_name_or_path={str(spm_run / 'bin')!r}, "
        f"bpe='sentencepiece', sentencepiece_model={str(spm_run / 'spm.model')!r})\n"
        "out = infill(m, ['A man rides a red bike .', 'A girl sees a new car .'],\n"
        "             ['Ein Mann <mask> <mask> <mask> Fahrrad .', 'Ein <mask:3> Auto .'],\n"
        "             iter_decode_max_iter=3)\n"
        "assert out[0].startswith('Ein Mann ') and out[0].endswith(' Fahrrad .'), out\n"
        "assert out[1].startswith('Ein ') and out[1].endswith(' Auto .'), out\n"
        "assert all('  ' not in o and '<mask>' not in o for o in out), out\n"
        "assert [len(o.split()) for o in out] == [7, 6], out\n"  # word-initial pieces: words
        "print('SPM-INFILL-OK', out)\n"
    )
    run_python(code, "SPM-INFILL-OK")
