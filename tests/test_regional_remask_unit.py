"""Unit tests of regional re-masking and the two confidences of the first design source.

Regions (``confidence.region_ids``), the largest-remainder split of a row's re-mask count
(``confidence.spread_counts``), the selection per region
(``confidence.select_lowest_by_region``) and the loop with ``remask_regions``; the
``geometric_mean`` and ``top_k_mass`` confidences; then the task flag through
``build_generator`` on the tiny model. Hand-built inputs and hypothesis invariants.
"""

import argparse
from fractions import Fraction

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_decoding_unit import MASK, PAD, VOCAB, FakeModel

from cmlm_decoding import MaskPredictOptions, OptionError, mask_predict, select_lowest
from cmlm_decoding.confidence import (
    CONFIDENCES,
    TOP_K_MASS,
    geometric_mean_update,
    position_confidence,
    region_ids,
    select_lowest_by_region,
    spread_counts,
)
from cmlm_decoding.schedules import adaptive_pass_budget, remask_count_per_row

# --- regions ------------------------------------------------------------------


@pytest.mark.parametrize(
    "n, regions, expected",
    [
        (10, 4, [0, 0, 0, 1, 1, 2, 2, 2, 3, 3]),  # sizes 3 2 3 2
        (7, 3, [0, 0, 0, 1, 1, 2, 2]),  # sizes 3 2 2
        (8, 4, [0, 0, 1, 1, 2, 2, 3, 3]),
        (4, 4, [0, 1, 2, 3]),
        (3, 4, [0, 1, 2]),  # n < K: one position per region, region 3 empty
        (2, 4, [0, 2]),  # regions 1 and 3 empty
        (1, 3, [0]),
        (5, 1, [0, 0, 0, 0, 0]),
    ],
)
def test_regions_are_contiguous_and_as_equal_as_possible(n, regions, expected):
    ids = region_ids(torch.tensor([n]), n + 2, regions)[0].tolist()
    assert ids == expected + [regions, regions]  # padding: the extra id K


@given(st.integers(1, 300), st.integers(1, 40))
def test_region_sizes_differ_by_at_most_one(n, regions):
    ids = region_ids(torch.tensor([n]), n, regions)[0]
    sizes = torch.bincount(ids, minlength=regions).tolist()
    assert sum(sizes) == n and len(sizes) == regions
    assert ids.tolist() == sorted(ids.tolist())  # contiguous, left to right
    assert set(sizes) <= {n // regions, -(-n // regions)}
    for k in range(regions):  # region k starts at ceil(k n / K)
        if sizes[k]:
            assert int((ids < k).sum()) == -(-k * n // regions)


# --- the split of the count -----------------------------------------------------


@pytest.mark.parametrize(
    "count, capacity, priority, expected",
    [
        (5, [3, 2, 3, 2], None, [2, 1, 1, 1]),  # quotas 1.5 1 1.5 1: tie, leftmost
        (5, [3, 2, 3, 2], [0.9, 0.5, 0.1, 0.5], [1, 1, 2, 1]),  # tie, lowest priority
        (7, [4, 4, 2], None, [3, 3, 1]),  # quotas 2.8 2.8 1.4
        (3, [1, 1, 1, 0], None, [1, 1, 1, 0]),
        (2, [1, 1, 1, 0], [0.7, 0.2, 0.4, 0.0], [0, 1, 1, 0]),  # the 2 lowest of 3
        (10, [4, 4, 2], None, [4, 4, 2]),  # m = C: every position
        (99, [4, 4, 2], None, [4, 4, 2]),  # m > C: clipped to C
        (0, [4, 4, 2], None, [0, 0, 0]),
        (4, [0, 0, 0], None, [0, 0, 0]),  # nothing to re-mask
        (1, [5, 0, 5], None, [1, 0, 0]),
    ],
)
def test_spread_counts_on_hand_built_rows(count, capacity, priority, expected):
    prio = None if priority is None else torch.tensor([priority])
    out = spread_counts(torch.tensor([count]), torch.tensor([capacity]), prio)
    assert out[0].tolist() == expected


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 30), min_size=1, max_size=12),
    st.integers(0, 400),
    st.integers(0, 99),
)
def test_spread_counts_is_a_largest_remainder_split(capacity, count, seed):
    cap = torch.tensor([capacity])
    priority = torch.rand(1, len(capacity), generator=torch.Generator().manual_seed(seed))
    out = spread_counts(torch.tensor([count]), cap, priority)[0].tolist()
    total = sum(capacity)
    m = min(count, total)
    assert sum(out) == m  # the region counts sum to the global count
    assert all(0 <= o <= c for o, c in zip(out, capacity))  # never above a region's size
    for o, c in zip(out, capacity):  # within one of the exact quota m c_k / C
        quota = Fraction(m * c, total) if total else Fraction(0)
        assert quota - 1 < o < quota + 1 and o in (quota.__floor__(), quota.__ceil__())


