"""Temperature scaling of token probabilities (Guo et al., 2017), pure torch.

Mask-Predict re-masks the least confident tokens; over-confident probabilities fix
wrong tokens too early (the first design source, "confidence calibration"). A
single temperature K, fitted on validation data by minimising the NLL of the
reference tokens under ``softmax(logits / K)``, calibrates them; the NLL is convex
in 1/K, so a golden-section search on 1/K finds the optimum. ``cmlm-calibrate``
runs this on a checkpoint; decode with ``--remask-confidence calibrated
--calibration-temperature K``.
"""

import math

import torch
from torch import Tensor


def tempered_nll(logits: Tensor, target: Tensor, temperature: float) -> float:
    """Mean NLL (nats) of ``target`` (``(M,)``) under ``softmax(logits / temperature)``."""
    logprobs = torch.log_softmax(logits.double() / temperature, dim=-1)  # M x V
    return float(-logprobs.gather(1, target[:, None]).mean())


def fit_temperature(
    logits: Tensor, target: Tensor, low: float = 0.05, high: float = 20.0, iterations: int = 80
) -> float:
    """The temperature in ``[low, high]`` that minimises the NLL of ``target``.

    Args:
        logits: ``M x V`` model logits at M positions.
        target: ``(M,)`` reference tokens.
    """
    if logits.size(0) == 0:
        raise ValueError("no positions to calibrate on: the validation data is empty")
    if not 0 < low < high:
        raise ValueError(f"need 0 < low < high, got {low} and {high}")
    golden = (math.sqrt(5) - 1) / 2
    a, b = 1.0 / high, 1.0 / low  # search the inverse temperature: NLL is convex in it
    c, d = b - golden * (b - a), a + golden * (b - a)
    fc, fd = tempered_nll(logits, target, 1 / c), tempered_nll(logits, target, 1 / d)
    for _ in range(iterations):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - golden * (b - a)
            fc = tempered_nll(logits, target, 1 / c)
        else:
            a, c, fc = c, d, fd
            d = a + golden * (b - a)
            fd = tempered_nll(logits, target, 1 / d)
    return 2.0 / (a + b)
