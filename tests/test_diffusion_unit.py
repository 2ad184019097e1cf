"""Unit tests of the masked-diffusion sampler core (``cmlm_decoding.diffusion``/``sampling``)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cmlm_decoding import (
    DiffusionOptions,
    choose_tokens,
    diffusion_sample,
    guided_logits,
    initial_tokens,
    transfer_counts,
)

PAD, MASK, EOS, VOCAB = 1, 3, 2, 12


def schedule(masked, steps):
    m, s = torch.tensor([masked]), torch.tensor([steps])
    return [int(transfer_counts(m, s, torch.tensor([j]))) for j in range(steps)]


@pytest.mark.parametrize(
    "masked, steps, expected",
    [(10, 4, [3, 3, 2, 2]), (2, 4, [1, 1, 0, 0]), (8, 8, [1] * 8), (7, 1, [7]), (0, 3, [0, 0, 0])],
)
def test_transfer_counts_remainder_goes_to_first_steps(masked, steps, expected):
    assert schedule(masked, steps) == expected


@given(st.integers(0, 200), st.integers(1, 64))
def test_transfer_counts_empty_the_block_on_schedule(masked, steps):
    counts = schedule(masked, steps)
    assert sum(counts) == masked
    assert counts == sorted(counts, reverse=True) and max(counts) - min(counts) <= 1


# --- token choice ----------------------------------------------------------


def test_zero_temperature_is_argmax_and_small_temperature_converges():
    logits = torch.randn(4, 7, VOCAB, generator=torch.Generator().manual_seed(0))
    assert torch.equal(choose_tokens(logits, 0.0), logits.argmax(-1))
    gen = torch.Generator().manual_seed(1)
    assert torch.equal(choose_tokens(logits, 1e-6, gen), logits.argmax(-1))


def test_gumbel_sampling_is_seeded():
    logits = torch.randn(3, 5, VOCAB)
    a = choose_tokens(logits, 1.0, torch.Generator().manual_seed(7))
    b = choose_tokens(logits, 1.0, torch.Generator().manual_seed(7))
    assert torch.equal(a, b)


def test_gumbel_sampling_matches_the_tempered_softmax():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    draws, tau = 40000, 0.7
    picks = choose_tokens(logits.expand(draws, 4), tau, torch.Generator().manual_seed(3))
    freq = torch.bincount(picks, minlength=4).double() / draws
    target = torch.softmax(logits.double() / tau, dim=0)
    # 40000 draws: standard error <= 0.0025 per class; tolerance 0.01 is 4 sigma
    assert torch.all((freq - target).abs() < 0.01), (freq, target)


def test_negative_temperature_is_rejected():
    with pytest.raises(ValueError, match="temperature"):
        choose_tokens(torch.zeros(1, 3), -0.1)


def test_classifier_free_guidance_combination():
    cond, uncond = torch.tensor([1.0, 3.0]), torch.tensor([2.0, 0.0])
    assert torch.equal(guided_logits(cond, uncond, 0.0), cond)
    assert torch.equal(guided_logits(cond, uncond, 1.0), 2 * cond - uncond)
    assert torch.allclose(guided_logits(cond, uncond, 0.5), uncond + 1.5 * (cond - uncond))


# --- the sampler -----------------------------------------------------------


class FakeLogits:
    """Deterministic logits from a per-row table; records each call's input."""

    def __init__(self, rows, width, seed=0, sharp=1.0):
        gen = torch.Generator().manual_seed(seed)
        self.table = sharp * torch.randn(rows, width, VOCAB, generator=gen)
        self.table[..., [PAD, MASK, EOS]] = -1e4
        self.calls = []

    def __call__(self, tokens, rows):
        self.calls.append((tokens.clone(), rows))
        table = self.table if rows is None else self.table[rows]
        return table[:, : tokens.size(1)].clone()