# --- the selection --------------------------------------------------------------


def test_selection_per_region_on_a_hand_built_row():
    scores = torch.tensor([[0.63, 0.35, 0.48, 0.59, 0.54, 0.71, 0.83, 0.12, 0.68, 0.09]])
    valid = torch.ones_like(scores, dtype=torch.bool)
    chosen = select_lowest_by_region(scores, torch.tensor([5]), valid, torch.tensor([10]), 4)
    # regions {0,1,2} {3,4} {5,6,7} {8,9} get 1.5 1 1.5 1: regions 0 and 2 tie for the
    # fifth; region 0's next position (0.48) is less confident than region 2's (0.71)
    assert chosen[0].nonzero().squeeze(1).tolist() == [1, 2, 4, 7, 9]


def test_more_regions_spread_the_remasked_positions_over_the_sentence():
    # the middle is unsure: the global rule re-masks the middle four, 2 regions take 2 + 2
    # (the same four), 4 regions one each
    scores = torch.tensor([[0.9, 0.8, 0.1, 0.2, 0.3, 0.4, 0.7, 0.95]])
    valid = torch.ones_like(scores, dtype=torch.bool)
    glob = select_lowest(scores, torch.tensor([4]), valid)
    assert glob[0].nonzero().squeeze(1).tolist() == [2, 3, 4, 5]
    two = select_lowest_by_region(scores, torch.tensor([4]), valid, torch.tensor([8]), 2)
    assert two[0].nonzero().squeeze(1).tolist() == [2, 3, 4, 5]  # 2 per half: the same
    four = select_lowest_by_region(scores, torch.tensor([4]), valid, torch.tensor([8]), 4)
    assert four[0].nonzero().squeeze(1).tolist() == [1, 2, 4, 6]  # one per quarter


