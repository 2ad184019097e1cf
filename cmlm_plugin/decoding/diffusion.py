"""Block-wise masked-diffusion sampler (LLaDA: Nie et al., 2025, §2.4; Fast-dLLM).

Targets start fully masked (or from a template whose given tokens stay fixed) and
are revealed over the steps. Positions are grouped into blocks of ``block_length``
decoded left to right; the current block of a row is the block of its leftmost
masked position, and later blocks stay masked. At each step the model is called
once on every row that reveals something; each masked position of the current
block gets a token (argmax, or Gumbel-max at ``temperature``) and a confidence
(``sampling.confidence``); then either

* schedule mode: the ``k`` most confident positions are revealed, ``k`` from
  ``schedules.transfer_counts`` so that the block empties exactly on schedule; or
* threshold mode (Fast-dLLM): every position with confidence >= ``threshold`` is
  revealed, at least the most confident one.

Steps: LLaDA gives each of the ``G / b`` blocks ``S / (G / b)`` steps. Rows here can
have different lengths (from the length head), so a row with ``B`` blocks gives
block ``j`` ``S // B`` steps plus one for ``j < S % B`` -- LLaDA's split when ``B``
divides ``S`` -- and every block at least one step. A step that would reveal nothing
for a row costs that row no model call. With ``S`` equal to the length the sampler
calls the model once per token, as often as left-to-right decoding: speed comes
only from ``S`` below the length.
"""

from typing import Callable, List, NamedTuple, Optional

import torch
from torch import Tensor

from .confidence import select_lowest
from .sampling import choose_tokens, confidence
from .schedules import transfer_counts

# step(tokens, rows) -> logits: tokens is n x L (rows ``rows`` of the batch, or all
# rows when rows is None); returns n x L x V logits (guidance already applied).
LogitsFn = Callable[[Tensor, Optional[Tensor]], Tensor]


class DiffusionResult(NamedTuple):
    tokens: Tensor  # N x L, pad after each row's length
    token_logprobs: Tensor  # N x L, log-probability when revealed (0 for given/pad)
    scores: Tensor  # N, mean log-probability over the generated tokens
    nfe: Tensor  # N, model calls (function evaluations) spent on each row
    history: List[Tensor]  # tokens after every step, if asked for


def initial_tokens(lengths: Tensor, mask_idx: int, pad_idx: int) -> Tensor:
    """``N x L``: ``<mask>`` at the first ``lengths[i]`` positions, pad after."""
    width = int(lengths.max()) if lengths.numel() else 0
    real = torch.arange(width, device=lengths.device)[None, :] < lengths[:, None]
    pad = torch.full(real.shape, pad_idx, dtype=torch.long, device=lengths.device)
    return pad.masked_fill(real, mask_idx)


