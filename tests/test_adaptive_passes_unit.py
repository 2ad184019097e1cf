"""Unit tests of length-adaptive passes: T_i = clamp(ceil(log2 n_i) + c, 1, T) per row.

The pass budget (``schedules.adaptive_pass_budget``), the per-row re-mask schedule
(``schedules.remask_count_per_row``), the loop's use of them (``mask_predict`` with
``adaptive_passes``) and the option's checks, on hand-built inputs and hypothesis
invariants; then the task flag through ``build_generator`` on the tiny model.
"""

import argparse
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_decoding_unit import MASK, PAD, FakeModel

from cmlm_decoding import MaskPredictOptions, OptionError, mask_predict
from cmlm_decoding.schedules import (
    REMASK_SCHEDULES,
    adaptive_pass_budget,
    ceil_log2,
    remask_count,
    remask_count_per_row,
)

# --- the budget ---------------------------------------------------------------


@pytest.mark.parametrize(
    "n, offset, max_passes, expected",
    [
        (50, 0, 10, 6),  # ceil(log2 50) = 6
        (50, 2, 10, 8),
        (100, 0, 10, 7),
        (100, 2, 10, 9),
        (64, 0, 10, 6),  # an exact power of two
        (65, 0, 10, 7),
        (1, 0, 10, 1),  # ceil(log2 1) = 0, clamped up to 1
        (2, 0, 10, 1),
        (3, 0, 10, 2),
        (50, 2, 7, 7),  # clamped down to T_max
        (1000, 2, 10, 10),
        (5, 0, 1, 1),
    ],
)
def test_pass_budget_per_length(n, offset, max_passes, expected):
    assert int(adaptive_pass_budget(torch.tensor([n]), offset, max_passes)) == expected


def test_pass_budget_of_a_batch_is_per_row():
    lengths = torch.tensor([1, 2, 5, 9, 16, 50, 100])
    assert adaptive_pass_budget(lengths, 0, 10).tolist() == [1, 1, 3, 4, 4, 6, 7]
    assert adaptive_pass_budget(lengths, 2, 8).tolist() == [2, 3, 5, 6, 6, 8, 8]


@given(st.integers(0, 100000))
def test_ceil_log2_is_exact(n):
    expected = 0 if n <= 1 else math.ceil(math.log2(n))
    assert int(ceil_log2(torch.tensor([n]))) == expected
    assert int(ceil_log2(torch.tensor([n]))) == max(n - 1, 0).bit_length()


@given(st.integers(1, 5000), st.integers(0, 5), st.integers(1, 30))
def test_pass_budget_is_the_clamped_formula(n, offset, max_passes):
    budget = int(adaptive_pass_budget(torch.tensor([n]), offset, max_passes))
    assert budget == min(max(math.ceil(math.log2(n)) + offset, 1), max_passes)


# --- the per-row schedule -----------------------------------------------------


def test_per_row_linear_counts_on_hand_built_budgets():
    lengths, budgets = torch.tensor([50, 10, 3]), torch.tensor([6, 4, 2])
    counts = [remask_count_per_row(lengths, budgets, t).tolist() for t in range(1, 7)]
    # floor(n (T_i - t) / T_i) while t < T_i, then 0
    assert counts == [
        [41, 7, 1],
        [33, 5, 0],
        [25, 2, 0],
        [16, 0, 0],
        [8, 0, 0],
        [0, 0, 0],
    ]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 200), min_size=1, max_size=6),
    st.integers(1, 15),
    st.sampled_from(REMASK_SCHEDULES),
    st.floats(0, 0.99),
)
def test_per_row_counts_equal_the_scalar_schedule_row_by_row(lengths, passes, schedule, ratio):
    lengths = torch.tensor(lengths)
    gen = torch.Generator().manual_seed(len(lengths) * 31 + passes)
    budgets = torch.randint(1, passes + 1, lengths.shape, generator=gen)
    for t in range(1, passes + 1):
        counts = remask_count_per_row(lengths, budgets, t, schedule, ratio).tolist()
        for i in range(len(lengths)):
            budget = int(budgets[i])
            one = lengths[i : i + 1]
            expected = int(remask_count(one, budget, t, schedule, ratio)) if t < budget else 0
            assert counts[i] == expected
    uniform = torch.full_like(lengths, passes)
    for t in range(1, passes):  # one T for every row: the scalar schedule, bit for bit
        assert torch.equal(
            remask_count_per_row(lengths, uniform, t, schedule, ratio),
            remask_count(lengths, passes, t, schedule, ratio),
        )


