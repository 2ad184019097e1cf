"""Unit tests of the pure decoding core (``cmlm_decoding``), hand-built inputs."""

import subprocess
import sys

import pytest
import torch
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from cmlm_decoding import (
    MaskPredictOptions,
    OptionError,
    initial_tokens,
    length_candidates,
    linear_remask_count,
    mask_predict,
    select_best,
    select_lowest,
)

PAD, MASK, VOCAB = 1, 3, 12


# --- schedules -------------------------------------------------------------


@pytest.mark.parametrize(
    "n, passes, expected",
    [
        (10, 10, [9, 8, 7, 6, 5, 4, 3, 2, 1]),
        (7, 4, [5, 3, 1]),
        (3, 10, [2, 2, 2, 1, 1, 1, 0, 0, 0]),
        (20, 2, [10]),
        (1, 5, [0, 0, 0, 0]),
    ],
)
def test_linear_remask_counts(n, passes, expected):
    counts = [int(linear_remask_count(torch.tensor([n]), passes, t)) for t in range(1, passes)]
    assert counts == expected


@given(st.integers(1, 300), st.integers(2, 30))
def test_linear_remask_count_is_the_floored_paper_formula(n, passes):
    counts = [int(linear_remask_count(torch.tensor([n]), passes, t)) for t in range(1, passes)]
    assert counts == [n * (passes - t) // passes for t in range(1, passes)]
    assert all(0 <= c < n for c in counts)
    assert counts == sorted(counts, reverse=True)


def test_linear_remask_count_rejects_bad_steps():
    with pytest.raises(ValueError):
        linear_remask_count(torch.tensor([4]), 0, 1)
    with pytest.raises(ValueError):
        linear_remask_count(torch.tensor([4]), 4, 4)


# --- selection -------------------------------------------------------------


def test_select_lowest_picks_lowest_and_breaks_ties_leftmost():
    scores = torch.tensor([[0.5, 0.1, 0.1, 0.9, 0.0], [0.3, 0.3, 0.3, 0.3, 0.3]])
    valid = torch.tensor([[True] * 4 + [False], [True] * 5])
    chosen = select_lowest(scores, torch.tensor([2, 2]), valid)
    assert chosen.tolist() == [
        [False, True, True, False, False],  # position 4 is padding: never chosen
        [True, True, False, False, False],
    ]


def test_select_lowest_never_selects_padding_even_when_asked_too_many():
    scores = torch.tensor([[0.2, 0.1, 0.0, 0.0]])
    valid = torch.tensor([[True, True, False, False]])
    before = scores.clone()
    chosen = select_lowest(scores, torch.tensor([4]), valid)
    assert chosen.tolist() == [[True, True, False, False]]
    assert torch.equal(scores, before)  # input untouched


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 12), st.integers(0, 2**31 - 1))
def test_select_lowest_invariants(rows, width, seed):
    gen = torch.Generator().manual_seed(seed)
    scores = torch.rand(rows, width, generator=gen).round(decimals=1)  # ties happen
    lengths = torch.randint(1, width + 1, (rows,), generator=gen)
    valid = torch.arange(width)[None, :] < lengths[:, None]
    counts = torch.randint(0, width + 2, (rows,), generator=gen)
    chosen = select_lowest(scores, counts, valid)
    assert not (chosen & ~valid).any()
    assert torch.equal(chosen.sum(1), torch.minimum(counts, lengths))
    for r in range(rows):
        picked = scores[r][chosen[r]]
        left = scores[r][valid[r] & ~chosen[r]]
        if picked.numel() and left.numel():
            assert picked.max() <= left.min()


# --- length beam -----------------------------------------------------------


def test_length_candidates_top_l_and_valid_range():
    logprobs = torch.log_softmax(torch.tensor([[5.0, 1.0, 4.0, 3.0, 2.0, 6.0]]), dim=-1)
    classes = torch.arange(6)[None, :]
    lengths, scores = length_candidates(logprobs, classes, beam=3, max_length=4)
    # class 0 (length 0) and class 5 (> max_length) are never proposed
    assert lengths.tolist() == [[2, 3, 4]]
    assert torch.all(scores[:, :-1] >= scores[:, 1:])


def test_length_candidates_offset_classes_are_clamped():
    logprobs = torch.log_softmax(torch.randn(2, 8), dim=-1)
    source_lengths = torch.tensor([1, 30])
    classes = source_lengths[:, None] + torch.arange(8)[None, :] - 4
    lengths, _ = length_candidates(logprobs, classes, beam=8, max_length=20)
    assert lengths.min() >= 1 and lengths.max() <= 20


def test_length_candidates_rejects_beam_larger_than_classes():
    with pytest.raises(ValueError, match="length classes"):
        length_candidates(torch.zeros(1, 4), torch.arange(4)[None, :], beam=5, max_length=9)


def test_select_best_per_sentence():
    scores = torch.tensor([-1.0, -0.5, -2.0, -3.0, -0.1, -0.1])
    assert select_best(scores, beam=3).tolist() == [1, 4]


