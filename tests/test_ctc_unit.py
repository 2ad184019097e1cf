"""Unit tests of CTC training and decoding (``models/ctc.py``) on hand-built tensors."""

import itertools
import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cmlm_plugin.models.ctc import best_alignment, canvas_lengths, collapse, ctc_nll

BLANK, PAD = 0, 1


def reference_collapse(path):
    """Graves et al. (2006): merge runs of one symbol, then drop the blanks."""
    return [symbol for symbol, _ in itertools.groupby(path) if symbol != BLANK]


def collapsed_rows(tokens, lengths):
    kept, order = collapse(tokens, lengths, BLANK, PAD)
    output = tokens.masked_fill(~kept, PAD).gather(1, order)  # N x L
    return [row[: int(n)] for row, n in zip(output.tolist(), kept.sum(dim=1))]


@given(
    st.lists(
        st.lists(st.sampled_from([BLANK, 2, 3, 4]), min_size=1, max_size=9),
        min_size=1,
        max_size=5,
    )
)
def test_collapse_is_the_best_path_rule(paths):
    width = max(map(len, paths))
    tokens = torch.full((len(paths), width), 2)  # values after each length are ignored
    for i, path in enumerate(paths):
        tokens[i, : len(path)] = torch.tensor(path)
    lengths = torch.tensor([len(p) for p in paths])
    assert collapsed_rows(tokens, lengths) == [reference_collapse(p) for p in paths]


def test_collapse_keeps_a_repeat_that_a_blank_separates():
    tokens = torch.tensor([[5, 5, BLANK, 5, 6, 6, BLANK, BLANK]])
    assert collapsed_rows(tokens, torch.tensor([8])) == [[5, 5, 6]]
    assert collapsed_rows(tokens, torch.tensor([2])) == [[5]]  # the canvas ends at 2


def test_canvas_is_the_ratio_times_the_source_length():
    assert canvas_lengths(torch.tensor([1, 4, 7]), 3).tolist() == [3, 12, 21]


def test_ctc_nll_sums_every_alignment_of_the_reference():
    """On a canvas of 3 positions and 3 classes, the loss is -log of the summed
    probability of the 27 paths that collapse to the reference, enumerated here."""
    torch.manual_seed(0)
    lprobs = torch.log_softmax(torch.randn(2, 3, 3), dim=-1)  # B x L x V
    references = [[2], [2, 2]]
    target = torch.tensor([[2, PAD], [2, 2]])
    nll = ctc_nll(lprobs, torch.tensor([3, 3]), target, torch.tensor([1, 2]), BLANK)
    expected = 0.0
    for row, reference in enumerate(references):
        total = sum(
            math.exp(sum(float(lprobs[row, t, s]) for t, s in enumerate(path)))
            for path in itertools.product(range(3), repeat=3)
            if reference_collapse(path) == reference
        )
        expected -= math.log(total)
    assert math.isclose(float(nll), expected, rel_tol=1e-5)


def test_a_reference_longer_than_its_canvas_costs_nothing_instead_of_infinity():
    lprobs = torch.log_softmax(torch.randn(1, 2, 4), dim=-1)  # B x L x V
    target = torch.tensor([[2, 3, 2]])
    nll = ctc_nll(lprobs, torch.tensor([2]), target, torch.tensor([3]), BLANK)
    assert float(nll) == 0.0


def path_score(lprobs, path):
    return sum(float(lprobs[t, s]) for t, s in enumerate(path))


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.lists(st.integers(1, 5), min_size=1, max_size=3),
    st.lists(st.lists(st.sampled_from([2, 3]), max_size=3), min_size=3, max_size=3),
)
def test_best_alignment_is_the_most_probable_path_to_the_reference(seed, lengths, references):
    """Against all 4^L paths of each row: the alignment collapses to the reference, its
    score is the best among those that do, and a row that has none is all blank."""
    references = references[: len(lengths)]
    gen = torch.Generator().manual_seed(seed)
    width = max(lengths) + 1  # one position of padding at least
    lprobs = torch.log_softmax(3 * torch.randn(len(lengths), width, 4, generator=gen), dim=-1)
    target = torch.full((len(lengths), 3), PAD)
    for row, reference in enumerate(references):
        target[row, : len(reference)] = torch.tensor(reference, dtype=torch.long)
    target_lengths = torch.tensor([len(r) for r in references])
    labels, possible = best_alignment(lprobs, torch.tensor(lengths), target, target_lengths, BLANK)
    for row, (n, reference) in enumerate(zip(lengths, references)):
        paths = [
            p for p in itertools.product(range(4), repeat=n) if reference_collapse(p) == reference
        ]
        assert bool(possible[row]) == bool(paths)
        assert labels[row, n:].eq(BLANK).all()  # after the canvas
        if not paths:
            assert labels[row].eq(BLANK).all()
            continue
        path = labels[row, :n].tolist()
        assert reference_collapse(path) == reference
        best = max(path_score(lprobs[row], p) for p in paths)
        assert math.isclose(path_score(lprobs[row], path), best, abs_tol=1e-4)


def test_best_alignment_separates_a_repeated_symbol_with_a_blank():
    """Even where the model prefers the symbol at every position."""
    lprobs = torch.log(torch.tensor([[[0.1, 0.0, 0.9]] * 3]) + 1e-9)  # B x L x V, favours 2
    labels, possible = best_alignment(
        lprobs, torch.tensor([3]), torch.tensor([[2, 2]]), torch.tensor([2]), BLANK
    )
    assert labels.tolist() == [[2, BLANK, 2]] and possible.tolist() == [True]
