"""Unit tests of the CMLM training noise (``cmlm_plugin.training.noise``)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cmlm_plugin.training.noise import uniform_mask

PAD, BOS, EOS, MASK = 1, 0, 2, 9
SPECIAL = [PAD, BOS, EOS, MASK]


def batch(lengths, width):
    target = torch.full((len(lengths), width), PAD)
    for r, n in enumerate(lengths):
        target[r, :n] = torch.arange(n) % 4 + 4  # real tokens 4..7
    return target


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(0, 12), min_size=1, max_size=8),
    st.floats(0, 1),
    st.floats(0, 1),
    st.integers(0, 2**31 - 1),
)
def test_uniform_mask_invariants(lengths, r1, r2, seed):
    low, high = min(r1, r2), max(r1, r2)
    target = batch(lengths, 12)
    before = target.clone()
    noisy = uniform_mask(target, MASK, SPECIAL, low, high, torch.Generator().manual_seed(seed))
    assert torch.equal(target, before)
    masked = noisy.eq(MASK)
    assert torch.equal(noisy[~masked], target[~masked])  # only masks, never alters
    assert not (masked & target.eq(PAD)).any()
    for r, n in enumerate(lengths):
        k = int(masked[r].sum())
        if n == 0:
            assert k == 0
            continue
        assert 1 <= k <= n
        # ceil(low n) <= k <= floor(high n), within float32 rounding, kept in 1..n
        assert k >= min(max(1, math.ceil(low * n - 1e-4)), n)
        assert k <= max(math.floor(high * n + 1e-4), min(max(1, math.ceil(low * n - 1e-4)), n))


def test_specials_never_masked():
    target = torch.tensor([[BOS, 4, 5, 6, EOS, PAD]])
    for seed in range(50):
        noisy = uniform_mask(target, MASK, SPECIAL, generator=torch.Generator().manual_seed(seed))
        assert noisy[0, 0] == BOS and noisy[0, 4] == EOS and noisy[0, 5] == PAD


def test_masked_count_is_uniform_on_1_to_n():
    n, draws = 5, 4000
    target = batch([n] * draws, n)
    noisy = uniform_mask(target, MASK, SPECIAL, generator=torch.Generator().manual_seed(0))
    counts = torch.bincount(noisy.eq(MASK).sum(1), minlength=n + 1)
    assert counts[0] == 0
    freq = counts[1:].float() / draws
    # 4000 draws: the standard error of each frequency is ~0.0063; allow 4 sigma
    assert torch.all((freq - 1 / n).abs() < 0.025), freq


def test_ratio_range_bounds_the_count():
    n = 10
    target = batch([n] * 2000, n)
    noisy = uniform_mask(target, MASK, SPECIAL, 0.3, 0.6, torch.Generator().manual_seed(1))
    k = noisy.eq(MASK).sum(1)
    assert int(k.min()) == 3 and int(k.max()) == 6


def test_bad_ratio_range_is_rejected():
    with pytest.raises(ValueError, match="mask ratio"):
        uniform_mask(batch([3], 3), MASK, SPECIAL, 0.8, 0.2)


# --- masked diffusion forward process and empty sources ------------------------

from cmlm_plugin.training.noise import diffusion_mask, empty_sources  # noqa: E402


def test_diffusion_mask_rate_follows_p():
    target = batch([40] * 3000, 40)
    noisy, p = diffusion_mask(
        target, MASK, SPECIAL, eps=1e-3, generator=torch.Generator().manual_seed(0)
    )
    assert p.min() >= 1e-3 and p.max() <= 1.0
    rate = noisy.eq(MASK).float().mean(1)
    # per sentence the masked fraction is Binomial(40, p) / 40: sd <= 0.08
    assert (rate - p).abs().mean() < 0.07
    assert abs(float(rate.mean()) - 0.5) < 0.02  # t ~ U(0, 1)
    assert not (noisy.eq(MASK) & target.eq(PAD)).any()


def test_diffusion_mask_rejects_bad_eps():
    with pytest.raises(ValueError, match="eps"):
        diffusion_mask(batch([3], 3), MASK, SPECIAL, eps=0.0)


@pytest.mark.parametrize("left_pad", [True, False])
def test_empty_sources_replace_only_dropped_rows(left_pad):
    src = (
        torch.tensor([[PAD, 4, 5, EOS], [6, 7, 8, EOS]])
        if left_pad
        else torch.tensor([[4, 5, EOS, PAD], [6, 7, 8, EOS]])
    )
    tokens, lengths = empty_sources(src, torch.tensor([True, False]), PAD, EOS, left_pad)
    empty = [PAD, PAD, PAD, EOS] if left_pad else [EOS, PAD, PAD, PAD]
    assert tokens[0].tolist() == empty and tokens[1].tolist() == src[1].tolist()
    assert lengths.tolist() == [1, 4]
