"""Confidence-based position selection for Mask-Predict, global and per region.

Ghazvininejad et al. (2019), Section 3.2: the tokens to re-mask are those with the
lowest probability over the whole target (``select_lowest``). Regional re-masking
(``select_lowest_by_region``; not in the paper, from the first design source, which
finds that a global ranking fixes the beginning and the end of a sentence first and
keeps re-guessing the middle) splits each target into K contiguous regions, spreads
the row's re-mask count over them in proportion to their sizes (largest remainder)
and re-masks the least confident positions of each region. Selection is vectorised
over the batch: a few stable sorts per call, no loop over sentences or regions.

Confidence measures (``position_confidence``): the paper's probability of the chosen
token, minus the entropy, a calibrated probability, and (from the first design source)
the top-k probability mass; ``consistency`` and ``geometric_mean`` also keep state
across passes, which the Mask-Predict loop holds.
"""

from typing import Optional

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


def region_ids(lengths: Tensor, width: int, regions: int) -> Tensor:
    """``N x L`` region of every position: ``floor(p K / n)`` for ``p < n``, K after n.

    Position p (0-based) of a row of n target positions lies in region
    ``floor(p K / n)``, so region k holds positions ``ceil(k n / K) .. ceil((k+1) n / K) - 1``
    and the sizes differ by at most 1 (``floor(n / K)`` or ``ceil(n / K)``). When
    ``n <= K`` every position is a region of its own and ``K - n`` regions are empty.
    Padding (``p >= n``) gets the extra id K, a bucket no region counts.
    """
    positions = torch.arange(width, device=lengths.device)  # L
    n = lengths.long().clamp(min=1)[:, None]  # N x 1
    ids = torch.div(positions[None, :] * regions, n, rounding_mode="floor")  # N x L
    return ids.masked_fill(positions[None, :] >= lengths[:, None], regions)


def largest_remainder_floor(counts: Tensor, capacity: Tensor):
    """``(base, remainder, left)`` of the proportional split of ``spread_counts``.

    ``base`` (``N x K``) is ``floor(m c_k / C)``, ``remainder`` (``N x K``) its integer
    remainder ``m c_k mod C`` (one denominator per row, so comparisons are exact) and
    ``left`` (``(N,)``) the ``m - sum_k base_k`` units still to hand out, m clipped to C.
    """
    capacity = capacity.long()
    total = capacity.sum(dim=1)  # N
    clipped = torch.minimum(counts.long(), total)  # N
    wanted = clipped[:, None] * capacity  # N x K, m c_k
    denominator = total.clamp(min=1)[:, None]  # N x 1
    base = torch.div(wanted, denominator, rounding_mode="floor")  # N x K
    return base, wanted - base * denominator, clipped - base.sum(dim=1)


def spread_counts(counts: Tensor, capacity: Tensor, priority: Optional[Tensor] = None) -> Tensor:
    """Split each row's count over its regions in proportion to their capacities.

    Largest-remainder rounding, in integers: region k first gets
    ``floor(m c_k / C)`` (``C = sum_k c_k``, m clipped to C), and the ``m - sum_k floor``
    left go one each to the regions with the largest remainders ``m c_k mod C``; ties go to
    the lowest ``priority`` (``select_lowest_by_region`` passes the score of the position
    the extra unit would re-mask), then to the leftmost region.

    Args:
        counts: m, ``(N,)`` integer.
        capacity: c, ``N x K`` integer ``>= 0``, positions each region may give.
        priority: ``N x K`` float or None (ties by region only).

    Returns:
        ``N x K`` long: each row sums to ``min(m, C)`` and no region exceeds its capacity
        (the units left are fewer than the regions with a positive remainder, and such a
        region's base is below its capacity).
    """
    base, remainder, left = largest_remainder_floor(counts, capacity)  # N x K, N x K, N
    regions = capacity.size(1)
    order = torch.arange(regions, device=capacity.device).expand_as(base)  # N x K
    if priority is not None:
        order = priority.argsort(dim=1, stable=True)  # N x K, lowest priority first
    by_remainder = (-remainder.gather(1, order)).argsort(dim=1, stable=True)  # N x K
    order = order.gather(1, by_remainder)  # N x K, regions in the order they get a unit
    ranks = torch.arange(regions, device=capacity.device)[None, :]  # 1 x K
    extra = torch.zeros_like(base).scatter(1, order, (ranks < left[:, None]).long())  # N x K
    return base + extra