# --- the Mask-Predict loop -------------------------------------------------


class FakeModel:
    """A deterministic step: logits from a per-row table plus a term that depends on
    the input tokens, so re-predictions change with context. Records every call."""

    def __init__(self, rows, width, seed=0):
        gen = torch.Generator().manual_seed(seed)
        self.table = torch.randn(rows, width, VOCAB, generator=gen)
        self.mix = torch.randn(VOCAB, VOCAB, generator=gen)
        self.calls = []

    def __call__(self, tokens, rows):
        self.calls.append((tokens.clone(), None if rows is None else rows.clone()))
        table = self.table if rows is None else self.table[rows]
        context = torch.nn.functional.one_hot(tokens.roll(1, dims=1), VOCAB).float()
        logits = table[:, : tokens.size(1)] + context @ self.mix  # n x L x V
        logits[..., [PAD, MASK]] = float("-inf")
        return torch.log_softmax(logits, dim=-1)


def test_mask_predict_follows_the_paper_schedule():
    lengths = torch.tensor([10, 7, 3])
    model = FakeModel(3, 10)
    result = mask_predict(
        model, lengths, MASK, PAD, MaskPredictOptions(num_passes=4, force_max_iter=True)
    )
    assert len(model.calls) == 4
    first, _ = model.calls[0]
    assert torch.equal(first.eq(MASK).sum(1), lengths)  # pass 1: all <mask>
    for t, (tokens, rows) in enumerate(model.calls[1:], start=1):
        assert rows is None
        assert tokens.eq(MASK).sum(1).tolist() == [n * (4 - t) // 4 for n in (10, 7, 3)]
    assert not result.tokens.eq(MASK).any()
    assert torch.equal(result.tokens.ne(PAD).sum(1), lengths)
    assert result.steps.tolist() == [4, 4, 4]


def test_mask_predict_remasks_lowest_and_updates_only_repredicted():
    lengths = torch.tensor([6, 5])
    model = FakeModel(2, 6, seed=3)
    history = mask_predict(
        model,
        lengths,
        MASK,
        PAD,
        MaskPredictOptions(num_passes=3, retain_history=True, force_max_iter=True),
    )
    # replay: the state after pass 1 and the input of pass 2
    first_lp, first_tok = model(model.calls[0][0], None).max(-1)
    real = torch.arange(6)[None, :] < lengths[:, None]
    second_input = model.calls[1][0]
    remasked = second_input.eq(MASK)
    for r, n in enumerate(lengths.tolist()):
        k = n * 2 // 3
        assert int(remasked[r].sum()) == k
        kept = first_lp[r][real[r] & ~remasked[r]]
        dropped = first_lp[r][remasked[r]]
        assert dropped.max() <= kept.min()
    # positions that were not re-masked keep their token from pass 1
    kept_positions = real & ~remasked
    assert torch.equal(history.history[1][kept_positions], first_tok[kept_positions])


def test_mask_predict_single_pass():
    model = FakeModel(2, 5)
    result = mask_predict(model, torch.tensor([5, 2]), MASK, PAD, MaskPredictOptions(num_passes=1))
    assert len(model.calls) == 1
    assert result.steps.tolist() == [1, 1]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 15), min_size=1, max_size=6),
    st.integers(1, 6),
    st.booleans(),
    st.integers(0, 1000),
)
def test_a_draft_stands_for_the_first_pass(lengths, passes, force, seed):
    """``first_pass`` (another decoder's scores, e.g. a CTC pass's): pass 1 reads them
    instead of calling the step, and the passes after it are those of a step whose first
    call had returned them."""
    lengths = torch.tensor(lengths)
    masks = initial_tokens(lengths, MASK, PAD)  # N x L
    draft = FakeModel(len(lengths), masks.size(1), seed=seed + 1)(masks, None)  # N x L x V
    options = MaskPredictOptions(num_passes=passes, force_max_iter=force)
    model = FakeModel(len(lengths), masks.size(1), seed=seed)
    result = mask_predict(model, lengths, MASK, PAD, options, first_pass=draft)
    assert len(model.calls) <= passes - 1
    assert all(not tokens.eq(MASK).all() for tokens, _ in model.calls)  # no all-mask pass

    replay = FakeModel(len(lengths), masks.size(1), seed=seed)
    calls = []

    def drafted(tokens, rows):
        calls.append(rows)
        return draft if len(calls) == 1 else replay(tokens, rows)

    expected = mask_predict(drafted, lengths, MASK, PAD, options)
    assert torch.equal(result.tokens, expected.tokens)
    assert torch.equal(result.steps, expected.steps)
    torch.testing.assert_close(result.scores, expected.scores)
    if passes == 1:  # the draft's best symbols, unchanged
        real = masks.eq(MASK)
        assert torch.equal(result.tokens[real], draft.argmax(dim=-1)[real])