def test_blocks_left_to_right_and_empty_on_schedule():
    tokens = initial_tokens(torch.tensor([8]), MASK, PAD)
    fake = FakeLogits(1, 8)
    out = diffusion_sample(
        fake, tokens, MASK, PAD, DiffusionOptions(steps=4, block_length=4, retain_history=True)
    )
    masks = [int(h.eq(MASK).sum()) for h in out.history]
    assert masks == [6, 4, 2, 0]  # 2 blocks x 2 steps, 2 tokens per step
    # while the first block is decoded the second stays fully masked
    assert out.history[0][0, 4:].eq(MASK).all() and out.history[1][0, 4:].eq(MASK).all()
    assert out.history[1][0, :4].ne(MASK).all()
    assert out.steps.tolist() == [4]


def test_remainder_goes_to_the_first_steps_and_most_confident_first():
    tokens = initial_tokens(torch.tensor([5]), MASK, PAD)
    fake = FakeLogits(1, 5, seed=2)
    out = diffusion_sample(
        fake, tokens, MASK, PAD, DiffusionOptions(steps=2, block_length=5, retain_history=True)
    )
    assert [int(h.eq(MASK).sum()) for h in out.history] == [2, 0]
    probs = torch.softmax(fake.table[0], -1).max(-1).values
    first = out.history[0][0].ne(MASK)
    assert probs[first].min() >= probs[~first].max()


def test_one_token_per_step_when_steps_equal_length():
    tokens = initial_tokens(torch.tensor([6, 3]), MASK, PAD)
    out = diffusion_sample(
        FakeLogits(2, 6), tokens, MASK, PAD, DiffusionOptions(steps=6, block_length=6)
    )
    assert out.steps.tolist() == [6, 3]  # the short row needs no call once filled


def test_threshold_reveals_at_least_one_and_never_padding():
    tokens = initial_tokens(torch.tensor([6, 2]), MASK, PAD)
    unsure = diffusion_sample(
        FakeLogits(2, 6, sharp=0.01),
        tokens,
        MASK,
        PAD,
        DiffusionOptions(steps=6, block_length=6, threshold=0.9),
    )
    assert unsure.steps.tolist() == [6, 2]  # nothing reaches 0.9: one per step
    sure = diffusion_sample(
        FakeLogits(2, 6, sharp=100.0),
        tokens,
        MASK,
        PAD,
        DiffusionOptions(steps=6, block_length=3, threshold=0.9),
    )
    assert sure.steps.tolist() == [2, 1]  # every position is confident: one step per block
    for out in (unsure, sure):
        assert torch.equal(out.tokens.eq(PAD), tokens.eq(PAD))
        assert not out.tokens.eq(MASK).any()


def test_infilling_keeps_given_tokens():
    tokens = initial_tokens(torch.tensor([7]), MASK, PAD)
    tokens[0, [0, 3, 4]] = torch.tensor([5, 6, 7])
    out = diffusion_sample(
        FakeLogits(1, 7), tokens, MASK, PAD, DiffusionOptions(steps=4, block_length=7)
    )
    assert out.tokens[0, [0, 3, 4]].tolist() == [5, 6, 7]
    assert not out.tokens.eq(MASK).any()
    assert out.token_logprobs[0, [0, 3, 4]].eq(0).all()


def test_positions_after_a_generated_eos_become_padding():
    tokens = initial_tokens(torch.tensor([5]), MASK, PAD)
    fake = FakeLogits(1, 5)
    fake.table[0, 2, EOS] = 1e4  # position 2 predicts EOS with certainty
    out = diffusion_sample(
        fake, tokens, MASK, PAD, DiffusionOptions(steps=5, block_length=5), eos_idx=EOS
    )
    assert out.tokens[0, 2:].eq(PAD).all() and out.tokens[0, :2].ne(PAD).all()