def diffusion_sample(
    logits_fn: LogitsFn,
    tokens: Tensor,
    steps: int,
    block_length: int,
    mask_idx: int,
    pad_idx: int,
    temperature: float = 0.0,
    remasking: str = "low_confidence",
    threshold: Optional[float] = None,
    eos_idx: Optional[int] = None,
    retain_history: bool = False,
    generator: Optional[torch.Generator] = None,
    sparse_step: bool = False,
) -> DiffusionResult:
    """Reveal every ``<mask>`` of ``tokens`` (``N x L``, right-padded with pad).

    Non-mask, non-pad tokens of the input are given (a template for infilling) and
    are never changed. With ``eos_idx``, a generated EOS ends its row: it and every
    position after it become padding once sampling is done (LLaDA's fixed-length
    outputs). Returns a ``DiffusionResult``; the input is not modified.

    ``sparse_step``: call ``logits_fn(tokens, rows, where)`` for ``M x V`` logits at the
    ``M`` masked positions of the current block only (the only ones a step can reveal),
    so the output projection skips the rest. Same outputs; used at temperature 0 with
    ``low_confidence`` remasking (random draws are shaped by the dense tensors).
    """
    if steps < 1:
        raise ValueError(f"the number of diffusion steps must be >= 1, got {steps}")
    if block_length < 1:
        raise ValueError(f"the block length must be >= 1, got {block_length}")
    if threshold is not None and not 0.0 < threshold <= 1.0:
        raise ValueError(f"the confidence threshold must be in (0, 1], got {threshold}")
    num_rows, width = tokens.shape
    device = tokens.device
    sparse = sparse_step and temperature == 0 and remasking == "low_confidence"
    positions = torch.arange(width, device=device)  # L
    block_of = torch.div(positions, block_length, rounding_mode="floor")  # L
    real = tokens.ne(pad_idx)  # N x L
    lengths = real.sum(dim=1)  # N
    num_blocks = torch.div(lengths + block_length - 1, block_length, rounding_mode="floor")
    num_blocks = num_blocks.clamp(min=1)  # N
    total_steps = num_blocks.clamp(min=steps)  # N: max(S, blocks), one step per block at least

    tokens = tokens.clone()
    token_logprobs = torch.zeros(tokens.shape, device=device)  # N x L
    generated = tokens.eq(mask_idx)  # N x L, positions the sampler fills
    nfe = torch.zeros(num_rows, dtype=torch.long, device=device)
    block = torch.full((num_rows,), -1, dtype=torch.long, device=device)
    step_in_block = torch.zeros_like(block)
    quota = torch.zeros_like(block)
    history: List[Tensor] = []

    while True:
        masked = tokens.eq(mask_idx)  # N x L
        remaining = masked.any(dim=1)  # N
        if not bool(remaining.any()):
            break
        first = torch.where(masked, positions, width).min(dim=1).values  # N
        current = torch.where(remaining, block_of[first.clamp(max=width - 1)], block)
        entered = current.ne(block)  # rows that just moved to a new block
        in_block = block_of[None, :].eq(current[:, None])  # N x L
        candidates = masked & in_block  # N x L
        block = current
        step_in_block = torch.where(entered, torch.zeros_like(step_in_block), step_in_block)
        quota = torch.where(entered, candidates.sum(dim=1), quota)

        if threshold is None:
            block_steps = (
                torch.div(total_steps, num_blocks, rounding_mode="floor")
                + (block < total_steps % num_blocks).long()
            )  # N
            reveal = transfer_counts(quota, block_steps, step_in_block)  # N
            reveal = torch.where(remaining, reveal, torch.zeros_like(reveal))
            calling = reveal > 0  # N
        else:
            calling = remaining

        rows = calling.nonzero().squeeze(1)  # n
        if rows.numel() > 0:
            sub = tokens[rows]  # n x L
            sub_candidates = candidates[rows]  # n x L
            called = None if rows.numel() == num_rows else rows
            if sparse:
                logits = logits_fn(sub, called, sub_candidates)  # M x V
                picked = choose_tokens(logits, temperature, generator)  # M
                picked_conf, picked_lp = confidence(logits, picked, remasking, generator)  # M
                chosen = sub.masked_scatter(sub_candidates, picked)  # n x L
                conf = torch.full(sub.shape, -1.0, device=device)
                conf = conf.masked_scatter(sub_candidates, picked_conf)  # n x L
                logprob = torch.zeros(sub.shape, device=device)
                logprob = logprob.masked_scatter(sub_candidates, picked_lp)  # n x L
            else:
                logits = logits_fn(sub, called)  # n x L x V
                chosen = choose_tokens(logits, temperature, generator)  # n x L
                conf, logprob = confidence(logits, chosen, remasking, generator)  # n x L
            conf = conf.masked_fill(~sub_candidates, -1.0)
            if threshold is None:
                count = reveal[rows]
            else:
                count = (conf >= threshold).sum(dim=1).clamp(min=1)  # n
            take = select_lowest(-conf, count, sub_candidates)  # n x L, most confident
            tokens[rows] = torch.where(take, chosen, sub)
            token_logprobs[rows] = torch.where(take, logprob, token_logprobs[rows])
            nfe[rows] += 1
        step_in_block = step_in_block + remaining.long()
        if retain_history:
            history.append(tokens.clone())

    if eos_idx is not None:
        ended = (tokens.eq(eos_idx) & generated).long().cumsum(dim=1) > 0  # N x L
        tokens = tokens.masked_fill(ended, pad_idx)
        token_logprobs = token_logprobs.masked_fill(ended, 0.0)
        generated = generated & ~ended
    counted = generated.sum(dim=1).clamp(min=1)  # N
    scores = (token_logprobs * generated).sum(dim=1) / counted
    return DiffusionResult(tokens, token_logprobs, scores, nfe, history)
