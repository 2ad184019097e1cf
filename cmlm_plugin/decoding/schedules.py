"""How many tokens Mask-Predict re-masks before each pass.

Ghazvininejad et al. (2019), Section 3.2: at iteration t (t = 1 .. T-1, after the
first pass) the number of masked tokens is n * (T - t) / T, a linear decay from n
towards 0. The count is floored, as in the original implementation
(``(seq_lens * (1 - t / T)).long()``); here it is computed in integers so that
no float rounding can move it.
"""

import torch
from torch import Tensor


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
