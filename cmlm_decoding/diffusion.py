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

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from .confidence import select_lowest
from .contract import DecodeResult, OptionError, Step, check_choice, literal
from .sampling import REMASKING, choose_tokens, confidence
from .schedules import transfer_counts


@dataclass(frozen=True)
class DiffusionOptions:
    """How ``diffusion_sample`` decodes; every field is checked here, once.

    Fields:
        steps: S ``>= 1``, the step budget (see the module docstring).
        block_length: positions per block, ``>= 0``; 0 is one block spanning each
            row's whole target (LLaDA's block length = generation length).
        temperature: Gumbel-max temperature, ``>= 0`` (0: argmax).
        remasking: ``low_confidence`` (LLaDA's default) or ``random``.
        threshold: None (schedule mode) or a confidence in ``(0, 1]`` (Fast-dLLM).
        retain_history: keep the tokens after every step.
        sparse_step: call ``step(tokens, rows, where)`` for ``M x V`` logits at the
            ``M`` masked positions of the current block only (the only ones a step
            can reveal). Same outputs; used at temperature 0 with ``low_confidence``
            remasking (random draws are shaped by the dense tensors).
    """

    steps: int = 10
    block_length: int = 0
    temperature: float = 0.0
    remasking: str = "low_confidence"
    threshold: Optional[float] = None
    retain_history: bool = False
    sparse_step: bool = False

    def __post_init__(self):
        if self.steps < 1:
            raise OptionError(
                "{steps} is the number of diffusion steps and must be >= 1, got "
                + literal(self.steps)
            )
        if self.block_length < 0:
            raise OptionError(
                "{block_length} (the block length) must be >= 0 (0: the whole target), got "
                + literal(self.block_length)
            )
        if self.temperature < 0:
            raise OptionError("{temperature} must be >= 0, got " + literal(self.temperature))
        check_choice("remasking", self.remasking, REMASKING)
        if self.threshold is not None and not 0.0 < self.threshold <= 1.0:
            raise OptionError(
                "{threshold} (the confidence threshold) must be in (0, 1], got "
                + literal(self.threshold)
            )


def diffusion_sample(
    step: Step,
    tokens: Tensor,
    mask_idx: int,
    pad_idx: int,
    options: DiffusionOptions = DiffusionOptions(),
    eos_idx: Optional[int] = None,
    generator: Optional[torch.Generator] = None,
) -> DecodeResult:
    """Reveal every ``<mask>`` of ``tokens`` (``N x L``, right-padded with pad).

    Args:
        step: the model (``contract.Step``), returning logits (guidance applied).
        tokens: ``N x L`` start tokens. Non-mask, non-pad tokens are given (a
            template for infilling) and are never changed.
        mask_idx, pad_idx: the dictionary's mask and pad symbols.
        options: a ``DiffusionOptions`` record.
        eos_idx: when given, a generated EOS ends its row: it and every position
            after it become padding once sampling is done (LLaDA's fixed-length
            outputs).
        generator: the random stream of Gumbel noise and ``random`` remasking.

    Returns:
        a ``DecodeResult`` whose ``steps`` are the model calls (NFE) of each row;
        the input is not modified.
    """
    temperature, remasking, threshold = options.temperature, options.remasking, options.threshold
    block_length = options.block_length or max(1, tokens.size(1))
    num_rows, width = tokens.shape
    device = tokens.device
    sparse = options.sparse_step and temperature == 0 and remasking == "low_confidence"
    positions = torch.arange(width, device=device)  # L
    block_of = torch.div(positions, block_length, rounding_mode="floor")  # L
    real = tokens.ne(pad_idx)  # N x L
    lengths = real.sum(dim=1)  # N
    num_blocks = torch.div(lengths + block_length - 1, block_length, rounding_mode="floor")
    num_blocks = num_blocks.clamp(min=1)  # N
    total_steps = num_blocks.clamp(
        min=options.steps
    )  # N: max(S, blocks), one step per block at least

    tokens = tokens.clone()
    token_logprobs = torch.zeros(tokens.shape, device=device)  # N x L
    generated = tokens.eq(mask_idx)  # N x L, positions the sampler fills
    nfe = torch.zeros(num_rows, dtype=torch.long, device=device)
    block = torch.full((num_rows,), -1, dtype=torch.long, device=device)
    step_in_block = torch.zeros_like(block)
    quota = torch.zeros_like(block)
    history = []

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
                logits = step(sub, called, sub_candidates)  # M x V
                picked = choose_tokens(logits, temperature, generator)  # M
                picked_conf, picked_lp = confidence(logits, picked, remasking, generator)  # M
                chosen = sub.masked_scatter(sub_candidates, picked)  # n x L
                conf = torch.full(sub.shape, -1.0, device=device)
                conf = conf.masked_scatter(sub_candidates, picked_conf)  # n x L
                logprob = torch.zeros(sub.shape, device=device)
                logprob = logprob.masked_scatter(sub_candidates, picked_lp)  # n x L
            else:
                logits = step(sub, called)  # n x L x V
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
        if options.retain_history:
            history.append(tokens.clone())

    if eos_idx is not None:
        ended = (tokens.eq(eos_idx) & generated).long().cumsum(dim=1) > 0  # N x L
        tokens = tokens.masked_fill(ended, pad_idx)
        token_logprobs = token_logprobs.masked_fill(ended, 0.0)
        generated = generated & ~ended
    counted = generated.sum(dim=1).clamp(min=1)  # N
    scores = (token_logprobs * generated).sum(dim=1) / counted
    return DecodeResult(tokens, token_logprobs, scores, nfe, history)