def test_a_draft_of_the_wrong_shape_is_refused():
    lengths = torch.tensor([3, 2])
    with pytest.raises(ValueError, match="the draft's scores are"):
        mask_predict(FakeModel(2, 4), lengths, MASK, PAD, first_pass=torch.zeros(2, 4, VOCAB))


def test_early_exit_gives_the_same_output_with_fewer_calls():
    lengths = torch.tensor([12, 2, 1, 5])
    forced = mask_predict(
        FakeModel(4, 12), lengths, MASK, PAD, MaskPredictOptions(num_passes=10, force_max_iter=True)
    )
    model = FakeModel(4, 12)
    early = mask_predict(model, lengths, MASK, PAD, MaskPredictOptions(num_passes=10))
    assert torch.equal(forced.tokens, early.tokens)
    assert torch.allclose(forced.scores, early.scores)
    # a row leaves once floor(n (T - t) / T) = 0: n=2 after pass 6, n=5 after
    # pass 9, n=1 never re-masks
    assert early.steps.tolist() == [10, 6, 1, 9]
    assert len(model.calls) == 10
    assert forced.steps.tolist() == [10, 10, 10, 10]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 15), min_size=1, max_size=6),
    st.integers(1, 12),
    st.booleans(),
    st.integers(0, 1000),
)
def test_mask_predict_invariants(lengths, passes, force, seed):
    lengths = torch.tensor(lengths)
    model = FakeModel(len(lengths), 15, seed=seed)
    result = mask_predict(
        model, lengths, MASK, PAD, MaskPredictOptions(num_passes=passes, force_max_iter=force)
    )
    real = torch.arange(result.tokens.size(1))[None, :] < lengths[:, None]
    assert not result.tokens.eq(MASK).any()
    assert torch.equal(result.tokens.eq(PAD), ~real)
    assert len(model.calls) <= passes
    assert int(result.steps.max()) <= passes
    expected = (result.token_logprobs * real).sum(1) / lengths
    assert torch.allclose(result.scores, expected)


def test_mask_predict_rejects_bad_arguments():
    with pytest.raises(ValueError, match="num_passes"):
        mask_predict(
            FakeModel(1, 3), torch.tensor([3]), MASK, PAD, MaskPredictOptions(num_passes=0)
        )
    with pytest.raises(ValueError, match="length"):
        mask_predict(
            FakeModel(1, 3), torch.tensor([0]), MASK, PAD, MaskPredictOptions(num_passes=2)
        )


def test_decoding_core_imports_no_fairseq():
    code = (
        "import sys; sys.modules['fairseq'] = None; "
        "import cmlm_decoding, torch; "
        "assert not any(m.startswith('fairseq') and sys.modules[m] is not None "
        "for m in sys.modules); print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 9), min_size=1, max_size=4),
    st.integers(1, 6),
    st.sampled_from(["max_prob", "neg_entropy", "consistency"]),
    st.booleans(),
)
def test_sparse_step_gives_the_dense_result(lengths, passes, confidence, force):
    """Projecting only the re-predicted positions changes nothing but the work."""
    lengths = torch.tensor(lengths)
    width = int(lengths.max())
    dense_model, sparse_model = FakeModel(len(lengths), width), FakeModel(len(lengths), width)
    asked = []

    def sparse(tokens, rows, where):
        asked.append(int(where.sum()))
        return sparse_model(tokens, rows)[where]  # M x V

    kwargs = dict(force_max_iter=force, confidence=confidence, retain_history=True)
    dense = mask_predict(dense_model, lengths, MASK, PAD, MaskPredictOptions(passes, **kwargs))
    options = MaskPredictOptions(passes, sparse_step=True, **kwargs)
    result = mask_predict(sparse, lengths, MASK, PAD, options)
    for field in ("tokens", "token_logprobs", "scores", "steps"):
        assert torch.equal(getattr(dense, field), getattr(result, field)), field
    assert all(torch.equal(a, b) for a, b in zip(dense.history, result.history))
    # pass 1 asks for every position, later passes only for the re-masked ones
    assert asked[0] == int(lengths.sum())
    inputs = [tokens for tokens, _ in sparse_model.calls[1:]]
    assert asked[1:] == [int(t.eq(MASK).sum()) for t in inputs]


@pytest.mark.parametrize(
    "values, field, flag",
    [
        ({"num_passes": 0}, "num_passes", "--iter-decode-max-iter"),
        ({"ratio": 1.0}, "ratio", "--remask-ratio"),
        ({"schedule": "x{y}"}, "schedule", "--remask-schedule"),
        ({"calibration_temperature": 0.0}, "calibration_temperature", "--calibration-temperature"),
    ],
)
def test_options_are_checked_when_built_and_name_the_callers_flag(values, field, flag):
    with pytest.raises(OptionError) as error:
        MaskPredictOptions(**values)
    assert str(error.value).startswith(field)
    rendered = error.value.render({field: flag})
    assert rendered.startswith(flag) and field not in rendered.replace(flag, "")
    assert repr(next(iter(values.values()))) in rendered  # the bad value, verbatim