def test_counts_per_sentence_and_region_in_a_batch():
    scores = torch.tensor(
        [
            [0.5, 0.4, 0.3, 0.2, 0.1, 0.6, 0.7, 0.8, 0.9],  # n = 9
            [0.1, 0.2, 0.3, 0.9, 0.8, 0.7, 0.0, 0.0, 0.0],  # n = 6
            [0.3, 0.1, 0.2, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # n = 3 < K
        ]
    )
    lengths = torch.tensor([9, 6, 3])
    valid = torch.arange(9)[None, :] < lengths[:, None]
    chosen = select_lowest_by_region(scores, torch.tensor([6, 3, 2]), valid, lengths, 4)
    ids = region_ids(lengths, 9, 4)
    per_region = [[int((chosen[r] & ids[r].eq(k)).sum()) for k in range(4)] for r in range(3)]
    # row 0: sizes 3 2 2 2, quotas 2 1.33 1.33 1.33 -> 2 1 1 1 and one extra: remainders
    # tie, the least confident next position is region 1's (0.2); row 1: sizes 2 1 2 1,
    # quotas 1 .5 1 .5 -> region 1's next (0.3) beats region 3's (0.7); row 2: the global
    # rule (every position a region)
    assert per_region == [[2, 2, 1, 1], [1, 1, 1, 0], [0, 1, 1, 0]]
    assert chosen[0].nonzero().squeeze(1).tolist() == [1, 2, 3, 4, 5, 7]
    assert chosen[1].nonzero().squeeze(1).tolist() == [0, 2, 4]
    assert chosen[2].nonzero().squeeze(1).tolist() == [1, 2]
    assert not (chosen & ~valid).any()


def random_rows(rows, width, seed, keep=0.7):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, width + 1, (rows,), generator=gen)
    real = torch.arange(width)[None, :] < lengths[:, None]
    valid = real & (torch.rand(rows, width, generator=gen) < keep)  # e.g. a template
    scores = torch.rand(rows, width, generator=gen).round(decimals=1)  # with ties
    counts = torch.randint(0, width + 2, (rows,), generator=gen)
    return scores, counts, valid, lengths


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 6), st.integers(1, 24), st.integers(1, 10), st.integers(0, 10**6))
def test_selection_invariants(rows, width, regions, seed):
    scores, counts, valid, lengths = random_rows(rows, width, seed)
    chosen = select_lowest_by_region(scores, counts, valid, lengths, regions)
    ids = region_ids(lengths, width, regions)
    assert not (chosen & ~valid).any()
    assert torch.equal(chosen.sum(1), torch.minimum(counts, valid.sum(1)))
    for r in range(rows):
        capacity = torch.stack([(valid[r] & ids[r].eq(k)).sum() for k in range(regions)])
        got = [int((chosen[r] & ids[r].eq(k)).sum()) for k in range(regions)]
        m, total = min(int(counts[r]), int(capacity.sum())), int(capacity.sum())
        for k in range(regions):
            quota = Fraction(m * int(capacity[k]), total) if total else Fraction(0)
            assert got[k] in (quota.__floor__(), quota.__ceil__())
            region = valid[r] & ids[r].eq(k)
            marked, kept = scores[r][chosen[r] & region], scores[r][~chosen[r] & region]
            if marked.numel() and kept.numel():  # the least confident of the region
                assert marked.max() <= kept.min()


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 6), st.integers(1, 24), st.integers(0, 10**6))
def test_one_region_or_one_position_per_region_is_the_global_rule(rows, width, seed):
    scores, counts, valid, lengths = random_rows(rows, width, seed)
    glob = select_lowest(scores, counts, valid)
    assert torch.equal(select_lowest_by_region(scores, counts, valid, lengths, 1), glob)
    # K >= n: every position a region of its own, ties by confidence, then position
    assert torch.equal(select_lowest_by_region(scores, counts, valid, lengths, width), glob)
    assert torch.equal(select_lowest_by_region(scores, counts, valid, lengths, width + 3), glob)


def test_selection_rejects_no_regions():
    with pytest.raises(ValueError, match="regions"):
        select_lowest_by_region(
            torch.zeros(1, 3), torch.tensor([1]), torch.ones(1, 3, dtype=torch.bool),
            torch.tensor([3]), 0,
        )  # fmt: skip


# --- the loop -------------------------------------------------------------------


def region_counts_per_call(model, lengths, regions):
    """Per later call: ``{row: [masks per region]}``."""
    out = []
    for tokens, rows in model.calls[1:]:
        ids = list(range(tokens.size(0))) if rows is None else rows.tolist()
        sub_ids = region_ids(lengths[ids], tokens.size(1), regions)
        masks = tokens.eq(MASK)
        out.append(
            {
                row: [int((masks[j] & sub_ids[j].eq(k)).sum()) for k in range(regions)]
                for j, row in enumerate(ids)
            }
        )
    return out


