"""How many tokens to re-mask (Mask-Predict) or reveal (masked diffusion) per step.

Mask-Predict, Ghazvininejad et al. (2019), Section 3.2: at iteration t (t = 1 .. T-1,
after the first pass) the number of masked tokens is n * (T - t) / T, a linear decay
from n towards 0. The count is floored, as in the original implementation
(``(seq_lens * (1 - t / T)).long()``); here it is computed in integers so that no
float rounding can move it. Other schedules (not in the paper; from the first design
source and MaskGIT): ``cosine`` n cos(pi t / 2T), ``exponential`` n (1 - 2^(t-T))
(the kept count doubles every pass), ``fixed`` a constant ratio r of n every pass.
All are floored and non-increasing in t, so a row whose count reaches 0 is done.
"""

import math

import torch
from torch import Tensor

REMASK_SCHEDULES = ("linear", "cosine", "exponential", "fixed")


def linear_remask_count(lengths: Tensor, num_passes: int, step: int) -> Tensor:
    """Tokens to re-mask before pass ``step + 1``.

    Args:
        lengths: target lengths n, shape ``(N,)``, integer.
        num_passes: T, the total number of decoder passes (``>= 1``).
        step: t, the number of passes already made (``1 <= t < T``).

    Returns:
        ``floor(n * (T - t) / T)`` per row, shape ``(N,)``, same dtype as lengths.
    """
    if num_passes < 1:
        raise ValueError(f"num_passes must be >= 1, got {num_passes}")
    if not 1 <= step < num_passes:
        raise ValueError(f"step must be in [1, {num_passes - 1}], got {step}")
    return torch.div(lengths * (num_passes - step), num_passes, rounding_mode="floor")


def remask_count(
    lengths: Tensor, num_passes: int, step: int, schedule: str = "linear", ratio: float = 0.5
) -> Tensor:
    """Tokens to re-mask before pass ``step + 1`` under ``schedule``.

    ``linear`` is the paper's rule (``linear_remask_count``); ``ratio`` is the
    constant fraction of the ``fixed`` schedule. Counts lie in ``[0, n - 1]``.
    """
    if schedule == "linear":
        return linear_remask_count(lengths, num_passes, step)
    if schedule not in REMASK_SCHEDULES:
        raise ValueError(f"remask schedule must be one of {REMASK_SCHEDULES}, got {schedule!r}")
    if not 1 <= step < num_passes:
        raise ValueError(f"step must be in [1, {num_passes - 1}], got {step}")
    if schedule == "cosine":
        fraction = math.cos(math.pi * step / (2 * num_passes))
    elif schedule == "exponential":
        fraction = 1.0 - 2.0 ** (step - num_passes)
    else:
        if not 0.0 <= ratio < 1.0:
            raise ValueError(f"the fixed re-mask ratio must be in [0, 1), got {ratio}")
        fraction = ratio
    counts = torch.floor(lengths.double() * fraction).long()
    return torch.minimum(counts, (lengths - 1).clamp(min=0))


def transfer_counts(masked: Tensor, steps: Tensor, step: Tensor) -> Tensor:
    """Tokens to reveal at step ``step`` of a block (LLaDA's transfer schedule).

    The ``masked`` positions a block holds when decoding enters it are split
    equally over its ``steps`` steps, the remainder going to the first steps, so
    the block is empty exactly after its last step (Nie et al., 2025, §2.4).

    Args:
        masked: ``(N,)`` masked count of each row's block when the block began.
        steps: ``(N,)`` steps given to that block (``>= 1``).
        step: ``(N,)`` steps already spent in the block (``0 <= step < steps``).

    Returns:
        ``(N,)`` counts; over ``step = 0 .. steps-1`` they sum to ``masked``.
    """
    base = torch.div(masked, steps, rounding_mode="floor")
    return base + (step < masked - base * steps).long()
