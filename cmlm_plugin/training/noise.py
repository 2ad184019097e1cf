"""Training noise: the CMLM rule and the masked-diffusion forward process.

CMLM, Ghazvininejad et al. (2019), Section 2: for each target sentence of n tokens
the number of masked tokens k is drawn uniformly from 1..n and k positions chosen
uniformly at random are replaced by ``<mask>``. An optional ratio range
``[ratio_min, ratio_max]`` narrows k to ``ceil(ratio_min n) .. floor(ratio_max n)``
(kept inside 1..n), an option of this plugin that the paper does not use
(defaults 0 and 1 give the paper's rule exactly).

Masked diffusion, Nie et al. (2025), Eq. 3 / Ou et al. (2025): t ~ U(0, 1) per
sentence and every token is masked independently with probability
``p = (1 - eps) t + eps`` (LLaDA: eps = 1e-3, so that p > 0).

Special symbols are never masked, and the source is never touched (except that
``empty_sources`` replaces whole sources for classifier-free guidance training).
"""

from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor


def maskable_positions(target: Tensor, special_ids: Sequence[int]) -> Tensor:
    """``B x T`` bool: positions holding a real token (not pad/BOS/EOS/...)."""
    special = torch.tensor(list(special_ids), device=target.device)
    return ~torch.isin(target, special)


def uniform_mask(
    target: Tensor,
    mask_idx: int,
    special_ids: Sequence[int],
    ratio_min: float = 0.0,
    ratio_max: float = 1.0,
    generator: Optional[torch.Generator] = None,
) -> Tensor:
    """Mask a batch of targets with the CMLM rule.

    Args:
        target: ``B x T`` token ids.
        mask_idx: the ``<mask>`` symbol.
        special_ids: symbols never to mask (pad, BOS, EOS, ...).
        ratio_min, ratio_max: bounds on the masked ratio, ``0 <= min <= max <= 1``.
        generator: optional torch generator for reproducible draws.

    Returns:
        The masked copy of ``target`` (``B x T``); the input is not modified. A row
        with no real token is returned unchanged.
    """
    if not 0.0 <= ratio_min <= ratio_max <= 1.0:
        raise ValueError(
            f"mask ratio range must satisfy 0 <= min <= max <= 1, "
            f"got [{ratio_min}, {ratio_max}]"
        )
    real = maskable_positions(target, special_ids)  # B x T
    n = real.sum(dim=1)  # B
    low = torch.ceil(n * ratio_min).long().clamp(min=1)
    high = torch.floor(n * ratio_max).long()
    high = torch.maximum(high, low).minimum(n)  # B
    low = low.minimum(n)
    draw = torch.rand(n.shape, device=target.device, generator=generator)  # B
    k = low + (draw * (high - low + 1).float()).long().minimum(high - low)  # B

    scores = torch.rand(target.shape, device=target.device, generator=generator)
    scores = scores.masked_fill(~real, 2.0)  # B x T, real positions in [0, 1)
    order = scores.argsort(dim=1)  # B x T
    take_sorted = torch.arange(target.size(1), device=target.device)[None, :] < k[:, None]
    chosen = torch.zeros_like(real).scatter(1, order, take_sorted)  # B x T
    return target.masked_fill(chosen, mask_idx)


def diffusion_mask(
    target: Tensor,
    mask_idx: int,
    special_ids: Sequence[int],
    eps: float = 1e-3,
    generator: Optional[torch.Generator] = None,
) -> Tuple[Tensor, Tensor]:
    """Mask each real token independently with probability ``p = (1 - eps) t + eps``.

    Returns:
        ``(noisy, p)``: the masked copy of ``target`` (``B x T``) and the masking
        probability of each sentence (``(B,)``, float32), whose inverse weights the
        loss. The input is not modified.
    """
    if not 0.0 < eps < 1.0:
        raise ValueError(f"the diffusion noise floor eps must be in (0, 1), got {eps}")
    real = maskable_positions(target, special_ids)  # B x T
    t = torch.rand(target.size(0), device=target.device, generator=generator)  # B
    p = (1.0 - eps) * t + eps  # B
    draw = torch.rand(target.shape, device=target.device, generator=generator)  # B x T
    chosen = real & (draw < p[:, None])  # B x T
    return target.masked_fill(chosen, mask_idx), p


def empty_sources(
    src_tokens: Tensor, drop: Tensor, pad_idx: int, eos_idx: int, left_pad: bool
) -> Tuple[Tensor, Tensor]:
    """Replace the sources of the rows in ``drop`` (``(B,)`` bool) by an empty one.

    An empty source is EOS alone (fairseq's encoding of an empty line); this is the
    unconditional input of classifier-free guidance. Returns the new
    ``(src_tokens, src_lengths)``; the input is not modified.
    """
    empty = torch.full_like(src_tokens[0], pad_idx)  # S
    empty[-1 if left_pad else 0] = eos_idx
    tokens = torch.where(drop[:, None], empty[None, :], src_tokens)  # B x S
    return tokens, tokens.ne(pad_idx).sum(dim=1)