def test_the_loop_remasks_per_region_with_the_paper_counts():
    lengths = torch.tensor([12, 7, 2])
    model = FakeModel(3, 12, seed=6)
    result = mask_predict(
        model, lengths, MASK, PAD, MaskPredictOptions(num_passes=4, remask_regions=3)
    )
    calls = region_counts_per_call(model, lengths, 3)
    # n = 12 (sizes 4 4 4): m = 9, 6, 3 -> 3 per region, 2, 1; n = 7 (sizes 3 2 2): m = 5,
    # 3, 1 -> quotas 15/7 10/7 10/7 etc.; n = 2 re-masks 1, 1 then 0
    assert [c[0] for c in calls] == [[3, 3, 3], [2, 2, 2], [1, 1, 1]]
    assert [sum(c[1]) for c in calls] == [5, 3, 1]
    for c in calls:
        m = sum(c[1])
        for got, size in zip(c[1], [3, 2, 2]):
            assert abs(Fraction(got) - Fraction(m * size, 7)) < 1
    assert [sum(c[2]) for c in calls if 2 in c] == [1, 1]
    assert result.steps.tolist() == [4, 4, 3]
    assert not result.tokens.eq(MASK).any()


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 15), min_size=1, max_size=5),
    st.integers(1, 8),
    st.integers(1, 6),
    st.sampled_from(CONFIDENCES),
    st.booleans(),
    st.booleans(),
    st.one_of(st.none(), st.integers(0, 2)),
    st.integers(0, 999),
)
def test_loop_invariants_with_regions_confidences_and_adaptive_passes(
    lengths, passes, regions, confidence, force, monotone, adaptive, seed
):
    lengths = torch.tensor(lengths)
    model = FakeModel(len(lengths), 15, seed=seed)
    options = MaskPredictOptions(
        num_passes=passes,
        remask_regions=regions,
        confidence=confidence,
        force_max_iter=force,
        monotone=monotone,
        adaptive_passes=adaptive,
    )
    result = mask_predict(model, lengths, MASK, PAD, options)
    real = torch.arange(result.tokens.size(1))[None, :] < lengths[:, None]
    assert not result.tokens.eq(MASK).any()  # no <mask> left in any output
    assert torch.equal(result.tokens.eq(PAD), ~real)
    assert int(result.steps.max()) <= passes
    expected = (result.token_logprobs * real).sum(1) / lengths
    assert torch.allclose(result.scores, expected)
    budget = torch.full_like(lengths, passes)
    if adaptive is not None:
        budget = adaptive_pass_budget(lengths, adaptive, passes)
    assert (result.steps <= budget).all()
    for t, (tokens, rows) in enumerate(model.calls[1:], start=1):  # per row: the schedule
        ids = torch.arange(len(lengths)) if rows is None else rows
        expected = remask_count_per_row(lengths[ids], budget[ids], t)
        assert torch.equal(tokens.eq(MASK).sum(1), expected)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 12), min_size=1, max_size=5),
    st.integers(1, 8),
    st.sampled_from(["max_prob", "consistency", "neg_entropy"]),
    st.booleans(),
    st.integers(0, 999),
)
def test_one_region_and_one_position_per_region_reproduce_the_global_rule(
    lengths, passes, confidence, monotone, seed
):
    lengths = torch.tensor(lengths)
    kwargs = dict(num_passes=passes, confidence=confidence, monotone=monotone)
    results = [
        mask_predict(
            FakeModel(len(lengths), 12, seed), lengths, MASK, PAD, MaskPredictOptions(**kwargs)
        )
    ]
    for regions in (1, 12, 50):
        options = MaskPredictOptions(remask_regions=regions, **kwargs)
        results.append(mask_predict(FakeModel(len(lengths), 12, seed), lengths, MASK, PAD, options))
    for other in results[1:]:
        for field in ("tokens", "token_logprobs", "scores", "steps"):
            assert torch.equal(getattr(results[0], field), getattr(other, field)), field


