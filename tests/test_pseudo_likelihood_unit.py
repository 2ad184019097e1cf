"""Unit tests of ``cmlm_decoding.pseudo_log_likelihood`` on hand-built steps (no model)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cmlm_decoding import pseudo_log_likelihood

PAD, MASK, VOCAB = 0, 1, 7  # symbols of the hand-built vocabulary; real tokens are 2..6


class ContextStep:
    """Scores that depend on the whole input row: logits[i, v] = A[i, v] + sum_j B[x_j, v].

    Records the inputs it was called with; answers at the ``where`` positions (M x V).
    """

    def __init__(self, width, seed=0):
        generator = torch.Generator().manual_seed(seed)
        self.a = torch.randn(width, VOCAB, generator=generator)  # L x V
        self.b = torch.randn(VOCAB, VOCAB, generator=generator)  # V x V
        self.calls = []

    def full(self, tokens):
        context = self.b[tokens].sum(dim=1, keepdim=True)  # N x 1 x V, pads and masks too
        return self.a[None, : tokens.size(1)] + context  # N x L x V

    def __call__(self, tokens, rows, where=None):
        self.calls.append(tokens.clone())
        scores = self.full(tokens)  # N x L x V
        return scores if where is None else scores[where]  # M x V


def rows(draw_lengths, width):
    lengths = torch.tensor(draw_lengths)
    real = torch.arange(width)[None, :] < lengths[:, None]  # N x L
    tokens = torch.randint(2, VOCAB, real.shape, generator=torch.Generator().manual_seed(1))
    return tokens.masked_fill(~real, PAD), real


def exact_pll(step, tokens, real):
    """One call per position by hand: the mean of log P(y_i | every other token)."""
    total = torch.zeros(tokens.size(0))
    for i in range(tokens.size(1)):
        hidden = tokens.clone()
        hidden[:, i] = MASK
        logprobs = torch.log_softmax(step.full(hidden)[:, i], dim=-1)  # N x V
        picked = logprobs.gather(1, tokens[:, i : i + 1]).squeeze(1)  # N
        total += torch.where(real[:, i], picked, torch.zeros_like(picked))
    return total / real.sum(dim=1).clamp(min=1)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=4), st.integers(0, 3))
def test_one_group_per_position_is_the_exact_pseudo_log_likelihood(lengths, extra):
    width = max(lengths)
    tokens, real = rows(lengths, width)
    step = ContextStep(width)
    scores = pseudo_log_likelihood(step, tokens, MASK, PAD, groups=width + extra)
    assert torch.allclose(scores, exact_pll(step, tokens, real), atol=1e-5)
    assert len(step.calls) == width  # never more calls than positions


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 8), min_size=1, max_size=4), st.integers(1, 5))
def test_each_call_hides_one_residue_class_and_never_a_pad(lengths, groups):
    width = max(lengths)
    tokens, real = rows(lengths, width)
    step = ContextStep(width)
    pseudo_log_likelihood(step, tokens, MASK, PAD, groups)
    hidden = torch.stack([call.eq(MASK) for call in step.calls])  # G' x N x L
    assert len(step.calls) == min(groups, width)
    assert hidden.sum(dim=0).eq(real.long()).all()  # every real position hidden exactly once
    position = torch.arange(width)
    for g, mask in enumerate(hidden):
        assert not mask[:, position % groups != g].any()
        kept = ~mask
        assert torch.equal(step.calls[g][kept], tokens[kept])  # the rest is the candidate


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 8), min_size=1, max_size=4), st.integers(1, 9))
def test_without_context_the_score_is_the_same_for_every_split(lengths, groups):
    width = max(lengths)
    tokens, real = rows(lengths, width)
    fixed = torch.log_softmax(torch.randn(len(lengths), width, VOCAB), dim=-1)  # N x L x V

    def step(inputs, rows, where=None):
        return fixed if where is None else fixed[where]  # ignores its input

    expected = fixed.gather(2, tokens[:, :, None]).squeeze(2)  # N x L
    expected = (expected * real).sum(dim=1) / real.sum(dim=1)
    scores = pseudo_log_likelihood(step, tokens, MASK, PAD, groups)
    assert torch.allclose(scores, expected, atol=1e-5)
    assert (scores <= 0).all()


def test_banned_symbols_at_minus_infinity_are_renormalised_away():
    scores = torch.tensor([[0.0, float("-inf"), 0.0, 0.0]]).log_softmax(-1)  # 3 allowed

    def step(inputs, rows, where=None):
        full = scores.expand(inputs.size(0), inputs.size(1), -1)  # N x L x V
        return full if where is None else full[where]

    tokens = torch.tensor([[2, 3]])
    value = pseudo_log_likelihood(step, tokens, MASK, PAD, groups=2)
    assert torch.allclose(value, torch.tensor([-torch.log(torch.tensor(3.0))]))


def test_no_group_is_refused():
    with pytest.raises(ValueError, match="groups must be >= 1"):
        pseudo_log_likelihood(ContextStep(2), torch.tensor([[2, 3]]), MASK, PAD, groups=0)
