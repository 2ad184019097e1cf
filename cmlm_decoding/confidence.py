"""Confidence-based position selection for Mask-Predict.

Ghazvininejad et al. (2019), Section 3.2: the tokens to re-mask are those with the
lowest probability. Selection is vectorised over the batch: one stable sort per
call, no loop over sentences.
"""

import torch
from torch import Tensor


def select_lowest(scores: Tensor, counts: Tensor, valid: Tensor) -> Tensor:
    """Mark the ``counts[i]`` lowest-scoring valid positions of each row.

    Args:
        scores: confidence per position, ``N x L`` (higher = more confident).
        counts: how many positions to mark per row, ``(N,)``; clipped to the
            number of valid positions of the row.
        valid: ``N x L`` bool, positions that may be chosen (padding is not).

    Returns:
        ``N x L`` bool mask. Ties are broken by position (leftmost first), so the
        result is deterministic. Invalid positions are never marked. The inputs
        are not modified.
    """
    num_rows, width = scores.shape
    ranked = scores.masked_fill(~valid, float("inf"))  # N x L
    order = ranked.argsort(dim=1, stable=True)  # N x L, lowest first
    counts = torch.minimum(counts, valid.sum(dim=1))  # N
    take_sorted = torch.arange(width, device=scores.device)[None, :] < counts[:, None]
    chosen = torch.zeros_like(valid)
    return chosen.scatter(1, order, take_sorted)  # N x L


CONFIDENCES = ("max_prob", "neg_entropy", "calibrated", "consistency")


def position_confidence(
    logprobs: Tensor, chosen: Tensor, kind: str = "max_prob", temperature: float = 1.0
) -> Tensor:
    """Confidence of each predicted position, ``N x L`` from ``N x L x V`` log-probs.

    ``max_prob``: probability of the chosen token (the paper); ``neg_entropy``: minus
    the entropy of the position's distribution (tried in the paper); ``calibrated``:
    probability under ``softmax(log p / temperature)``, a temperature fitted on
    validation data (``cmlm-calibrate``). ``consistency`` starts from ``max_prob``;
    the Mask-Predict loop adds the number of consecutive passes that re-predicted
    the same token.
    """
    if kind not in CONFIDENCES:
        raise ValueError(f"confidence must be one of {CONFIDENCES}, got {kind!r}")
    if kind == "neg_entropy":
        return (logprobs.exp() * logprobs.clamp_min(-1e4)).sum(dim=-1)  # N x L
    if kind == "calibrated":
        if temperature <= 0:
            raise ValueError(f"the calibration temperature must be > 0, got {temperature}")
        logprobs = torch.log_softmax(logprobs / temperature, dim=-1)  # N x L x V
    return logprobs.gather(-1, chosen[..., None]).squeeze(-1).exp()  # N x L