def test_remask_regions_follow_the_template_masks():
    # 10 positions, <mask> only in the first half: region 1 (positions 5..9) has no
    # re-maskable position, so region 0 takes the whole count
    template = torch.tensor([[MASK] * 5 + [5, 6, 7, 8, 9]])
    model = FakeModel(1, 10, seed=2)
    out = mask_predict(
        model,
        torch.tensor([10]),
        MASK,
        PAD,
        MaskPredictOptions(num_passes=3, remask_regions=2),
        template=template,
    )
    assert [counts[0] for counts in region_counts_per_call(model, torch.tensor([10]), 2)] == [
        [3, 0],
        [1, 0],
    ]  # floor(5 (3 - t) / 3)
    assert out.tokens[0, 5:].tolist() == [5, 6, 7, 8, 9]


@pytest.mark.parametrize("bad", [0, -2, 1.0, True])
def test_bad_region_counts_are_refused_naming_the_flag(bad):
    with pytest.raises(OptionError) as error:
        MaskPredictOptions(remask_regions=bad)
    rendered = error.value.render({"remask_regions": "--remask-regions"})
    assert rendered.startswith("--remask-regions is the number of regions")
    assert rendered.endswith(f"got {bad!r}") and "\n" not in rendered


# --- the confidences ----------------------------------------------------------


def test_top_k_mass_on_hand_built_distributions():
    probs = torch.tensor(
        [[[0.5, 0.2, 0.2, 0.1, 0.0], [0.4, 0.3, 0.1, 0.1, 0.1], [0.9, 0.05, 0.03, 0.02, 0.0]]]
    )
    chosen = torch.tensor([[0, 0, 0]])
    mass = position_confidence(probs.log(), chosen, "top_k_mass")
    assert TOP_K_MASS == 3
    assert torch.allclose(mass, torch.tensor([[0.9, 0.8, 0.98]]))
    small = torch.tensor([[[0.6, 0.4]]]).log()  # fewer symbols than k: all the mass
    assert torch.allclose(position_confidence(small, torch.tensor([[0]]), "top_k_mass"), torch.ones(1, 1))  # fmt: skip
    banned = probs.log().clone()
    banned[..., 4] = float("-inf")  # -inf symbols (pad, mask) add nothing
    assert torch.allclose(position_confidence(banned, chosen, "top_k_mass"), mass)


def test_geometric_mean_update_grows_and_restarts_runs():
    run_lp, run_len = torch.tensor([0.5, 0.5]).log(), torch.tensor([1, 1])
    run_lp, run_len, conf = geometric_mean_update(
        run_lp, run_len, torch.tensor([0.8, 0.9]).log(), torch.tensor([True, False])
    )
    assert run_len.tolist() == [2, 1]
    assert torch.allclose(conf, torch.tensor([0.4**0.5, 0.9]))
    run_lp, run_len, conf = geometric_mean_update(
        run_lp, run_len, torch.tensor([0.2, 0.1]).log(), torch.tensor([True, True])
    )
    assert run_len.tolist() == [3, 2]
    assert torch.allclose(conf, torch.tensor([(0.5 * 0.8 * 0.2) ** (1 / 3), (0.9 * 0.1) ** 0.5]))


class Scripted:
    """One row of 3 positions; call c predicts ``SCRIPT[c][p] = (token, probability)``."""

    SCRIPT = [
        [(5, 0.9), (6, 0.3), (7, 0.5)],  # pass 1: re-mask the 2 lowest, positions 1 and 2
        [(5, 0.9), (6, 0.95), (8, 0.6)],  # position 1 same token, position 2 changed
        [(9, 0.9), (9, 0.9), (9, 0.9)],
    ]

    def __init__(self):
        self.calls = []

    def __call__(self, tokens, rows):
        self.calls.append(tokens.clone())
        logprobs = torch.full((1, 3, VOCAB), float("-inf"))  # 1 x L x V
        for p, (token, prob) in enumerate(self.SCRIPT[len(self.calls) - 1]):
            others = [v for v in range(VOCAB) if v not in (PAD, MASK, token)]
            logprobs[0, p, others] = torch.tensor((1 - prob) / len(others)).log()
            logprobs[0, p, token] = torch.tensor(prob).log()
        return logprobs


