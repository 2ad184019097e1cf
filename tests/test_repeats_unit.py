"""Unit tests of ``cmlm_decoding.collapse_repeats`` on hand-built rows (no model)."""

import itertools

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cmlm_decoding import collapse_repeats, repeat_positions

PAD = 0  # real tokens are 1..3: a small alphabet makes runs frequent

row_lists = st.lists(st.lists(st.integers(1, 3), min_size=1, max_size=9), min_size=1, max_size=6)


def padded(rows):
    """``N x L`` tokens of the given rows, pad after each, and log-probabilities
    ``-(position + 1) / 10``, so that every kept value can be traced back to its position."""
    width = max(len(r) for r in rows)
    tokens = torch.full((len(rows), width), PAD, dtype=torch.long)
    for i, r in enumerate(rows):
        tokens[i, : len(r)] = torch.tensor(r)
    logprobs = -(torch.arange(width, dtype=torch.float) + 1)[None, :].expand(len(rows), -1) / 10
    return tokens, logprobs.masked_fill(tokens.eq(PAD), 0.0).contiguous()


@settings(max_examples=60, deadline=None)
@given(row_lists)
def test_collapse_equals_groupby_per_row(rows):
    tokens, logprobs = padded(rows)
    out, out_lp = collapse_repeats(tokens, logprobs, PAD)
    assert out.shape == tokens.shape and out_lp.shape == logprobs.shape
    for i, r in enumerate(rows):
        runs = [(k, len(list(g))) for k, g in itertools.groupby(r)]
        expected = [k for k, _ in runs]
        n = len(expected)
        assert out[i, :n].tolist() == expected
        assert out[i, n:].eq(PAD).all() and out_lp[i, n:].eq(0.0).all()
        starts = list(itertools.accumulate([0] + [size for _, size in runs[:-1]]))
        assert out_lp[i, :n].tolist() == logprobs[i, starts].tolist()  # each run's first


@settings(max_examples=60, deadline=None)
@given(row_lists)
def test_no_two_neighbours_equal_and_idempotent(rows):
    tokens, logprobs = padded(rows)
    out, out_lp = collapse_repeats(tokens, logprobs, PAD)
    assert not repeat_positions(out, PAD).any()
    again, again_lp = collapse_repeats(out, out_lp, PAD)
    assert torch.equal(again, out) and torch.equal(again_lp, out_lp)
    assert out.ne(PAD).sum(dim=1).ge(1).all()  # a non-empty row never becomes empty


def test_protected_positions_are_kept():
    tokens = torch.tensor([[2, 2, 2, 3, 3, PAD]])
    logprobs = torch.zeros(1, 6)
    protected = torch.tensor([[False, True, False, False, False, False]])
    out, _ = collapse_repeats(tokens, logprobs, PAD, protected)
    assert out.tolist() == [[2, 2, 3, PAD, PAD, PAD]]  # the given 2 stays, the third goes


def test_rows_without_repeats_are_unchanged():
    tokens = torch.tensor([[1, 2, 1, 2], [3, 1, PAD, PAD]])
    logprobs = torch.tensor([[-0.1, -0.2, -0.3, -0.4], [-0.5, -0.6, 0.0, 0.0]])
    out, out_lp = collapse_repeats(tokens, logprobs, PAD)
    assert torch.equal(out, tokens) and torch.equal(out_lp, logprobs)
