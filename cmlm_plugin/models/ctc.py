"""CTC over an upsampled canvas: a one-pass decoder without a length head.

Connectionist temporal classification (Graves et al., ICML 2006) for
non-autoregressive translation (Libovický & Helcl, EMNLP 2018; with glancing and
distillation in Gu & Kong, Findings of ACL 2021, "Fully Non-autoregressive Neural
Machine Translation: Tricks of the Trade"). The decoder reads a canvas of
``R x |x|`` positions (``--ctc-upsample R``, ``|x|`` the source length with its EOS)
and predicts one symbol or a blank at each; the loss is the negative log of the summed
probability of every alignment that collapses to the reference (``F.ctc_loss``), and
decoding takes the most probable symbol at every position, merges repeated symbols and
drops the blanks (``collapse``), in one pass.

The canvas (``--ctc-canvas``): by default each source token repeated R times, a uniform
copy of the source as the decoder input of Gu et al.'s NAT (ICLR 2018); Libovický &
Helcl split projected encoder states instead. The decoder embeds the source ids with the
shared embedding table, so the dictionary must be joined. Or ``<mask>`` at
every position, Mask-Predict's first-pass input (mask insertion, as in Syu et al.,
2023). On the tests' toy transduction the source canvas was learnt in 600 updates
(BLEU 98.3) and the mask canvas not at all (BLEU 0.0, 2026-12-03, docs/training.md);
trained with the CMLM loss as well (``--ctc-cmlm-weight``, Mask-CTC) the mask canvas is
learnt and is that model's default.
The blank is the ``<mask>`` symbol's output class, which no reference token uses, so
the dictionary and the embeddings stay those of a CMLM.

Glancing with CTC (Gu & Kong, 2021) needs the reference placed on the canvas:
``best_alignment`` is the Viterbi path, the most probable alignment that collapses to
the reference (Graves et al., 2006, §4 computes the sum over alignments with the same
recursion; the max instead of the sum gives the best one).
"""

from typing import Tuple

import torch
import torch.nn.functional as F
from torch import Tensor


def canvas_lengths(source_lengths: Tensor, ratio: int) -> Tensor:
    """``(B,)`` decoder positions of each sentence: ``ratio`` times its source length."""
    return source_lengths * ratio


CANVASES = ("mask", "source")


def source_canvas(src_tokens: Tensor, pad: int, ratio: int) -> Tensor:
    """``B x (ratio*S)``: each real source token repeated ``ratio`` times, left-aligned, then pad.

    ``src_tokens`` is ``B x S``, left- or right-padded; the source's EOS is copied too.
    """
    real = src_tokens.ne(pad)  # B x S
    compact = src_tokens.gather(1, torch.sort((~real).long(), dim=1, stable=True).indices)
    canvas = compact.repeat_interleave(ratio, dim=1)  # B x R*S, pads at the end
    return canvas


def ctc_nll(
    lprobs: Tensor, canvas: Tensor, target: Tensor, target_lengths: Tensor, blank: int
) -> Tensor:
    """Summed CTC negative log-likelihood of a batch.

    Args:
        lprobs: ``B x L x V`` log-probabilities over the canvas positions.
        canvas: ``(B,)`` canvas length of each row (positions after it are padding).
        target: ``B x T`` reference tokens, right-padded (the values after
            ``target_lengths`` are ignored).
        target_lengths: ``(B,)`` reference lengths.
        blank: the blank class.

    A reference longer than its canvas (more symbols and repeats than positions)
    has no alignment: its loss is 0 (``zero_infinity``) instead of infinite.
    """
    return F.ctc_loss(
        lprobs.transpose(0, 1).float(),  # L x B x V
        target,
        canvas,
        target_lengths,
        blank=blank,
        reduction="sum",
        zero_infinity=True,
    )


