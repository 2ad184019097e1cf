"""The Mask-Predict decoding loop (Ghazvininejad et al., EMNLP 2019, §3).

Pass 1 predicts every position from an all-``<mask>`` input. Before pass t+1
(t = 1 .. T-1) the ``floor(n (T - t) / T)`` least confident tokens of a row of n
generated tokens are re-masked (the paper's linear decay, written n = N·(T−t)/T there
with N the target length; ``remask``) and predicted again; the probability of a
position changes only when it is re-predicted. ``num_passes`` is T, the number of
decoder passes (T = 1 is single-pass non-autoregressive decoding) -- fairseq's own
generator counts ``--iter-decode-max-iter k`` as k + 1 passes; this module does not.

Variants (off by default; the defaults are the paper's), all in how many tokens a pass
re-masks and which (``remask.RemaskRule``): the re-mask schedule, the confidence that
ranks positions (``consistency``, ``geometric_mean`` and the others of
``confidence.position_confidence``), ``monotone`` decoding (a token that survived a
re-masking round is never re-masked again; the paper lets every token be re-masked),
length-adaptive passes (``adaptive_passes`` c: row i gets its own T_i passes; a row
that has made them re-masks 0 tokens and leaves through the early exit below) and
regional re-masking (``remask_regions`` K). All run in the same batched loop over
passes, with no loop over sentences.

Infilling: with a ``template`` (``N x L``, ``<mask>`` where tokens are to be
generated, given tokens elsewhere) only the masked positions are predicted and
re-masked, n counts them, and the given tokens never change.

A draft (``first_pass``): another decoder's scores (``N x L x V`` log-probabilities, e.g.
a CTC pass's at the positions of its output, ``cmlm_plugin.generation.ctc_generator``)
stand for pass 1, which then costs no step call; passes 2 .. T re-mask and re-predict it
as they would the model's own first pass (Mask-CTC, Higuchi et al., Interspeech 2020,
refines a CTC output this way, with its own threshold rule instead of the linear decay).

Updating the observed tokens (``update_observed``; the decoding of CMLMC, Huang et
al., ICLR 2022): every pass after the first also re-predicts the tokens it leaves
unmasked, from the input that shows them, and replaces them and their probabilities
(the paper keeps a kept token and its probability until it is re-masked). A model
trained to correct its own tokens (``--self-correction``) is asked to here. Given
tokens of a template still never change.

Early exit: once a row's re-mask count is 0 it can no longer change, so it leaves
the batch (its output is exactly what all T passes give). With ``update_observed`` a
pass that re-masks nothing still re-predicts every token, so a row stays for its T
passes (unless ``stop_unchanged`` stops it). ``force_max_iter`` keeps
every row for all T passes (with ``adaptive_passes``: for all its T_i passes).

Host synchronisation: one per pass after the first (the number of rows still active,
which sizes the next pass), none with ``force_max_iter``, no pruning and no
``adaptive_passes``; a
``sparse_step`` caller adds one more (the number of re-predicted positions).

Options come as one ``MaskPredictOptions`` record, validated when it is built.
"""

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from .confidence import CONFIDENCES
from .contract import DecodeResult, OptionError, Step, check_choice, initial_tokens, literal
from .remask import RemaskRule
from .schedules import REMASK_SCHEDULES


