"""The Mask-Predict decoding loop (Ghazvininejad et al., EMNLP 2019, Algorithm of §3).

Pass 1 predicts every position from an all-``<mask>`` input. Before pass t+1
(t = 1 .. T-1) the ``floor(n (T - t) / T)`` lowest-probability tokens are re-masked
and predicted again; the probability of a position changes only when it is
re-predicted. ``num_passes`` is T, the number of decoder passes (T = 1 is
single-pass non-autoregressive decoding) -- fairseq's own generator counts
``--iter-decode-max-iter k`` as k + 1 passes; this module does not.

Early exit: once a row's re-mask count is 0 it can no longer change, so it leaves
the batch (its output is exactly what all T passes give). ``force_max_iter`` keeps
every row for all T passes.
"""

from typing import Callable, List, NamedTuple, Optional

import torch
from torch import Tensor

from .confidence import select_lowest
from .schedules import linear_remask_count

# step(tokens, rows) -> log-probs: tokens is n x L (the rows ``rows`` of the
# batch, or all N rows when rows is None); returns n x L x V log-probabilities.
StepFn = Callable[[Tensor, Optional[Tensor]], Tensor]


class MaskPredictResult(NamedTuple):
    tokens: Tensor  # N x L, padded with pad after each row's length
    token_logprobs: Tensor  # N x L, 0 at padding
    scores: Tensor  # N, mean log-probability over the real tokens
    steps: Tensor  # N, decoder passes spent on each row
    history: List[Tensor]  # tokens (N x L) after each pass, if asked for


def mask_predict(
    step: StepFn,
    lengths: Tensor,
    num_passes: int,
    mask_idx: int,
    pad_idx: int,
    force_max_iter: bool = False,
    retain_history: bool = False,
) -> MaskPredictResult:
    """Decode ``N`` target sequences of the given lengths with Mask-Predict.

    Args:
        step: the model, as ``step(tokens, rows) -> log-probs`` (see ``StepFn``).
            It must never give the mask or pad symbol the highest probability
            (the glue sets their logits to -inf).
        lengths: ``(N,)`` target lengths, each ``>= 1``.
        num_passes: T ``>= 1``.
        mask_idx, pad_idx: the dictionary's mask and pad symbols.
        force_max_iter: run all T passes for every row (no early exit).
        retain_history: keep the tokens after every pass.
    """
    if num_passes < 1:
        raise ValueError(f"num_passes (T) must be >= 1, got {num_passes}")
    if lengths.numel() > 0 and int(lengths.min()) < 1:
        raise ValueError("every target length must be >= 1")
    width = int(lengths.max()) if lengths.numel() > 0 else 0
    positions = torch.arange(width, device=lengths.device)
    real = positions[None, :] < lengths[:, None]  # N x L
    pad = torch.full(real.shape, pad_idx, dtype=torch.long, device=lengths.device)
    tokens = pad.masked_fill(real, mask_idx)  # N x L, all <mask>

    token_logprobs, predicted = step(tokens, None).max(dim=-1)  # N x L each
    tokens = torch.where(real, predicted, pad)  # N x L
    token_logprobs = token_logprobs.float().masked_fill(~real, 0.0)  # N x L
    steps = torch.ones_like(lengths)
    history = [tokens.clone()] if retain_history else []

    for done in range(1, num_passes):
        counts = linear_remask_count(lengths, num_passes, done)  # N
        rows: Optional[Tensor] = None
        if not force_max_iter:
            active = counts > 0  # N
            if not bool(active.any()):
                break
            if not bool(active.all()):
                rows = active.nonzero().squeeze(1)  # n
        sub_tokens = tokens if rows is None else tokens[rows]  # n x L
        sub_lp = token_logprobs if rows is None else token_logprobs[rows]  # n x L
        sub_real = real if rows is None else real[rows]  # n x L
        sub_counts = counts if rows is None else counts[rows]  # n

        remask = select_lowest(sub_lp, sub_counts, sub_real)  # n x L
        masked_input = sub_tokens.masked_fill(remask, mask_idx)  # n x L
        new_lp, new_tokens = step(masked_input, rows).max(dim=-1)  # n x L each
        sub_tokens = torch.where(remask, new_tokens, sub_tokens)
        sub_lp = torch.where(remask, new_lp.float(), sub_lp)

        if rows is None:
            tokens, token_logprobs = sub_tokens, sub_lp
            steps = steps + 1
        else:
            tokens = tokens.index_copy(0, rows, sub_tokens)
            token_logprobs = token_logprobs.index_copy(0, rows, sub_lp)
            steps = steps.index_add(0, rows, torch.ones_like(rows))
        if retain_history:
            history.append(tokens.clone())

    scores = token_logprobs.sum(dim=1) / lengths.clamp(min=1).to(token_logprobs)
    return MaskPredictResult(tokens, token_logprobs, scores, steps, history)