def test_per_row_schedule_rejects_bad_arguments():
    with pytest.raises(ValueError, match="schedule"):
        remask_count_per_row(torch.tensor([4]), torch.tensor([3]), 1, "quadratic")
    with pytest.raises(ValueError, match="step"):
        remask_count_per_row(torch.tensor([4]), torch.tensor([3]), 0)
    # a budget the row has used up (0 included) re-masks nothing
    for schedule in REMASK_SCHEDULES:
        out = remask_count_per_row(torch.tensor([4, 4]), torch.tensor([0, 1]), 1, schedule)
        assert out.tolist() == [0, 0]
    with pytest.raises(ValueError, match="ratio"):
        remask_count_per_row(torch.tensor([4]), torch.tensor([3]), 1, "fixed", 1.0)


# --- the loop -----------------------------------------------------------------


def masks_per_call(model):
    """Per model call: ``{row: masked count}`` of the rows the call decoded."""
    out = []
    for tokens, rows in model.calls:
        ids = list(range(tokens.size(0))) if rows is None else rows.tolist()
        out.append(dict(zip(ids, tokens.eq(MASK).sum(1).tolist())))
    return out


def test_adaptive_passes_give_each_row_its_budget_and_schedule():
    lengths = torch.tensor([1, 2, 5, 9, 16])
    model = FakeModel(5, 16, seed=2)
    result = mask_predict(
        model, lengths, MASK, PAD, MaskPredictOptions(num_passes=10, adaptive_passes=2)
    )
    # T_i = ceil(log2 n) + 2 = [2, 3, 5, 6, 6]; a row leaves once its count is 0
    assert result.steps.tolist() == [1, 2, 5, 6, 6]
    calls = masks_per_call(model)
    assert calls[0] == {0: 1, 1: 2, 2: 5, 3: 9, 4: 16}  # pass 1: every row, all <mask>
    assert calls[1:] == [
        {1: 1, 2: 4, 3: 7, 4: 13},  # floor(n (T_i - 1) / T_i); n=1 re-masks nothing
        {2: 3, 3: 6, 4: 10},
        {2: 2, 3: 4, 4: 8},
        {2: 1, 3: 3, 4: 5},
        {3: 1, 4: 2},
    ]
    assert not result.tokens.eq(MASK).any()


def test_adaptive_passes_with_offset_zero():
    lengths = torch.tensor([1, 2, 5, 9, 16])
    model = FakeModel(5, 16, seed=2)
    result = mask_predict(
        model, lengths, MASK, PAD, MaskPredictOptions(num_passes=10, adaptive_passes=0)
    )
    assert result.steps.tolist() == [1, 1, 3, 4, 4]  # T_i = [1, 1, 3, 4, 4]
    assert masks_per_call(model)[1:] == [{2: 3, 3: 6, 4: 12}, {2: 1, 3: 4, 4: 8}, {3: 2, 4: 4}]


def test_force_max_iter_spends_exactly_each_budget():
    lengths = torch.tensor([1, 2, 5, 9, 16])
    options = MaskPredictOptions(num_passes=10, adaptive_passes=2, force_max_iter=True)
    forced = mask_predict(FakeModel(5, 16, seed=2), lengths, MASK, PAD, options)
    assert forced.steps.tolist() == [2, 3, 5, 6, 6]
    early = mask_predict(
        FakeModel(5, 16, seed=2),
        lengths,
        MASK,
        PAD,
        MaskPredictOptions(num_passes=10, adaptive_passes=2),
    )
    assert torch.equal(forced.tokens, early.tokens)  # the extra passes re-mask nothing
    assert torch.equal(forced.scores, early.scores)


