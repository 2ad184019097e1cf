"""Unit tests of the Mask-Predict variants: schedules, confidences, monotone decoding."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from test_decoding_unit import MASK, PAD, FakeModel

from cmlm_decoding import MaskPredictOptions, mask_predict
from cmlm_decoding.confidence import position_confidence
from cmlm_decoding.schedules import REMASK_SCHEDULES, remask_count


def counts(n, passes, schedule, ratio=0.5):
    return [
        int(remask_count(torch.tensor([n]), passes, t, schedule, ratio)) for t in range(1, passes)
    ]


def test_schedule_counts():
    assert counts(10, 4, "linear") == [7, 5, 2]
    assert counts(10, 4, "cosine") == [
        math.floor(10 * math.cos(math.pi * t / 8)) for t in (1, 2, 3)
    ]
    assert counts(10, 4, "exponential") == [8, 7, 5]  # 10 (1 - 2^(t-4)) floored
    assert counts(10, 4, "fixed", 0.3) == [3, 3, 3]


@given(
    st.integers(1, 200), st.integers(2, 20), st.sampled_from(REMASK_SCHEDULES), st.floats(0, 0.99)
)
def test_schedules_are_bounded_and_non_increasing(n, passes, schedule, ratio):
    c = counts(n, passes, schedule, ratio)
    assert all(0 <= x <= n - 1 for x in c)
    assert c == sorted(c, reverse=True)


def test_unknown_schedule_and_bad_ratio_are_rejected():
    with pytest.raises(ValueError, match="schedule"):
        remask_count(torch.tensor([4]), 4, 1, "quadratic")
    with pytest.raises(ValueError, match="ratio"):
        remask_count(torch.tensor([4]), 4, 1, "fixed", 1.0)


def test_confidences_on_hand_built_distributions():
    probs = torch.tensor([[[0.7, 0.1, 0.1, 0.1], [0.6, 0.4, 0.0, 0.0]]])
    logprobs = probs.log()
    chosen = torch.tensor([[0, 0]])
    assert torch.allclose(position_confidence(logprobs, chosen), torch.tensor([[0.7, 0.6]]))
    entropy = position_confidence(logprobs, chosen, "neg_entropy")
    # the flatter first distribution has the higher entropy, so the lower confidence
    assert entropy[0, 0] < entropy[0, 1]
    hot = position_confidence(logprobs, chosen, "calibrated", temperature=2.0)
    assert torch.allclose(hot[0, 0], torch.softmax(logprobs[0, 0] / 2, -1)[0])
    assert torch.allclose(
        position_confidence(logprobs, chosen, "calibrated", 1.0), torch.tensor([[0.7, 0.6]])
    )
    with pytest.raises(ValueError, match="confidence"):
        position_confidence(logprobs, chosen, "vibes")


class SharperLater(FakeModel):
    """Moderate confidence in pass 1, near-certain re-predictions afterwards: kept
    tokens from pass 1 become the least confident and the paper re-masks them."""

    def __call__(self, tokens, rows):
        logprobs = super().__call__(tokens, rows)
        first_pass = tokens.eq(MASK).sum() == tokens.ne(PAD).sum()
        return logprobs if first_pass else torch.log_softmax(20 * logprobs, dim=-1)


def test_monotone_never_remasks_a_kept_token():
    lengths = torch.tensor([12, 9])
    model = SharperLater(2, 12, seed=5)
    mask_predict(
        model,
        lengths,
        MASK,
        PAD,
        MaskPredictOptions(num_passes=6, force_max_iter=True, monotone=True),
    )
    fixed = torch.zeros(2, 12, dtype=torch.bool)
    for tokens, _ in model.calls[1:]:
        remasked = tokens.eq(MASK)
        assert not (remasked & fixed).any()
        fixed |= tokens.ne(MASK) & tokens.ne(PAD)


def test_paper_mode_may_remask_a_kept_token():
    lengths = torch.tensor([12, 9])
    model = SharperLater(2, 12, seed=5)
    mask_predict(model, lengths, MASK, PAD, MaskPredictOptions(num_passes=6, force_max_iter=True))
    kept_then_remasked = False
    fixed = torch.zeros(2, 12, dtype=torch.bool)
    for tokens, _ in model.calls[1:]:
        kept_then_remasked |= bool((tokens.eq(MASK) & fixed).any())
        fixed |= tokens.ne(MASK) & tokens.ne(PAD)
    assert kept_then_remasked  # this fixture does exercise the difference


@pytest.mark.parametrize("confidence", ["neg_entropy", "calibrated", "consistency"])
@pytest.mark.parametrize("schedule", REMASK_SCHEDULES)
def test_variants_decode_every_position(confidence, schedule):
    lengths = torch.tensor([7, 3, 1])
    out = mask_predict(FakeModel(3, 7), lengths, MASK, PAD, MaskPredictOptions(num_passes=5, schedule=schedule, confidence=confidence, calibration_temperature=1.5))  # fmt: skip
    assert not out.tokens.eq(MASK).any()
    assert torch.equal(out.tokens.ne(PAD).sum(1), lengths)


def test_consistency_ranks_unchanged_tokens_as_confident():
    # pass 2 re-predicts the same tokens (the fake ignores context with mix = 0), so
    # under "consistency" the re-masked set of pass 3 avoids those positions
    lengths = torch.tensor([10])
    model = FakeModel(1, 10, seed=1)
    model.mix.zero_()
    mask_predict(
        model,
        lengths,
        MASK,
        PAD,
        MaskPredictOptions(num_passes=3, force_max_iter=True, confidence="consistency"),
    )
    second, third = model.calls[1][0].eq(MASK), model.calls[2][0].eq(MASK)
    assert int(second.sum()) == 6 and int(third.sum()) == 3
    assert not (second & third).any()


@given(st.lists(st.integers(1, 10), min_size=1, max_size=5), st.integers(1, 8), st.integers(0, 999))
def test_template_tokens_never_change_and_counts_follow_the_masks(lengths, passes, seed):
    lengths = torch.tensor(lengths)
    gen = torch.Generator().manual_seed(seed)
    width = int(lengths.max())
    real = torch.arange(width)[None, :] < lengths[:, None]
    given_tokens = torch.randint(4, 12, (len(lengths), width), generator=gen)
    free = (torch.rand(len(lengths), width, generator=gen) < 0.5) & real
    template = torch.where(free, torch.full_like(given_tokens, MASK), given_tokens)
    template = template.masked_fill(~real, PAD)
    model = FakeModel(len(lengths), width, seed=seed)
    out = mask_predict(
        model,
        lengths,
        MASK,
        PAD,
        MaskPredictOptions(num_passes=passes, force_max_iter=True),
        template=template,
    )
    assert torch.equal(out.tokens[real & ~free], template[real & ~free])
    assert not out.tokens.eq(MASK).any()
    n_free = free.sum(1)
    for t, (tokens, _) in enumerate(model.calls[1:], start=1):
        assert torch.equal(tokens.eq(MASK).sum(1), n_free * (passes - t) // passes)


@pytest.mark.parametrize("force", [True, False])
def test_length_pruning_continues_only_the_best_candidates(force):
    lengths = torch.tensor([6, 4, 8, 5, 5, 7])  # 2 sentences x 3 length candidates
    full = mask_predict(
        FakeModel(6, 8, seed=5),
        lengths,
        MASK,
        PAD,
        MaskPredictOptions(num_passes=5, force_max_iter=force),
    )
    after_one = mask_predict(
        FakeModel(6, 8, seed=5), lengths, MASK, PAD, MaskPredictOptions(num_passes=1)
    )
    model = FakeModel(6, 8, seed=5)
    pruned = mask_predict(
        model,
        lengths,
        MASK,
        PAD,
        MaskPredictOptions(num_passes=5, force_max_iter=force, prune_after=1, prune_keep=1, beam=3),
    )
    best_after_one = after_one.scores.view(2, 3).argmax(dim=1) + torch.tensor([0, 3])  # (2,)
    kept = torch.zeros(6, dtype=torch.bool)
    kept[best_after_one] = True
    assert torch.isinf(pruned.scores[~kept]).all() and torch.isfinite(pruned.scores[kept]).all()
    # the kept candidates decode exactly as without pruning (rows are independent here)
    assert torch.equal(pruned.tokens[kept], full.tokens[kept])
    assert torch.equal(pruned.scores[kept], full.scores[kept])
    # after pass 1 the model sees only the kept rows
    for _, rows in model.calls[1:]:
        assert rows is not None and set(rows.tolist()) <= set(best_after_one.tolist())


def test_length_pruning_that_keeps_every_candidate_changes_nothing():
    lengths = torch.tensor([6, 4, 8, 5])
    plain = mask_predict(FakeModel(4, 8), lengths, MASK, PAD, MaskPredictOptions(num_passes=4))
    same = mask_predict(
        FakeModel(4, 8),
        lengths,
        MASK,
        PAD,
        MaskPredictOptions(num_passes=4, prune_after=2, prune_keep=2, beam=2),
    )
    assert torch.equal(plain.tokens, same.tokens) and torch.equal(plain.scores, same.scores)
    with pytest.raises(ValueError, match="prune_keep"):
        mask_predict(
            FakeModel(4, 8),
            lengths,
            MASK,
            PAD,
            MaskPredictOptions(num_passes=4, prune_after=1, prune_keep=0, beam=2),
        )


class ConstantModel:
    """Predicts the same token everywhere, whatever the input: pass 2 changes nothing."""

    def __init__(self):
        self.calls = 0

    def __call__(self, tokens, rows):
        self.calls += 1
        logits = torch.zeros(tokens.size(0), tokens.size(1), 8)  # n x L x V
        logits[..., 5] = 3.0
        logits[..., [PAD, MASK]] = float("-inf")
        return torch.log_softmax(logits, dim=-1)


def test_stop_unchanged_stops_after_a_pass_that_changes_nothing():
    lengths = torch.tensor([9, 6])
    full = mask_predict(ConstantModel(), lengths, MASK, PAD, MaskPredictOptions(num_passes=6))
    model = ConstantModel()
    early = mask_predict(
        model, lengths, MASK, PAD, MaskPredictOptions(num_passes=6, stop_unchanged=True)
    )
    assert full.steps.tolist() == [6, 6] and early.steps.tolist() == [2, 2]
    assert model.calls == 2  # no third pass for anyone
    assert torch.equal(early.tokens, full.tokens) and not early.tokens.eq(MASK).any()
    forced = mask_predict(ConstantModel(), lengths, MASK, PAD, MaskPredictOptions(num_passes=6, stop_unchanged=True, force_max_iter=True))  # fmt: skip
    assert forced.steps.tolist() == [6, 6]


@given(st.lists(st.integers(1, 9), min_size=1, max_size=5), st.integers(1, 6), st.integers(0, 99))
def test_stop_unchanged_rows_never_hold_masks_and_stop_no_later(lengths, passes, seed):
    lengths = torch.tensor(lengths)
    full = mask_predict(
        FakeModel(len(lengths), 9, seed=seed),
        lengths,
        MASK,
        PAD,
        MaskPredictOptions(num_passes=passes),
    )
    early = mask_predict(
        FakeModel(len(lengths), 9, seed=seed),
        lengths,
        MASK,
        PAD,
        MaskPredictOptions(num_passes=passes, stop_unchanged=True),
    )
    assert not early.tokens.eq(MASK).any()
    assert torch.equal(early.tokens.ne(PAD).sum(1), lengths)
    assert (early.steps <= full.steps).all()
    finished = early.steps.eq(full.steps)  # rows that never settled early decode the same
    assert torch.equal(early.tokens[finished], full.tokens[finished])
