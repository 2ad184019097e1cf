"""Mask-Predict's re-masking rule: how many tokens each pass re-masks, and which.

Ghazvininejad et al. (EMNLP 2019), Mask-Predict, §3.2: after pass t (t = 1 .. T-1) of
T, the n least confident tokens of a target of N tokens are masked and predicted again,
with the linear decay

    n = N · (T − t) / T

floored (``schedules.linear_remask_count``). The code names a batch's size N, so the
count of row i is written ``floor(n_i (T - t) / T)``, n_i the tokens that row
generates. The Mask-Predict loop (``mask_predict.mask_predict``) asks a ``RemaskRule``
how many tokens of each row to re-mask and which, and hands it every pass's
predictions; a ``Ranking`` is what positions are ranked by, from pass to pass.

Each part is an option of ``MaskPredictOptions`` (the defaults are the paper's):

* how many: the schedule (``schedules.remask_count``: linear, cosine, exponential,
  fixed) and length-adaptive passes (``adaptive_passes`` c: row i gets its own budget
  T_i = clamp(ceil(log2 n_i) + c, 1, T) and its schedule is computed from T_i,
  ``schedules.remask_count_per_row``; 0 once the row has made its T_i passes);
* which ones: the least confident candidates of the whole target (the paper,
  ``confidence.select_lowest``) or of each of K contiguous regions (``remask_regions``
  K, the count spread over the regions in proportion to their sizes,
  ``confidence.select_lowest_by_region``); candidates are the generated positions (never
  a given token of a template), with ``monotone`` only those re-masked the pass before;
* ranked by: the confidence measure (``confidence.position_confidence``), plus, for
  ``consistency``, the streak of passes that re-predicted a token unchanged, or, for
  ``geometric_mean``, the geometric mean of a token's probabilities over the passes that
  predicted it (``confidence.geometric_mean_update``): state the ``Ranking`` carries.

All of it is batched over rows: no loop over sentences.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Tuple

import torch
from torch import Tensor

from .confidence import (
    geometric_mean_update,
    position_confidence,
    select_lowest,
    select_lowest_by_region,
)
from .schedules import adaptive_pass_budget, remask_count, remask_count_per_row

if TYPE_CHECKING:  # mask_predict imports this module
    from .mask_predict import MaskPredictOptions


@dataclass(frozen=True, eq=False)
class Ranking:
    """What ranks the positions of each row for re-masking, carried from pass to pass."""

    conf: Tensor  # N x L, confidence of each position's current token
    streak: Tensor  # N x L, unchanged re-predictions in a row (consistency), else 0
    candidates: Tensor  # N x L bool, positions that may be re-masked next
    run_lp: Optional[Tensor] = None  # N x L, geometric_mean: summed log-prob of the run
    run_len: Optional[Tensor] = None  # N x L, geometric_mean: passes in the run

    def parts(self) -> Tuple[Optional[Tensor], ...]:
        """The fields in order (None for an unused one), for ``take`` and ``put``."""
        return (self.conf, self.streak, self.candidates, self.run_lp, self.run_len)

    def scores(self) -> Tensor:
        """N x L, the lowest re-masked first."""
        return self.conf + self.streak

    def take(self, rows: Optional[Tensor]) -> "Ranking":
        """The ranking of ``rows`` only (n x L each); all of it for None."""
        if rows is None:
            return self
        return Ranking(*(None if x is None else x[rows] for x in self.parts()))

    def put(self, rows: Optional[Tensor], part: "Ranking") -> "Ranking":
        """This ranking with its ``rows`` replaced by ``part``; ``part`` itself for None."""
        if rows is None:
            return part
        pairs = zip(self.parts(), part.parts())
        return Ranking(*(None if x is None else x.index_copy(0, rows, y) for x, y in pairs))


@dataclass(frozen=True, eq=False)
class RemaskRule:
    """One batch's re-masking rule: how many positions of each row, and which, every pass."""

    options: "MaskPredictOptions"
    lengths: Tensor  # N, target lengths (what ``remask_regions`` splits)
    num_free: Tensor  # N, positions to generate: the n_i of the schedule
    budget: Optional[Tensor]  # N, passes per row T_i (adaptive_passes); None: T for all

    @classmethod
    def for_batch(
        cls, options: "MaskPredictOptions", lengths: Tensor, num_free: Tensor
    ) -> "RemaskRule":
        """The rule of a batch of ``lengths`` rows generating ``num_free`` tokens each."""
        budget = None
        if options.adaptive_passes is not None:
            budget = adaptive_pass_budget(num_free, options.adaptive_passes, options.num_passes)
        return cls(options, lengths, num_free, budget)

    def confidence(self, logprobs: Tensor, chosen: Tensor) -> Tensor:
        """``M``: the confidence of M predicted positions from their ``M x V`` log-probs."""
        kind, temperature = self.options.confidence, self.options.calibration_temperature
        return position_confidence(logprobs, chosen, kind, temperature)

    def first_ranking(self, conf: Tensor, token_logprobs: Tensor, free: Tensor) -> Ranking:
        """The ranking after pass 1 (``N x L`` each): every generated position a candidate."""
        geometric = self.options.confidence == "geometric_mean"
        return Ranking(
            conf,
            torch.zeros_like(token_logprobs),
            free,
            token_logprobs if geometric else None,
            free.long() if geometric else None,
        )

    def count(self, done: int) -> Tensor:
        """``(N,)``: tokens of each row to re-mask after pass ``done`` (0: nothing to do)."""
        options = self.options
        schedule, ratio, num_passes = options.schedule, options.ratio, options.num_passes
        if self.budget is None:
            return remask_count(self.num_free, num_passes, done, schedule, ratio)
        # each row's schedule from its own T_i; 0 once it has made T_i passes
        return remask_count_per_row(self.num_free, self.budget, done, schedule, ratio, num_passes)

    def choose(self, ranking: Ranking, counts: Tensor, rows: Optional[Tensor]) -> Tensor:
        """``n x L`` bool: the positions to re-mask in ``rows`` (None: all rows).

        ``ranking`` and ``counts`` (``(n,)``) are those of the same rows.
        """
        regions = self.options.remask_regions
        if regions == 1:  # the paper's global ranking
            return select_lowest(ranking.scores(), counts, ranking.candidates)
        lengths = self.lengths if rows is None else self.lengths[rows]  # n
        return select_lowest_by_region(
            ranking.scores(), counts, ranking.candidates, lengths, regions
        )  # n x L

    def after_pass(
        self,
        ranking: Ranking,
        remask: Tensor,
        updated: Tensor,
        same: Tensor,
        new_lp: Tensor,
        new_conf: Tensor,
    ) -> Ranking:
        """The ranking once the ``updated`` positions were predicted again.

        ``remask``: the positions the pass re-masked; ``updated``: those it re-predicted
        (``remask`` itself unless ``update_observed``: every generated position);
        ``same``: re-predicted unchanged; ``new_lp``, ``new_conf``: the new log-probability
        and confidence, used where ``updated``. All ``n x L``, as ``ranking``'s.
        """
        streak, run_lp, run_len = ranking.streak, ranking.run_lp, ranking.run_len
        if self.options.confidence == "consistency":
            streak = torch.where(updated, (streak + 1) * same, streak)
        if self.options.confidence == "geometric_mean":  # a token's run grows or restarts
            grown_lp, grown_len, new_conf = geometric_mean_update(run_lp, run_len, new_lp, same)
            run_lp = torch.where(updated, grown_lp, run_lp)
            run_len = torch.where(updated, grown_len, run_len)
        conf = torch.where(updated, new_conf, ranking.conf)
        candidates = remask if self.options.monotone else ranking.candidates
        return Ranking(conf, streak, candidates, run_lp, run_len)