class OneRow:
    """Row ``row`` of a ``FakeModel`` decoded on its own, padded to the batch's width
    (the fake's context wraps around the row, so it sees the padding)."""

    def __init__(self, model, row, width):
        self.model, self.row, self.width = model, torch.tensor([row]), width

    def __call__(self, tokens, rows):
        padded = torch.full((1, self.width), PAD, dtype=tokens.dtype)  # 1 x W
        padded[:, : tokens.size(1)] = tokens
        return self.model(padded, self.row)[:, : tokens.size(1)]  # 1 x n x V


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.integers(1, 20), min_size=1, max_size=5),
    st.integers(1, 10),
    st.integers(0, 3),
    st.sampled_from(["linear", "cosine"]),
    st.booleans(),
    st.integers(0, 500),
)
def test_each_row_decodes_as_if_alone_with_its_own_budget(
    lengths, passes, offset, schedule, force, seed
):
    """One batched loop, but every row gets exactly the decoding of T = T_i alone."""
    lengths = torch.tensor(lengths)
    options = MaskPredictOptions(
        num_passes=passes, adaptive_passes=offset, schedule=schedule, force_max_iter=force
    )
    batch = mask_predict(FakeModel(len(lengths), 20, seed), lengths, MASK, PAD, options)
    budgets = adaptive_pass_budget(lengths, offset, passes)
    assert not batch.tokens.eq(MASK).any()
    assert (batch.steps <= budgets).all()
    if force:
        assert torch.equal(batch.steps, budgets)
    for i in range(len(lengths)):  # the reference: one sentence at a time
        alone = MaskPredictOptions(
            num_passes=int(budgets[i]), schedule=schedule, force_max_iter=force
        )
        single = OneRow(FakeModel(len(lengths), 20, seed), i, int(lengths.max()))
        ref = mask_predict(single, lengths[i : i + 1], MASK, PAD, alone)
        n = int(lengths[i])
        assert torch.equal(batch.tokens[i, :n], ref.tokens[0, :n])
        assert torch.allclose(batch.scores[i], ref.scores[0])
        assert int(batch.steps[i]) == int(ref.steps[0])


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.integers(1, 15), min_size=1, max_size=5),
    st.integers(1, 10),
    st.sampled_from(REMASK_SCHEDULES),
    st.booleans(),
    st.integers(0, 500),
)
def test_an_offset_that_reaches_the_cap_reproduces_fixed_passes(
    lengths, passes, schedule, force, seed
):
    """c >= T gives every row T passes: exactly today's output, through the per-row path."""
    lengths = torch.tensor(lengths)
    kwargs = dict(num_passes=passes, schedule=schedule, force_max_iter=force, retain_history=True)
    plain = mask_predict(
        FakeModel(len(lengths), 15, seed), lengths, MASK, PAD, MaskPredictOptions(**kwargs)
    )
    capped = mask_predict(
        FakeModel(len(lengths), 15, seed),
        lengths,
        MASK,
        PAD,
        MaskPredictOptions(adaptive_passes=passes, **kwargs),
    )
    for field in ("tokens", "token_logprobs", "scores", "steps"):
        assert torch.equal(getattr(plain, field), getattr(capped, field)), field
    assert all(torch.equal(a, b) for a, b in zip(plain.history, capped.history))


def test_adaptive_passes_count_the_masks_of_a_template():
    # one row of 9 positions, 4 of them <mask>: n = 4, T = ceil(log2 4) + 1 = 3
    template = torch.tensor([[5, MASK, 6, MASK, MASK, 7, 8, MASK, 9]])
    model = FakeModel(1, 9, seed=4)
    result = mask_predict(
        model,
        torch.tensor([9]),
        MASK,
        PAD,
        MaskPredictOptions(num_passes=10, adaptive_passes=1),
        template=template,
    )
    assert result.steps.tolist() == [3]
    assert [counts[0] for counts in masks_per_call(model)] == [4, 2, 1]  # floor(4 (3-t)/3)
    given_positions = template.ne(MASK)
    assert torch.equal(result.tokens[given_positions], template[given_positions])


# --- the option ---------------------------------------------------------------


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_bad_offsets_are_refused_naming_the_flag(bad):
    with pytest.raises(OptionError) as error:
        MaskPredictOptions(adaptive_passes=bad)
    rendered = error.value.render(
        {"adaptive_passes": "--adaptive-passes", "num_passes": "--iter-decode-max-iter"}
    )
    assert rendered.startswith("--adaptive-passes is the offset c")
    assert "--iter-decode-max-iter" in rendered and rendered.endswith(repr(bad))
    assert "\n" not in rendered


def test_default_is_off():
    assert MaskPredictOptions().adaptive_passes is None
    assert MaskPredictOptions(adaptive_passes=0).adaptive_passes == 0


# --- the task flag (tiny model) -------------------------------------------------


def test_the_flag_reaches_the_generator_and_decodes(data_dir):
    from tinymodel import sample_for, setup

    torch.manual_seed(0)
    task, model, _ = setup(data_dir, "--adaptive-passes", "1")
    assert task.cfg.adaptive_passes == 1
    gen = task.build_generator(
        [model], argparse.Namespace(iter_decode_max_iter=6, iter_decode_with_beam=2)
    )
    assert gen.options.adaptive_passes == 1 and gen.options.num_passes == 6
    sample = sample_for(task, ["w1 w2 w3", "w4", "w5 w6 w7 w8 w9"], ["w1", "w2", "w3"])
    hypos = task.inference_step(gen, [model], sample)
    for (hypo,) in hypos:
        body = hypo["tokens"][:-1]
        assert task.mask_idx not in body.tolist()
        budget = int(adaptive_pass_budget(torch.tensor([body.numel()]), 1, 6))
        assert 1 <= hypo["steps"] <= budget


def test_the_flag_is_off_by_default_and_refuses_bad_values(data_dir):
    from tinymodel import setup

    task, model, _ = setup(data_dir)
    assert task.cfg.adaptive_passes is None
    gen = task.build_generator([model], argparse.Namespace(iter_decode_max_iter=4))
    assert gen.options.adaptive_passes is None
    task, model, _ = setup(data_dir, "--adaptive-passes", "-1")
    with pytest.raises(ValueError, match="^--adaptive-passes is the offset c .* got -1$"):
        task.build_generator([model], argparse.Namespace(iter_decode_max_iter=4))
