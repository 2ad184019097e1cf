"""One decoder pass of all length candidates as the decoding core's ``Step``.

``DecoderStep`` wraps an inference path (``models.inference``) for the loops of
``cmlm_decoding``: it evaluates the candidates the loop asks for, applies
classifier-free guidance (LLaDA, Nie et al. 2025: ``uncond + (w + 1)(cond - uncond)``,
the unconditional rows being the same candidates with an empty source), normalises to
log-probabilities over the whole vocabulary when asked (Mask-Predict's confidences,
as the original code and fairseq compute them, before banning symbols), sets the
banned symbols (pad, BOS, EOS, mask) to -inf, and records, without a host sync, which
candidates ever received NaN/inf logits; ``refuse_nonfinite`` checks that record once
per batch, after decoding.
"""

from typing import Optional

import torch
from torch import Tensor

from cmlm_decoding import guided_logits

from ..errors import CMLMPluginError


class DecoderStep:
    """``step(tokens, rows, where=None)`` over ``num_candidates`` candidates.

    Args:
        path: the inference path (``encode``/``start``/``logits``).
        state: ``path.start(...)`` of the batch; with guidance its rows are the ``N``
            conditional candidates followed by the same ``N`` unconditional ones.
        num_candidates: N.
        banned: symbols a position may never be decoded as (a 1-D long tensor).
        guidance: the classifier-free guidance scale (0: none).
        normalize: return log-probabilities (Mask-Predict) instead of logits.
    """

    def __init__(
        self, path, state, num_candidates: int, banned: Tensor, guidance=0.0, normalize=False
    ):
        self.path, self.state = path, state
        self.num_candidates = num_candidates
        self.banned = banned
        self.guidance = guidance
        self.normalize = normalize
        self.nonfinite = torch.zeros(num_candidates, dtype=torch.bool, device=banned.device)

    def __call__(self, tokens: Tensor, rows: Optional[Tensor], where=None) -> Tensor:
        """n x L tokens of candidates ``rows`` (all when None) -> n x L x V scores, or
        M x V at the M positions where the n x L bool ``where`` is True."""
        seen = slice(None) if rows is None else rows
        guided = self.guidance != 0.0
        if guided:  # the state holds the N conditional rows, then the N others
            rows = None if rows is None else torch.cat([rows, rows + self.num_candidates])  # 2n
            tokens = torch.cat([tokens, tokens])  # 2n x L
            where = None if where is None else torch.cat([where, where])  # 2n x L
        logits = self.path.logits(self.state, tokens, rows, where).float()  # n x L x V, or M x V
        finite = torch.isfinite(logits.sum(dim=-1))  # n x L, or M: any NaN/inf -> NaN/inf
        if where is not None:
            finite = torch.ones_like(where).masked_scatter(where, finite)  # n x L
        bad = ~finite.all(dim=1)  # n (2n guided), no sync
        self.nonfinite[seen] |= bad.view(2, -1).any(dim=0) if guided else bad
        if guided:
            cond, uncond = logits.chunk(2)
            logits = guided_logits(cond, uncond, self.guidance)  # n x L x V
        if self.normalize:  # probabilities over the whole vocabulary
            logits = torch.log_softmax(logits, dim=-1)  # n x L x V
        return logits.index_fill_(-1, self.banned, float("-inf"))


def refuse_nonfinite(bad: Tensor, sample) -> None:
    """Refuse outputs of a decoder pass that produced NaN/inf logits (``bad``: B)."""
    if bad.any():  # one check per batch, after decoding
        ids = sample["id"][bad] if "id" in sample else bad.nonzero().view(-1)
        raise CMLMPluginError(
            f"the decoder produced NaN/inf logits for {int(bad.sum())} sentence(s) "
            f"(ids {ids.tolist()[:10]}); in fp16 this is an overflow: decode in fp32 "
            "(drop --fp16) and check the checkpoint"
        )