@pytest.mark.parametrize(
    "confidence, remasked",
    [
        ("max_prob", 2),  # probabilities 0.9, 0.95, 0.6: position 2 is the least sure
        ("geometric_mean", 1),  # 0.9, sqrt(0.3 x 0.95) = 0.53, 0.6 (a new token's run)
    ],
)
def test_geometric_mean_ranks_by_the_run_of_each_token(confidence, remasked):
    model = Scripted()
    out = mask_predict(
        model,
        torch.tensor([3]),
        MASK,
        PAD,
        MaskPredictOptions(num_passes=3, confidence=confidence),
    )
    assert model.calls[1][0].eq(MASK).tolist() == [False, True, True]
    assert model.calls[2][0].eq(MASK).nonzero().squeeze(1).tolist() == [remasked]
    assert not out.tokens.eq(MASK).any()


# --- the task flags (tiny model) ------------------------------------------------


@pytest.mark.parametrize("confidence", ["geometric_mean", "top_k_mass"])
def test_the_flags_reach_the_generator_and_decode(data_dir, confidence):
    from tinymodel import sample_for, setup

    torch.manual_seed(0)
    task, model, _ = setup(data_dir, "--remask-regions", "3", "--remask-confidence", confidence)
    gen = task.build_generator(
        [model], argparse.Namespace(iter_decode_max_iter=4, iter_decode_with_beam=2)
    )
    assert gen.options.remask_regions == 3 and gen.options.confidence == confidence
    sample = sample_for(task, ["w1 w2 w3", "w4", "w5 w6 w7 w8 w9"], ["w1", "w2", "w3"])
    hypos = task.inference_step(gen, [model], sample)
    for (hypo,) in hypos:
        assert task.mask_idx not in hypo["tokens"].tolist()
        assert 1 <= hypo["steps"] <= 4


def test_one_region_is_the_default_and_zero_is_refused(data_dir):
    from tinymodel import setup

    task, model, _ = setup(data_dir)
    assert task.cfg.remask_regions == 1
    task, model, _ = setup(data_dir, "--remask-regions", "0")
    with pytest.raises(ValueError, match="^--remask-regions is the number of regions .* got 0$"):
        task.build_generator([model], argparse.Namespace(iter_decode_max_iter=4))


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.integers(1, 9), min_size=1, max_size=4),
    st.integers(1, 6),
    st.integers(1, 4),
    st.sampled_from(["geometric_mean", "top_k_mass", "consistency"]),
    st.one_of(st.none(), st.integers(0, 2)),
    st.booleans(),
)
def test_sparse_step_gives_the_dense_result_with_the_new_options(
    lengths, passes, regions, confidence, adaptive, force
):
    """The plugin decodes with ``sparse_step``: the new options must not tell them apart."""
    lengths = torch.tensor(lengths)
    width = int(lengths.max())
    dense_model, sparse_model = FakeModel(len(lengths), width), FakeModel(len(lengths), width)

    def sparse(tokens, rows, where):
        return sparse_model(tokens, rows)[where]  # M x V

    kwargs = dict(
        num_passes=passes,
        remask_regions=regions,
        confidence=confidence,
        adaptive_passes=adaptive,
        force_max_iter=force,
        retain_history=True,
    )
    dense = mask_predict(dense_model, lengths, MASK, PAD, MaskPredictOptions(**kwargs))
    result = mask_predict(
        sparse, lengths, MASK, PAD, MaskPredictOptions(sparse_step=True, **kwargs)
    )
    for field in ("tokens", "token_logprobs", "scores", "steps"):
        assert torch.equal(getattr(dense, field), getattr(result, field)), field
    assert all(torch.equal(a, b) for a, b in zip(dense.history, result.history))
