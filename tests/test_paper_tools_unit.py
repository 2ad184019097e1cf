"""Unit tests: cmlm-table's parsing and scoring, decoder frames, converter length heads."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cmlm_plugin.checkpoints.convert import DISABLED, _shifted_length_head
from cmlm_plugin.cli import table
from cmlm_plugin.errors import CMLMPluginError
from cmlm_plugin.models.frames import add_frame, prepend_bos

PAD, BOS, EOS, MASK = 1, 0, 2, 9

GENERATE_OUTPUT = """S-1\tein Haus
T-1\ta house
H-1\t-0.25\ta house
D-1\t-0.25\ta house
I-1\t3
S-0\tzwei Hunde
T-0\ttwo dogs
H-0\t-0.5\ttwo <unk>
D-0\t-0.5\ttwo <unk>
I-0\t5
"""
TIMING = "2026 | INFO | fairseq_cli.generate | Translated 2 sentences (9 tokens) in 0.5s (4.00 sentences/s, 18.00 tokens/s)"


def test_parse_generate_orders_by_id_and_reads_timing():
    found = table.parse_generate(GENERATE_OUTPUT, TIMING)
    assert found["hyps"] == ["two <unk>", "a house"]
    assert found["refs"] == ["two dogs", "a house"]
    assert found["passes"] == 4.0
    assert (found["sentences"], found["sentences_per_s"], found["tokens_per_s"]) == (2, 4.0, 18.0)


def test_parse_generate_without_translations_is_an_error():
    with pytest.raises(CMLMPluginError, match="no translations"):
        table.parse_generate("", "")


def test_scores_count_masks_and_bleu_of_identical_text_is_100():
    refs = ["a small house by the lake", "two dogs run on the grass"]
    out = table.scores(refs, refs, tokenized=True, compound=True, tokenize="13a")
    assert out["sacrebleu"] == 100.0 and out["tokenized_bleu"] == 100.0
    assert out["with_mask_or_unk"] == 0 and out["brevity_penalty"] == 1.0
    assert out["distinct_outputs"] == 2
    assert table.scores(refs[:1] * 2, refs, False, False, "13a")["distinct_outputs"] == 1
    assert out["length_exact"] == out["length_within_2"] == 1.0 and out["length_error_mean"] == 0
    assert (
        table.scores(["a <mask> house", "two <unk>"], refs, False, False, "13a")["with_mask_or_unk"]
        == 2
    )


def test_length_errors_count_words_of_output_minus_reference():
    refs = ["a b c d", "a b c d e f g h", "a", "a b"]
    hyps = ["a b c d", "a b c d e", "a b c d e", "a b"]  # errors 0, -3, +4, 0
    out = table.length_errors(hyps, refs)
    assert out == {"length_error_mean": 0.25, "length_exact": 0.5, "length_within_2": 0.5}
    short = table.scores(["a small house"], ["a small house by the lake"], False, False, "13a")
    assert short["brevity_penalty"] == round(math.exp(1 - 6 / 3), 3)  # sacreBLEU's BP


def test_compound_splitting_marks_hyphens_between_words():
    assert table.split_compounds("Zug-Fahrt ist gut") == "Zug ##AT##-##AT## Fahrt ist gut"
    assert table.split_compounds("a-b-c") == "a ##AT##-##AT## b ##AT##-##AT## c"
    assert table.split_compounds("a - b") == "a - b"  # a free-standing dash stays


def test_numbers_refuse_bad_lists():
    assert table.numbers("1,2,4,10", "--iters") == [1, 2, 4, 10]
    for bad in ("", "0,1", "a", "1,-2"):
        with pytest.raises(CMLMPluginError, match="--iters"):
            table.numbers(bad, "--iters")


def test_fairseq_cmlm_gets_one_pass_less_and_ours_the_same_t():
    args = table.build_parser().parse_args(["DATA", "--cmlm", "x.pt"])
    args.user_dir = "plugin"
    ours = table.command(dict(kind="cmlm", path="x.pt", config="T=10,l=5"), args)
    theirs = table.command(dict(kind="fairseq-cmlm", path="y.pt", config="T=10,l=5"), args)
    ar = table.command(dict(kind="ar", path="z.pt", beam=5), args)
    assert ours[ours.index("--iter-decode-max-iter") + 1] == "10"
    assert theirs[theirs.index("--iter-decode-max-iter") + 1] == "9"
    assert "translation_lev" in theirs and "--beam" in ar and "--print-step" not in ar
    for cmd in (ours, theirs, ar):
        assert cmd[cmd.index("--required-batch-size-multiple") + 1] == "1"


def test_markdown_prints_the_paper_beside_matching_cells():
    row = dict(kind="cmlm", label="ours", T=10, l=5, sacrebleu=20.0, sentences_per_s=5.0,
               tokens_per_s=60.0, passes=9.8, with_mask_or_unk=0, sentences=10,
               brevity_penalty=0.9, length_exact=0.25, length_within_2=0.75,
               length_error_mean=-1.5)  # fmt: skip
    text = table.markdown([row, {**row, "T": 4}], "wmt14-en-de", tokenized=False)
    lines = text.splitlines()
    assert lines[2].endswith("| 27.03 |") and lines[3].endswith("| - |")
    assert "| 0.900 | 25.0 / 75.0 % | -1.50 |" in lines[2]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=5), st.sampled_from(["bos-eos", "eos"]))
def test_add_frame_wraps_each_row_and_keeps_the_real_slice(lengths, frame):
    width = max(lengths)
    tokens = torch.full((len(lengths), width), PAD)  # N x L
    for i, n in enumerate(lengths):
        tokens[i, :n] = torch.arange(10, 10 + n)
    framed, real = add_frame(tokens, frame, PAD, BOS, EOS)
    given = tokens.ne(PAD)  # N x L; a shorter row's EOS may sit in the slice, past its end
    assert torch.equal(framed[:, real][given], tokens[given])
    lead = 1 if frame == "bos-eos" else 0
    for i, n in enumerate(lengths):
        row = framed[i][framed[i].ne(PAD)].tolist()
        assert row == [BOS] * lead + list(range(10, 10 + n)) + [EOS]


def test_no_frame_is_the_identity():
    tokens = torch.tensor([[5, 6, PAD]])
    framed, real = add_frame(tokens, "none", PAD, BOS, EOS)
    assert framed is tokens and real == slice(None)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=5), st.booleans())
def test_prepend_bos_puts_bos_right_before_each_source(lengths, left_pad):
    width = max(lengths)
    tokens = torch.full((len(lengths), width), PAD)
    for i, n in enumerate(lengths):
        body = torch.arange(20, 20 + n)
        if left_pad:
            tokens[i, width - n :] = body
        else:
            tokens[i, :n] = body
    out = prepend_bos(tokens, PAD, BOS)
    assert out.shape == (len(lengths), width + 1)
    for i, n in enumerate(lengths):
        assert out[i][out[i].ne(PAD)].tolist() == [BOS] + list(range(20, 20 + n))
        pads_before = (out[i] == PAD).nonzero().view(-1).tolist()
        real = out[i].ne(PAD).nonzero().view(-1)
        assert real.tolist() == list(range(int(real[0]), int(real[0]) + n + 1))  # contiguous
        assert (left_pad and pads_before == list(range(width - n))) or not left_pad


def test_shifted_length_head_maps_classes_and_disables_the_rest():
    weight = torch.randn(8, 4)  # class k of the source = k - 2 words
    head = _shifted_length_head(weight, shift=2)
    assert torch.equal(head["length_head.proj.weight"][:6], weight[2:])
    assert torch.equal(head["length_head.proj.bias"][:6], torch.zeros(6))
    assert (head["length_head.proj.bias"][6:] == DISABLED).all()
