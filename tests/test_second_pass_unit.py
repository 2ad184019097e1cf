"""Unit tests of glancing and self-correction inputs (``cmlm_plugin.training.second_pass``)."""

import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cmlm_plugin.training.noise import uniform_mask
from cmlm_plugin.training.second_pass import (
    ctc_glancing_input,
    glancing_input,
    glancing_ratio,
    mask_whole_rows,
    random_subset,
    self_correction_input,
)

PAD, BOS, EOS, MASK = 1, 0, 2, 9
SPECIAL = [PAD, BOS, EOS, MASK]


def batch(lengths, width=10):
    target = torch.full((len(lengths), width), PAD)
    for r, n in enumerate(lengths):
        target[r, :n] = torch.arange(n) % 4 + 4  # real tokens 4..7
    return target


def test_glancing_reveals_ratio_times_the_errors_among_the_masked():
    target = torch.tensor([[4, 5, 6, 7, 4, 5, PAD, PAD]])
    prev = torch.tensor([[MASK, MASK, MASK, MASK, 4, MASK, PAD, PAD]])  # 5 masked
    predicted = torch.tensor([[4, 6, 6, 4, 4, 4, PAD, PAD]])  # wrong at 1, 3, 5: 3 errors
    for ratio, revealed in ((0.0, 0), (0.5, 1), (0.7, 2), (1.0, 3)):
        new, loss = glancing_input(prev, target, predicted, MASK, ratio)
        shown = prev.eq(MASK) & new.ne(MASK)
        assert int(shown.sum()) == revealed  # floor(ratio * 3)
        assert torch.equal(new[shown], target[shown])  # revealed from the reference
        assert torch.equal(loss, new.eq(MASK))  # the loss covers what stays masked
        assert torch.equal(new[~prev.eq(MASK)], prev[~prev.eq(MASK)])  # the rest unchanged


def test_glancing_keeps_one_position_masked():
    target = torch.tensor([[4, 5, 6]])
    prev = torch.tensor([[MASK, MASK, MASK]])
    new, loss = glancing_input(prev, target, torch.tensor([[7, 7, 7]]), MASK, 1.0)
    assert int(new.eq(MASK).sum()) == 1 and int(loss.sum()) == 1


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 10), min_size=1, max_size=6),
    st.floats(0, 1),
    st.integers(0, 2**31 - 1),
)
@example(lengths=[5], ratio=0.9999999999999999, seed=1302)  # 3 wrong: floor(2.99...) = 2
def test_glancing_invariants(lengths, ratio, seed):
    gen = torch.Generator().manual_seed(seed)
    target = batch(lengths)
    prev = uniform_mask(target, MASK, SPECIAL, generator=gen)
    predicted = torch.randint(4, 8, target.shape, generator=gen)
    before = (prev.clone(), target.clone(), predicted.clone())
    new, loss = glancing_input(prev, target, predicted, MASK, ratio, gen)
    assert all(torch.equal(a, b) for a, b in zip(before, (prev, target, predicted)))
    masked = prev.eq(MASK)
    wrong = (masked & predicted.ne(target)).sum(1)
    shown = masked & new.ne(MASK)
    reveal = (wrong.double() * ratio).floor().long()  # float64, as the implementation
    expected = torch.minimum(reveal, (masked.sum(1) - 1).clamp(min=0))
    assert torch.equal(shown.sum(1), expected)
    assert torch.equal(new[shown], target[shown])
    assert torch.equal(new.eq(PAD), target.eq(PAD))  # padding never touched
    assert not (loss & target.eq(PAD)).any()
    assert torch.equal(loss.sum(1) > 0, masked.sum(1) > 0)  # a masked row keeps a loss


def test_self_correction_replaces_the_first_mask_and_trains_there():
    target = torch.tensor([[4, 5, 6, 7, PAD]])
    prev = torch.tensor([[MASK, MASK, 6, 7, PAD]])  # the first pass predicted 0 and 1
    predicted = torch.tensor([[5, 5, 6, 7, PAD]])  # position 0 wrong, 1 right
    remask = torch.tensor([[4, MASK, 6, MASK, PAD]])  # the trained pass masks 1 and 3
    new, loss = self_correction_input(prev, target, predicted, remask, MASK)
    assert new.tolist() == [[5, MASK, 6, MASK, PAD]]  # the model's own token at 0
    assert loss.tolist() == [[True, True, False, True, False]]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 10), min_size=1, max_size=6), st.integers(0, 2**31 - 1))
