"""Training inputs built from the model's own first pass: glancing and self-correction.

Both start from the CMLM input (the reference with ``k ~ U{1..n}`` tokens masked,
``training.noise.uniform_mask``), let the model predict its masked positions once without
gradients (``predicted``), and then change the input of the pass that is trained.

Glancing (GLAT: Qian et al., ACL 2021, §3): the worse the first pass, the more of the
reference the trained pass is shown. GLAT decodes the whole target in the first pass
and reveals ``floor(ratio * wrong)`` reference tokens at random positions, ``wrong``
the first pass's errors; the loss covers the positions not revealed. Here the first
pass is the CMLM input, so ``wrong`` counts errors at its ``k`` masked positions and
the revealed tokens are drawn among them, at least one position staying masked; with
``k = n`` this is GLAT's rule. Keeping the CMLM mask distribution (rather than GLAT's
all-masked first pass) keeps every masking ratio in training, which Mask-Predict's
later passes need. GLAT anneals the ratio from 0.5 to 0.3 over training
(``glancing_ratio``). ``--glancing-full-mask P`` gives a share P of the sentences
GLAT's all-masked first pass (``mask_whole_rows``; P = 1 is GLAT's rule, the default
0 the CMLM input alone): only about 1/n of the CMLM inputs are all masked, the input a
one-pass (T=1) decode starts from.

Self-correction (SMART: Ghazvininejad et al., 2020; the correction loss of CMLMC:
Huang et al., ICLR 2022): at test time Mask-Predict's observed tokens are the model's
own, partly wrong, predictions, while CMLM training only ever shows it reference
tokens. Here a sentence (chosen by the task with probability ``--self-correction``)
takes the first pass's predictions at its masked positions, then a fresh CMLM mask
(``k' ~ U{1..n}``) is drawn over the result: observed positions outside the new mask
that hold predictions stay as predicted, and the loss covers the new mask and those
positions, so the model learns to fix its own errors (SMART trains on every position;
CMLMC on the masked and the replaced ones, as here).

Glancing with CTC (``--ctc-upsample`` with ``--glancing-ratio``; Gu & Kong, Findings of
ACL 2021): the first pass decodes the whole canvas, the reference is placed on it by its
best alignment (``models.ctc.best_alignment``), ``wrong`` counts the canvas positions
where the first pass's symbol (or blank) differs from the alignment's, and
``floor(ratio * wrong)`` positions drawn at random take the alignment's label as their
input (a blank as ``<mask>``, the blank's symbol) (``ctc_glancing_input``). The loss stays
CTC over the whole canvas, as in their method.

Both papers train with their method from the first update. The task can start both
later (``--second-pass-from-update``, a deviation): on distilled Multi30k targets they
kept the model from learning to use the source when on from the start, and helped when
switched on after 1500 plain updates (docs/training.md).
"""

from typing import Optional, Tuple

import torch
from torch import Tensor

from .noise import maskable_positions


def random_subset(candidates: Tensor, counts: Tensor, generator=None) -> Tensor:
    """``B x T`` bool: ``counts[i]`` positions of ``candidates`` (``B x T``) drawn at random."""
    scores = torch.rand(candidates.shape, device=candidates.device, generator=generator)
    scores = scores.masked_fill(~candidates, 2.0)  # B x T, candidates in [0, 1)
    order = scores.argsort(dim=1)  # B x T
    width = candidates.size(1)
    take_sorted = torch.arange(width, device=candidates.device)[None, :] < counts[:, None]
    return torch.zeros_like(candidates).scatter(1, order, take_sorted)  # B x T


def mask_whole_rows(
    prev: Tensor, target: Tensor, rows: Tensor, mask_idx: int, special_ids
) -> Tensor:
    """``prev`` (``B x T``) with every real token of ``target`` masked in ``rows`` (``(B,)`` bool)."""
    real = maskable_positions(target, special_ids)  # B x T
    return prev.masked_fill(rows[:, None] & real, mask_idx)


def glancing_ratio(start: float, end: float, anneal_updates: int, update: int) -> float:
    """GLAT's ratio, linear from ``start`` to ``end`` over ``anneal_updates`` (0: ``start``)."""
    if anneal_updates <= 0:
        return start
    progress = min(max(update, 0) / anneal_updates, 1.0)
    return start + (end - start) * progress


def glancing_input(
    prev: Tensor,
    target: Tensor,
    predicted: Tensor,
    mask_idx: int,
    ratio: float,
    generator: Optional[torch.Generator] = None,
) -> Tuple[Tensor, Tensor]:
    """Reveal ``floor(ratio * wrong)`` reference tokens among the masked positions.

    Args:
        prev: ``B x T`` CMLM input (reference tokens and ``<mask>``).
        target: ``B x T`` reference.
        predicted: ``B x T`` first-pass tokens (read at the masked positions only).
        ratio: the glancing ratio, ``0 <= ratio <= 1``.

    Returns:
        ``(input, loss_positions)``, ``B x T`` each: the new input and the positions
        still masked, which the loss covers (at least one per row that had any).
    """
    masked = prev.eq(mask_idx)  # B x T
    wrong = (masked & predicted.ne(target)).sum(dim=1)  # B
    reveal = torch.floor(wrong.double() * ratio).long()  # B
    reveal = torch.minimum(reveal, (masked.sum(dim=1) - 1).clamp(min=0))  # one stays masked
    shown = random_subset(masked, reveal, generator)  # B x T
    return torch.where(shown, target, prev), masked & ~shown


def ctc_glancing_input(
    canvas: Tensor,
    predicted: Tensor,
    aligned: Tensor,
    candidates: Tensor,
    ratio: float,
    generator: Optional[torch.Generator] = None,
) -> Tensor:
    """``B x L`` CTC canvas with ``floor(ratio * wrong)`` positions showing the alignment.

    Args:
        canvas: ``B x L`` decoder input of CTC.
        predicted: ``B x L`` first-pass symbol (or blank) of each position.
        aligned: ``B x L`` the best alignment's label of each position.
        candidates: ``B x L`` positions that may be revealed (the real canvas of rows
            that have an alignment); errors are counted there.
    """
    wrong = (candidates & predicted.ne(aligned)).sum(dim=1)  # B
    reveal = torch.floor(wrong.double() * ratio).long()  # B
    shown = random_subset(candidates, reveal, generator)  # B x L
    return torch.where(shown, aligned, canvas)


def self_correction_input(
    prev: Tensor, target: Tensor, predicted: Tensor, remask: Tensor, mask_idx: int
) -> Tuple[Tensor, Tensor]:
    """Observed tokens from the model's own predictions, and a loss that covers them.

    Args:
        prev: ``B x T`` CMLM input; its masked positions are the first pass's.
        target: ``B x T`` reference.
        predicted: ``B x T`` first-pass tokens (read at ``prev``'s masked positions).
        remask: ``B x T`` a second CMLM input over ``target`` (``uniform_mask``),
            whose ``<mask>`` positions are the trained pass's masked positions.

    Returns:
        ``(input, loss_positions)``, ``B x T`` each: ``<mask>`` at ``remask``'s masked
        positions, the first pass's prediction at the other positions ``prev`` had
        masked, the reference elsewhere (padding included); the loss covers the first
        two kinds.
    """
    first_masked = prev.eq(mask_idx)  # B x T
    second_masked = remask.eq(mask_idx)  # B x T
    filled = torch.where(first_masked, predicted, target)  # B x T, the first pass's output
    return filled.masked_fill(second_masked, mask_idx), first_masked | second_masked