@dataclass(frozen=True)
class MaskPredictOptions:
    """How ``mask_predict`` decodes; every field is checked here, once.

    Fields:
        num_passes: T ``>= 1``, decoder passes.
        force_max_iter: run all T passes for every row (no early exit).
        retain_history: keep the tokens after every pass.
        schedule, ratio: the re-mask schedule (``linear`` is the paper's) and the
            fraction ``fixed`` re-masks, in ``[0, 1)``.
        confidence, calibration_temperature: how positions are ranked
            (``max_prob`` is the paper's), and the temperature of ``calibrated``.
        monotone: never re-mask a token that survived a re-masking round.
        sparse_step: call ``step(tokens, rows, where)`` for the re-predicted
            positions only (same results, less output-projection work).
        beam, prune_after, prune_keep: rows come in groups of ``beam`` length
            candidates of one sentence; after ``prune_after`` passes (0: never) only
            each group's ``prune_keep`` best by mean log-probability go on, the
            others stop and score -inf (not in the paper; a speed lever).
        stop_unchanged: a row whose pass re-predicted every re-masked token unchanged
            stops there (fairseq's adaptive stop; not in the paper, which always runs
            T passes: later passes re-mask fewer tokens and could still change some).
            Ignored with ``force_max_iter``. No output holds ``<mask>`` either way.
        adaptive_passes: None (off: every row gets T passes) or an offset c ``>= 0``:
            row i gets T_i = clamp(ceil(log2 n_i) + c, 1, T) passes, n_i the tokens it
            generates (its length; with a template, its ``<mask>`` count), and its
            re-mask schedule is computed from T_i (not in the paper; the first design
            source recommends c in 0..2).
        remask_regions: K ``>= 1``; 1 is the paper's global ranking, K > 1 spreads
            each row's re-mask count over K contiguous regions of its target (not in
            the paper; the first design source).
        update_observed: every pass after the first also replaces the unmasked
            generated tokens and their probabilities by the pass's predictions
            (CMLMC's decoding; the paper keeps them until they are re-masked).
    """

    num_passes: int = 10
    force_max_iter: bool = False
    retain_history: bool = False
    schedule: str = "linear"
    ratio: float = 0.5
    confidence: str = "max_prob"
    calibration_temperature: float = 1.0
    monotone: bool = False
    sparse_step: bool = False
    beam: int = 1
    prune_after: int = 0
    prune_keep: int = 1
    stop_unchanged: bool = False
    adaptive_passes: Optional[int] = None
    remask_regions: int = 1
    update_observed: bool = False

    def __post_init__(self):
        if self.num_passes < 1:
            raise OptionError(
                "{num_passes} is the number of decoder passes and must be >= 1, got "
                + literal(self.num_passes)
            )
        if self.beam < 1:
            raise OptionError(
                "{beam} is the number of length candidates and must be >= 1, got "
                + literal(self.beam)
            )
        check_choice("schedule", self.schedule, REMASK_SCHEDULES)
        if not 0.0 <= self.ratio < 1.0:
            raise OptionError(
                "{ratio} (the fraction the fixed schedule re-masks) must be in [0, 1), got "
                + literal(self.ratio)
            )
        check_choice("confidence", self.confidence, CONFIDENCES)
        if not self.calibration_temperature > 0:
            raise OptionError(
                "{calibration_temperature} must be > 0, got "
                + literal(self.calibration_temperature)
            )
        if self.prune_after < 0 or self.prune_keep < 1:
            raise OptionError(
                "{prune_after} must be >= 0 and {prune_keep} >= 1, got "
                + f"{literal(self.prune_after)} and {literal(self.prune_keep)}"
            )
        offset = self.adaptive_passes
        if offset is not None and (not is_integer(offset) or offset < 0):
            raise OptionError(
                "{adaptive_passes} is the offset c of the pass budget "
                "T_i = ceil(log2 n_i) + c (at most {num_passes}) and must be an integer "
                ">= 0, got " + literal(offset)
            )
        if not is_integer(self.remask_regions) or self.remask_regions < 1:
            raise OptionError(
                "{remask_regions} is the number of regions a target is split into for "
                "re-masking and must be an integer >= 1 (1: the paper's global rule), got "
                + literal(self.remask_regions)
            )


def is_integer(value) -> bool:
    """True for an int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def mean_logprob(token_logprobs: Tensor, counts: Tensor) -> Tensor:
    """``(N,)`` mean log-probability of each row's ``counts`` predicted tokens."""
    return token_logprobs.sum(dim=1) / counts.clamp(min=1).to(token_logprobs)


def prune_candidates(token_logprobs: Tensor, counts: Tensor, beam: int, keep: int) -> Tensor:
    """``(N,)`` True for the candidates outside each sentence's ``keep`` best so far."""
    per_sentence = mean_logprob(token_logprobs, counts).view(-1, beam)  # B x beam
    best = per_sentence.topk(min(keep, beam), dim=1).indices  # B x keep
    kept = torch.zeros_like(per_sentence, dtype=torch.bool).scatter_(1, best, True)
    return ~kept.view(-1)  # N


