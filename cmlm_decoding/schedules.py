"""How many tokens to re-mask (Mask-Predict) or reveal (masked diffusion) per step.

Mask-Predict, Ghazvininejad et al. (2019), Section 3.2: at iteration t (t = 1 .. T-1,
after the first pass) the number of masked tokens is n * (T - t) / T, a linear decay
from n towards 0. The count is floored, as in the original implementation
(``(seq_lens * (1 - t / T)).long()``); here it is computed in integers so that no
float rounding can move it. Other schedules (not in the paper; from the first design
source and MaskGIT): ``cosine`` n cos(pi t / 2T), ``exponential`` n (1 - 2^(t-T))
(the kept count doubles every pass), ``fixed`` a constant ratio r of n every pass.
All are floored and non-increasing in t, so a row whose count reaches 0 is done.

Length-adaptive pass budgets (not in the Mask-Predict paper, which gives every sentence
the same T; from the first design source, which recommends T between ceil(log2 n) and
ceil(log2 n) + 2 for n target tokens): ``adaptive_pass_budget`` gives each row
T_i = clamp(ceil(log2 n_i) + c, 1, T_max), and ``remask_count_per_row`` computes each
row's schedule from its own T_i, 0 once the row has made its T_i passes.
"""

import math
from typing import Optional

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


def ceil_log2(values: Tensor) -> Tensor:
    """``ceil(log2 v)`` per element, exactly, in integers (0 for ``v <= 1``).

    It counts the powers ``2^k`` (``k = 0 .. 62``) below ``v``: no float rounding.
    """
    powers = 2 ** torch.arange(63, device=values.device, dtype=torch.long)  # 63
    return (powers[None, :] < values.long().reshape(-1, 1)).sum(dim=1).view(values.shape)


def adaptive_pass_budget(lengths: Tensor, offset: int, max_passes: int) -> Tensor:
    """Per-row pass budget ``T_i = clamp(ceil(log2 n_i) + offset, 1, max_passes)``.

    Args:
        lengths: n, ``(N,)`` integer, the tokens each row generates (0 allowed: T_i is
            then ``clamp(offset, 1, max_passes)``; such a row re-masks nothing anyway).
        offset: c, added to ``ceil(log2 n)`` (the first design source: 0 to 2).
        max_passes: T_max ``>= 1``, the cap (``--iter-decode-max-iter``).

    Returns:
        ``(N,)`` long, each in ``[1, max_passes]``. E.g. n = 50: ``6 + c``; n = 100: ``7 + c``.
    """
    if max_passes < 1:
        raise ValueError(f"max_passes must be >= 1, got {max_passes}")
    return (ceil_log2(lengths) + offset).clamp(1, max_passes)


def remask_count_per_row(
    lengths: Tensor,
    num_passes: Tensor,
    step: int,
    schedule: str = "linear",
    ratio: float = 0.5,
    max_passes: Optional[int] = None,
) -> Tensor:
    """``remask_count`` with a pass budget T_i per row instead of one T.

    Args:
        lengths: n, ``(N,)`` integer.
        num_passes: T_i, ``(N,)`` integer (a budget ``<= step`` re-masks nothing).
        step: t ``>= 1``, passes already made (the same for every row).
        schedule, ratio: as in ``remask_count``.
        max_passes: an upper bound on every T_i (the Mask-Predict loop passes T); None
            reads it from ``num_passes`` (one host synchronisation, float schedules only).

    Returns:
        ``(N,)``: the count ``remask_count(n_i, T_i, t)`` where ``t < T_i``, 0 where the
        row has made its T_i passes. Where every T_i equals one T the result is
        ``remask_count(lengths, T, step)``, bit for bit (the fractions of the float
        schedules come from the same Python expressions, one per budget up to the bound).
    """
    if schedule not in REMASK_SCHEDULES:
        raise ValueError(f"remask schedule must be one of {REMASK_SCHEDULES}, got {schedule!r}")
    if step < 1:
        raise ValueError(f"step must be >= 1, got {step}")
    running = num_passes > step  # N, rows with passes left
    if schedule == "linear":
        budget = num_passes.clamp(min=1)  # N, no division by 0 (such rows are not running)
        counts = torch.div(lengths * (budget - step), budget, rounding_mode="floor")
        return counts.masked_fill(~running, 0)
    if schedule == "fixed" and not 0.0 <= ratio < 1.0:
        raise ValueError(f"the fixed re-mask ratio must be in [0, 1), got {ratio}")
    if max_passes is None:
        max_passes = int(num_passes.max()) if num_passes.numel() else 1
    largest = max(max_passes, step)
    fractions = [0.0] * (largest + 1)  # indexed by T; 0 where T <= step
    for passes in range(step + 1, largest + 1):  # a loop over budgets, not sentences
        if schedule == "cosine":
            fractions[passes] = math.cos(math.pi * step / (2 * passes))
        elif schedule == "exponential":
            fractions[passes] = 1.0 - 2.0 ** (step - passes)
        else:
            fractions[passes] = ratio
    table = torch.tensor(fractions, dtype=torch.float64, device=lengths.device)  # T_max + 1
    index = num_passes.long().clamp(0, largest)  # N, 0: no passes left
    counts = torch.floor(lengths.double() * table[index]).long()  # N
    counts = torch.minimum(counts, (lengths - 1).clamp(min=0))
    return counts.masked_fill(~running, 0)


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