def collapse(tokens: Tensor, lengths: Tensor, blank: int, pad: int) -> Tuple[Tensor, Tensor]:
    """CTC's best-path output: merge repeats, then drop blanks.

    Args:
        tokens: ``N x L`` the most probable symbol of each canvas position.
        lengths: ``(N,)`` canvas lengths (positions after them are ignored).

    Returns:
        ``(kept, order)``: ``kept`` (``N x L`` bool) marks the positions whose symbol
        is output, ``order`` (``N x L`` long) the positions sorted kept-first, stably,
        so that ``tokens.gather(1, order)`` holds each output left-aligned.
    """
    width = tokens.size(1)
    real = torch.arange(width, device=tokens.device)[None, :] < lengths[:, None]  # N x L
    previous = F.pad(tokens[:, :-1], (1, 0), value=pad)  # N x L, the symbol to the left
    kept = real & tokens.ne(blank) & tokens.ne(previous)  # N x L
    order = torch.sort((~kept).long(), dim=1, stable=True).indices  # N x L, kept first
    return kept, order


def best_alignment(
    lprobs: Tensor, lengths: Tensor, target: Tensor, target_lengths: Tensor, blank: int
) -> Tuple[Tensor, Tensor]:
    """The most probable alignment of each reference to its canvas (Viterbi).

    Args:
        lprobs: ``B x L x V`` log-probabilities over the canvas positions.
        lengths: ``(B,)`` canvas lengths; target, target_lengths, blank: as in ``ctc_nll``.

    Returns:
        ``(labels, possible)``: ``labels`` (``B x L``) the symbol or blank that the best
        alignment puts at each position (blank after the canvas ends, and on the whole
        row where no alignment exists); ``possible`` (``(B,)`` bool) rows that have one.
    """
    batch, width, _ = lprobs.shape
    states = 2 * target.size(1) + 1  # blank, y1, blank, y2, ..., blank
    labels = target.new_full((batch, states), blank)  # B x S
    labels[:, 1::2] = target
    used = torch.arange(states, device=target.device)[None, :] < 2 * target_lengths[:, None] + 1
    emit = lprobs.float().gather(2, labels[:, None, :].expand(batch, width, states))  # B x L x S
    emit = emit.masked_fill(~used[:, None, :], float("-inf"))
    skip = torch.zeros_like(used)  # B x S, a symbol may follow the symbol two states back
    skip[:, 2:] = labels[:, 2:].ne(blank) & labels[:, 2:].ne(labels[:, :-2])
    score = emit[:, 0].clone()  # B x S, the best path ending in each state
    score[:, 2:] = float("-inf")  # a path starts with the first blank or the first symbol
    moves = torch.zeros(batch, width, states, dtype=torch.long, device=target.device)
    for t in range(1, width):  # over canvas positions; the batch and states are vectorised
        step = F.pad(score[:, :-1], (1, 0), value=float("-inf"))  # B x S, from state s-1
        jump = F.pad(score[:, :-2], (2, 0), value=float("-inf")).masked_fill(~skip, float("-inf"))
        best, move = torch.stack([score, step, jump], dim=-1).max(dim=-1)  # B x S each
        active = (t < lengths)[:, None]  # B x 1, rows whose canvas goes on
        score = torch.where(active, best + emit[:, t], score)
        moves[:, t] = move.masked_fill(~active, 0)
    last = 2 * target_lengths  # B, the final blank; the final symbol is last - 1
    final = score.gather(1, last[:, None]).squeeze(1)  # B
    before = score.gather(1, (last - 1).clamp(min=0)[:, None]).squeeze(1)  # B
    state = torch.where((before > final) & (last > 0), last - 1, last)  # B
    possible = torch.maximum(final, before) > float("-inf")  # B
    path = torch.empty(batch, width, dtype=torch.long, device=target.device)  # B x L
    for t in range(width - 1, -1, -1):  # backtrack
        path[:, t] = labels.gather(1, state[:, None]).squeeze(1)
        state = state - moves[:, t].gather(1, state[:, None]).squeeze(1)
    real = torch.arange(width, device=target.device)[None, :] < lengths[:, None]  # B x L
    return path.masked_fill(~real | ~possible[:, None], blank), possible