def mask_predict(
    step: Step,
    lengths: Tensor,
    mask_idx: int,
    pad_idx: int,
    options: MaskPredictOptions = MaskPredictOptions(),
    template: Optional[Tensor] = None,
    first_pass: Optional[Tensor] = None,
) -> DecodeResult:
    """Decode ``N`` target sequences of the given lengths with Mask-Predict.

    Args:
        step: the model (``contract.Step``), returning log-probabilities. It must
            never give the mask or pad symbol the highest probability (the glue sets
            their logits to -inf).
        lengths: ``(N,)`` target lengths, each ``>= 1``.
        mask_idx, pad_idx: the dictionary's mask and pad symbols.
        options: a ``MaskPredictOptions`` record.
        template: ``N x L`` tokens with ``<mask>`` at the positions to generate and
            pad after each row's length; ``lengths`` must then match it.
        first_pass: ``N x L x V`` log-probabilities that pass 1 reads instead of calling
            ``step`` (a draft); like the step's, mask and pad must score -inf.

    Returns:
        a ``DecodeResult`` whose ``steps`` are the passes spent on each row.
    """
    if lengths.numel() > 0 and int(lengths.min()) < 1:
        raise ValueError("every target length must be >= 1")
    num_passes, force_max_iter = options.num_passes, options.force_max_iter
    beam, prune_after, prune_keep = options.beam, options.prune_after, options.prune_keep
    tokens = initial_tokens(lengths, mask_idx, pad_idx)  # N x L, all <mask>
    if template is not None:
        width = tokens.size(1)
        if not torch.equal(template[:, :width].ne(pad_idx), tokens.ne(pad_idx)):
            raise ValueError("the template's padding must match the target lengths")
        tokens = template[:, :width]  # N x L
    free = tokens.eq(mask_idx)  # N x L, positions to generate
    num_free = free.sum(dim=1)  # N
    rule = RemaskRule.for_batch(options, lengths, num_free)
    budget = rule.budget  # N, passes per row (adaptive_passes), else None: all T

    def predict(masked_input: Tensor, rows: Optional[Tensor], where: Tensor, given=None):
        """Token, log-prob and confidence, n x L each, valid where ``where`` is True;
        ``given`` (n x L x V) scores the positions instead of the step."""
        if given is not None:
            logprobs = given.float()[where]  # M x V
        elif options.sparse_step:
            logprobs = step(masked_input, rows, where).float()  # M x V
        else:
            logprobs = step(masked_input, rows).float()[where]  # M x V
        best_lp, best = logprobs.max(dim=-1)  # M each
        conf = rule.confidence(logprobs, best)  # M
        out_tokens = masked_input.masked_scatter(where, best)  # n x L
        out_lp = torch.zeros_like(where, dtype=best_lp.dtype).masked_scatter(where, best_lp)
        return out_tokens, out_lp, out_lp.new_zeros(where.shape).masked_scatter(where, conf)

    if first_pass is not None and first_pass.shape[:2] != tokens.shape:
        raise ValueError(
            f"the draft's scores are {tuple(first_pass.shape[:2])} positions, the "
            f"targets {tuple(tokens.shape)}"
        )
    tokens_pred, token_logprobs, conf = predict(tokens, None, free, first_pass)  # a draft: no step
    tokens = torch.where(free, tokens_pred, tokens)  # N x L, given tokens and pad kept
    token_logprobs = token_logprobs.masked_fill(~free, 0.0)  # N x L
    ranking = rule.first_ranking(conf, token_logprobs, free)  # N x L each
    steps = torch.ones_like(lengths)
    history = [tokens.clone()] if options.retain_history else []

    pruned = torch.zeros_like(lengths, dtype=torch.bool)  # N, candidates dropped
    settled = torch.zeros_like(lengths, dtype=torch.bool)  # N, stopped by stop_unchanged
    for done in range(1, num_passes):
        if done == prune_after and beam > prune_keep:
            pruned = prune_candidates(token_logprobs, num_free, beam, prune_keep)  # N
        counts = rule.count(done)  # N
        rows: Optional[Tensor] = None
        if not force_max_iter or budget is not None or done >= prune_after > 0:
            if force_max_iter or options.update_observed:  # every row makes its passes
                active = ~pruned if budget is None else ~pruned & (budget > done)  # N
                if not force_max_iter:  # a pass re-masking nothing still re-predicts
                    active = active & ~settled  # N
            else:
                active = (counts > 0) & ~pruned & ~settled  # N
            live = active.nonzero().squeeze(1)  # n: the pass's one host sync (its size)
            if live.numel() == 0:
                break
            if live.numel() < active.numel():
                rows = live

        def take(x: Tensor) -> Tensor:
            return x if rows is None else x[rows]

        sub_tokens, sub_lp, sub_ranking = take(tokens), take(token_logprobs), ranking.take(rows)
        remask = rule.choose(sub_ranking, take(counts), rows)  # n x L
        updated = take(free) if options.update_observed else remask  # n x L, re-predicted
        new_tokens, new_lp, new_conf = predict(
            sub_tokens.masked_fill(remask, mask_idx), rows, updated
        )  # n x L each, new values where updated
        same = updated & new_tokens.eq(sub_tokens)  # n x L
        sub_settled = same.eq(updated).all(dim=1)  # n, nothing re-predicted differently
        sub_ranking = rule.after_pass(sub_ranking, remask, updated, same, new_lp, new_conf)
        sub_tokens = torch.where(updated, new_tokens, sub_tokens)
        sub_lp = torch.where(updated, new_lp, sub_lp)

        ranking = ranking.put(rows, sub_ranking)
        if rows is None:
            tokens, token_logprobs = sub_tokens, sub_lp
            steps = steps + 1
            if options.stop_unchanged:
                settled = settled | sub_settled
        else:
            tokens = tokens.index_copy(0, rows, sub_tokens)
            token_logprobs = token_logprobs.index_copy(0, rows, sub_lp)
            steps = steps.index_add(0, rows, torch.ones_like(rows))
            if options.stop_unchanged:
                settled = settled.index_copy(0, rows, settled[rows] | sub_settled)
        if options.retain_history:
            history.append(tokens.clone())

    scores = mean_logprob(token_logprobs, num_free).masked_fill(pruned, float("-inf"))  # N
    return DecodeResult(tokens, token_logprobs, scores, steps, history)