def test_self_correction_invariants(lengths, seed):
    gen = torch.Generator().manual_seed(seed)
    target = batch(lengths)
    prev = uniform_mask(target, MASK, SPECIAL, generator=gen)
    remask = uniform_mask(target, MASK, SPECIAL, generator=gen)
    predicted = torch.randint(
        4, 8, target.shape, generator=gen
    )  # real tokens (the model bans symbols)
    new, loss = self_correction_input(prev, target, predicted, remask, MASK)
    first, second = prev.eq(MASK), remask.eq(MASK)
    assert torch.equal(new.eq(MASK), second)
    kept = ~first & ~second
    assert torch.equal(new[kept], target[kept])  # reference where neither pass masked
    replaced = first & ~second
    assert torch.equal(new[replaced], predicted[replaced])
    assert torch.equal(loss, first | second)
    assert torch.equal(new.eq(PAD), target.eq(PAD)) and not (loss & target.eq(PAD)).any()


def test_random_subset_draws_exactly_the_counts_from_the_candidates():
    candidates = torch.tensor([[True, False, True, True], [False, False, False, True]])
    chosen = random_subset(candidates, torch.tensor([2, 1]), torch.Generator().manual_seed(0))
    assert chosen.sum(1).tolist() == [2, 1] and not (chosen & ~candidates).any()


def test_glancing_ratio_anneals_linearly_then_holds():
    assert glancing_ratio(0.5, 0.3, 0, 10**6) == 0.5
    assert glancing_ratio(0.5, 0.3, 100, 0) == 0.5
    assert abs(glancing_ratio(0.5, 0.3, 100, 50) - 0.4) < 1e-12
    assert glancing_ratio(0.5, 0.3, 100, 400) == 0.3


def test_mask_whole_rows_masks_every_real_token_of_the_chosen_rows_only():
    target = batch([3, 5, 0])
    prev = uniform_mask(target, MASK, SPECIAL, generator=torch.Generator().manual_seed(0))
    new = mask_whole_rows(prev, target, torch.tensor([True, False, True]), MASK, SPECIAL)
    real = ~torch.isin(target, torch.tensor(SPECIAL))
    assert new[0].eq(MASK).sum() == 3 and torch.equal(new[0].eq(MASK), real[0])
    assert torch.equal(new[1], prev[1])  # a row not chosen keeps its CMLM mask
    assert torch.equal(new[2], prev[2])  # an empty row has nothing to mask
    assert torch.equal(new.eq(PAD), target.eq(PAD))  # padding untouched


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 8), min_size=1, max_size=5),
    st.floats(0, 1),
    st.integers(0, 2**31 - 1),
)
def test_ctc_glancing_reveals_ratio_times_the_wrong_positions_from_the_alignment(
    lengths, ratio, seed
):
    gen = torch.Generator().manual_seed(seed)
    width = 8
    candidates = torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]  # B x L
    candidates[0] = False  # a row without an alignment is left alone
    canvas = torch.randint(10, 14, candidates.shape, generator=gen)  # source ids, never aligned
    predicted = torch.randint(4, 8, candidates.shape, generator=gen).masked_fill(
        torch.rand(candidates.shape, generator=gen) < 0.3, MASK
    )
    aligned = torch.randint(4, 8, candidates.shape, generator=gen).masked_fill(
        torch.rand(candidates.shape, generator=gen) < 0.3, MASK
    )
    new = ctc_glancing_input(canvas, predicted, aligned, candidates, ratio, gen)
    shown = new.ne(canvas)  # B x L
    wrong = (candidates & predicted.ne(aligned)).sum(1)
    assert torch.equal(shown.sum(1), (wrong.double() * ratio).floor().long())
    assert not (shown & ~candidates).any()
    assert torch.equal(new[shown], aligned[shown])  # blanks shown as <mask>