def test_bad_sampler_arguments_are_rejected():
    tokens = initial_tokens(torch.tensor([3]), MASK, PAD)
    for kwargs, message in (
        ({"steps": 0, "block_length": 3}, "steps"),
        ({"steps": 2, "block_length": -1}, "block length"),
        ({"steps": 2, "block_length": 3, "threshold": 1.5}, "threshold"),
        ({"steps": 2, "block_length": 3, "remasking": "worst"}, "remasking"),
    ):
        with pytest.raises(ValueError, match=message):
            diffusion_sample(FakeLogits(1, 3), tokens, MASK, PAD, DiffusionOptions(**kwargs))


# lengths, steps, block length, threshold
SAMPLER_SHAPES = (
    st.lists(st.integers(0, 12), min_size=1, max_size=5),
    st.integers(1, 16),
    st.integers(1, 12),
    st.sampled_from([None, 0.5, 0.9]),
)


@settings(max_examples=40, deadline=None)
@given(
    *SAMPLER_SHAPES,
    st.sampled_from(["low_confidence", "random"]),
    st.floats(0, 2),
    st.integers(0, 10**6),
)
def test_sampler_invariants(lengths, steps, block, threshold, remasking, temperature, seed):
    lengths = torch.tensor(lengths)
    tokens = initial_tokens(lengths, MASK, PAD)
    gen = torch.Generator().manual_seed(seed)
    given_mask = (torch.rand(tokens.shape, generator=gen) < 0.3) & tokens.eq(MASK)
    tokens[given_mask] = 5  # a template: some positions given
    before = tokens.clone()
    fake = FakeLogits(len(lengths), max(1, tokens.size(1)), seed=seed)
    out = diffusion_sample(
        fake,
        tokens,
        MASK,
        PAD,
        DiffusionOptions(
            steps=steps,
            block_length=block,
            temperature=temperature,
            remasking=remasking,
            threshold=threshold,
        ),
        generator=gen,
    )
    assert torch.equal(tokens, before)
    assert not out.tokens.eq(MASK).any()
    assert torch.equal(out.tokens.eq(PAD), before.eq(PAD))
    assert torch.equal(out.tokens[given_mask], before[given_mask])
    masked = before.eq(MASK).sum(1)
    blocks = torch.div(lengths + block - 1, block, rounding_mode="floor").clamp(min=1)
    assert torch.all(out.steps <= masked)  # at least one token per call
    if threshold is None:
        assert torch.all(out.steps <= torch.clamp(blocks, min=steps))


class SparseFakeLogits(FakeLogits):
    """``FakeLogits`` that also answers ``where``: the ``M x V`` rows it marks."""

    def __call__(self, tokens, rows, where=None):
        logits = super().__call__(tokens, rows)  # n x L x V
        return logits if where is None else logits[where]


@settings(max_examples=40, deadline=None)
@given(
    *SAMPLER_SHAPES,
    st.sampled_from([(0.0, "low_confidence"), (0.7, "low_confidence"), (0.0, "random")]),
    st.integers(0, 10**6),
)
def test_sparse_step_decodes_exactly_like_the_dense_one(
    lengths, steps, block, threshold, sampling, seed
):
    temperature, remasking = sampling
    tokens = initial_tokens(torch.tensor(lengths), MASK, PAD)
    outs, fakes = [], []
    for sparse in (False, True):
        fake = SparseFakeLogits(len(lengths), max(1, tokens.size(1)), seed=seed)
        gen = torch.Generator().manual_seed(seed)
        outs.append(
            diffusion_sample(fake, tokens, MASK, PAD, DiffusionOptions(steps=steps, block_length=block, temperature=temperature, remasking=remasking, threshold=threshold, sparse_step=sparse), generator=gen)  # fmt: skip
        )
        fakes.append(fake)
    dense, sparse = outs
    assert torch.equal(dense.tokens, sparse.tokens) and torch.equal(dense.steps, sparse.steps)
    torch.testing.assert_close(dense.scores, sparse.scores)
    torch.testing.assert_close(dense.token_logprobs, sparse.token_logprobs)
    assert len(fakes[0].calls) == len(fakes[1].calls)