def select_lowest_by_region(
    scores: Tensor, counts: Tensor, valid: Tensor, lengths: Tensor, regions: int
) -> Tensor:
    """``select_lowest`` with each row's count spread over ``regions`` contiguous regions.

    Args:
        scores, counts, valid: as in ``select_lowest`` (``N x L``, ``(N,)``, ``N x L``).
        lengths: ``(N,)`` target lengths n; the regions split positions ``0 .. n-1``
            (``region_ids``), the given tokens of a template included.
        regions: K ``>= 1``.

    Returns:
        ``N x L`` bool mask. Region k's capacity c_k is its number of valid positions;
        it gets ``spread_counts`` of the row's count (clipped to the valid positions) and
        its lowest-scoring valid positions are marked (ties leftmost). Remainder ties
        between regions go to the region whose next position to mark scores lowest,
        so with ``n <= K`` (every position a region of its own) the marks are exactly
        ``select_lowest``'s; K = 1 is ``select_lowest`` too.
    """
    if regions < 1:
        raise ValueError(f"regions must be >= 1, got {regions}")
    num_rows, width = scores.shape
    ids = region_ids(lengths, width, regions).masked_fill(~valid, regions)  # N x L
    capacity = torch.zeros(num_rows, regions + 1, dtype=torch.long, device=scores.device)
    capacity = capacity.scatter_add(1, ids, torch.ones_like(ids))[:, :regions]  # N x K
    ranked = scores.masked_fill(~valid, float("inf"))  # N x L
    by_score = ranked.argsort(dim=1, stable=True)  # N x L, lowest first
    by_region = ids.gather(1, by_score).argsort(dim=1, stable=True)  # N x L
    order = by_score.gather(1, by_region)  # N x L, positions by (region, score, position)
    start = capacity.cumsum(dim=1) - capacity  # N x K, first sorted slot of each region
    base, _, _ = largest_remainder_floor(counts, capacity)  # N x K
    following = (start + base).clamp(max=max(width - 1, 0))  # N x K, slot of the next mark
    next_score = ranked.gather(1, order.gather(1, following))  # N x K
    next_score = next_score.masked_fill(base >= capacity, float("inf"))  # N x K
    per_region = spread_counts(counts, capacity, next_score)  # N x K
    sorted_ids = ids.gather(1, order)  # N x L, region of each sorted slot (K: invalid)
    bounds = torch.cat([start, capacity.sum(dim=1, keepdim=True)], dim=1)  # N x (K + 1)
    quota = torch.cat([per_region, per_region.new_zeros(num_rows, 1)], dim=1)  # N x (K + 1)
    slots = torch.arange(width, device=scores.device)[None, :]  # 1 x L
    take_sorted = slots - bounds.gather(1, sorted_ids) < quota.gather(1, sorted_ids)  # N x L
    return torch.zeros_like(valid).scatter(1, order, take_sorted)  # N x L


CONFIDENCES = (
    "max_prob",
    "neg_entropy",
    "calibrated",
    "consistency",
    "geometric_mean",
    "top_k_mass",
)
TOP_K_MASS = 3  # k of the top_k_mass confidence


def position_confidence(
    logprobs: Tensor, chosen: Tensor, kind: str = "max_prob", temperature: float = 1.0
) -> Tensor:
    """Confidence of each predicted position, ``N x L`` from ``N x L x V`` log-probs.

    ``max_prob``: probability of the chosen token (the paper); ``neg_entropy``: minus
    the entropy of the position's distribution (tried in the paper); ``calibrated``:
    probability under ``softmax(log p / temperature)``, a temperature fitted on
    validation data (``cmlm-calibrate``); ``top_k_mass``: the summed probability of the
    ``TOP_K_MASS`` (3) most probable tokens, high when the model hesitates between a
    few candidates only (the first design source; k = 1 would be ``max_prob``).
    ``consistency`` and ``geometric_mean`` return ``max_prob`` here; the Mask-Predict
    loop adds, for ``consistency``, the number of consecutive passes that re-predicted
    the same token and, for ``geometric_mean``, replaces it by the geometric mean of the
    token's probabilities over the passes that predicted it (``geometric_mean_update``).
    """
    if kind not in CONFIDENCES:
        raise ValueError(f"confidence must be one of {CONFIDENCES}, got {kind!r}")
    if kind == "neg_entropy":
        return (logprobs.exp() * logprobs.clamp_min(-1e4)).sum(dim=-1)  # N x L
    if kind == "top_k_mass":
        top = logprobs.topk(min(TOP_K_MASS, logprobs.size(-1)), dim=-1).values  # N x L x k
        return top.exp().sum(dim=-1).clamp(max=1.0)  # N x L
    if kind == "calibrated":
        if temperature <= 0:
            raise ValueError(f"the calibration temperature must be > 0, got {temperature}")
        logprobs = torch.log_softmax(logprobs / temperature, dim=-1)  # N x L x V
    return logprobs.gather(-1, chosen[..., None]).squeeze(-1).exp()  # N x L


def geometric_mean_update(
    run_logprob: Tensor, run_length: Tensor, new_logprob: Tensor, same: Tensor
):
    """One re-prediction of the ``geometric_mean`` confidence, elementwise.

    A position's run is the passes that predicted its current token: a re-prediction of
    the same token (``same``) extends it, another token starts a new run of one pass.
    Passes in which the position was kept (not re-masked) do not predict it and add
    nothing. Returns the new ``(run_logprob, run_length, confidence)``, where the
    confidence is ``exp(run_logprob / run_length)``, the geometric mean of the run's
    probabilities.
    """
    run_logprob = torch.where(same, run_logprob + new_logprob, new_logprob)
    run_length = torch.where(same, run_length + 1, torch.ones_like(run_length))
    return run_logprob, run_length, (run_logprob / run_length.clamp(min=1)).exp()
