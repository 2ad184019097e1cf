"""One-pass decoding of a model trained with CTC (``--ctc-upsample``, ``models/ctc.py``).

The decoder reads the model's canvas of ``R x`` the source length once; each position
takes its most probable symbol (pad, BOS and EOS banned; the ``<mask>`` class is CTC's
blank), repeats are merged and blanks dropped (Graves et al., 2006, best-path decoding).
``--ctc-blank-penalty P`` first lowers the blank's log-probability by P, a length
control of this plugin, not of the papers. A hypothesis's score is the mean
log-probability of its canvas path (the penalty included), its positional scores the
log-probabilities of the output symbols. There are no length candidates:
``--iter-decode-with-beam`` must be 1.

Refinement (Mask-CTC, Higuchi et al., Interspeech 2020): a model trained with
``--ctc-cmlm-weight`` also reads masked targets, so ``--iter-decode-max-iter T > 1``
takes the CTC output as Mask-Predict's first pass (its tokens, and the distribution of
the canvas position each token came from as their scores) and runs passes 2 .. T at the
CTC output's length with the task's re-masking options (the paper's linear decay by
default). Mask-CTC instead masks the tokens below a probability threshold once and
fills them easy-first; the linear decay keeps T's meaning the same as for a CMLM. A
sentence whose CTC output is empty stays empty. A model trained with CTC only decodes
in one pass.
"""

from typing import Optional

import torch

from cmlm_decoding import DecodeResult, MaskPredictOptions, mask_predict

from ..errors import CMLMPluginError
from ..models.ctc import collapse
from ..models.inference import inference_path
from .generator import LengthBeamGenerator, mask_predict_options, warn_if_update_observed_is_idle
from .hypotheses import hypotheses
from .step import DecoderStep, refuse_nonfinite


class CTCGenerator(LengthBeamGenerator):
    """Best-path CTC decoding of a ``--ctc-upsample`` model, one decoder pass, then with
    ``refine`` (Mask-Predict options, T > 1) passes 2 .. T of Mask-Predict."""

    def __init__(
        self,
        tgt_dict,
        max_iter: int,
        beam_size: int,
        decoder_impl="fast",
        blank_penalty=0.0,
        refine: Optional[MaskPredictOptions] = None,
    ):
        if beam_size != 1 or (max_iter != 1 and refine is None):
            raise CMLMPluginError(
                "this model was trained with CTC (--ctc-upsample): it decodes in one pass "
                "over its own canvas, without length candidates; use --iter-decode-max-iter 1 "
                f"--iter-decode-with-beam 1 (got {max_iter} and {beam_size}), or train with "
                "--ctc-cmlm-weight to refine its output with more passes"
            )
        super().__init__(tgt_dict, 1, False if refine is None else refine.retain_history,
                         decoder_impl)  # fmt: skip
        self.refine = refine
        self.max_iter = 1 if refine is None else refine.num_passes
        self.banned = sorted({self.pad, tgt_dict.bos(), self.eos})  # the mask is the blank
        self.blank_penalty = blank_penalty  # --ctc-blank-penalty

    def check_models(self, models) -> None:
        super().check_models(models)
        if self.refine is not None and not models[0].ctc_cmlm_weight:
            raise CMLMPluginError(
                "this model was trained with CTC only (no --ctc-cmlm-weight), so it cannot "
                "refine its output: decode with --iter-decode-max-iter 1"
            )

    @torch.no_grad()
    def generate(self, models, sample, prefix_tokens=None, constraints=None, **unused):
        if prefix_tokens is not None or constraints is not None:
            raise CMLMPluginError(
                "a CTC model (--ctc-upsample) decodes without --prefix-size or "
                "--constraints templates"
            )
        self.check_models(models)
        model = models[0]
        if model.training:
            model.eval()
        net_input = sample["net_input"]
        src_tokens, src_lengths = net_input["src_tokens"], net_input["src_lengths"]  # B x S, B
        device = src_tokens.device
        path = inference_path(model, self.decoder_impl, device)
        encoder_out = path.encode(src_tokens, src_lengths)
        canvas = model.ctc_canvas(src_tokens)  # B x L
        real = canvas.ne(self.pad)  # B x L
        lengths = real.sum(dim=1)  # B
        order = torch.arange(canvas.size(0), device=device)  # B, one candidate each
        logits = path.logits(path.start(encoder_out, order), canvas, None).float()  # B x L x V
        lprobs = torch.log_softmax(logits, dim=-1)  # B x L x V
        lprobs[..., self.banned] = float("-inf")
        if self.blank_penalty:  # the blank made less likely: longer outputs
            lprobs[..., self.mask] -= self.blank_penalty
        best, symbols = lprobs.max(dim=-1)  # B x L each
        scores = best.masked_fill(~real, 0.0).sum(dim=1) / lengths.clamp(min=1)  # B
        kept, order = collapse(symbols, lengths, self.mask, self.pad)
        output = symbols.masked_fill(~kept, self.pad).gather(1, order)  # B x L, left-aligned
        positional = best.masked_fill(~kept, 0.0).gather(1, order)  # B x L
        width = max(int(kept.sum(dim=1).max()), 1) if kept.numel() else 1
        result = DecodeResult(
            tokens=output[:, :width],
            token_logprobs=positional[:, :width],
            scores=scores,
            steps=torch.ones_like(lengths),
            history=[output[:, :width]] if self.retain_history else [],
        )
        if self.refine is not None:
            draft = lprobs.gather(1, order[:, :width, None].expand(-1, -1, lprobs.size(-1)))
            result = self.refined(path, encoder_out, result, draft, kept.sum(dim=1), sample)
        source_pad, source_eos = self.source_symbols
        no_source = (src_tokens.ne(source_pad) & src_tokens.ne(source_eos)).sum(dim=1).eq(0)  # B
        best_rows = torch.arange(canvas.size(0), device=device)
        return hypotheses(result, best_rows, no_source, self.pad, self.eos, self.retain_history)

    def refined(self, path, encoder_out, draft: DecodeResult, scores, lengths, sample):
        """Mask-Predict passes 2 .. T over the CTC output ``draft`` (``B x W``).

        ``scores`` (``B x W x V``) are the canvas log-probabilities of each output token's
        position, left-aligned as the tokens; ``lengths`` ``(B,)`` the output lengths.
        Rows with an empty output keep it.
        """
        rows = lengths.gt(0).nonzero().squeeze(1)  # n, sentences with a draft
        if rows.numel() == 0:
            return draft
        banned = torch.tensor(sorted({*self.banned, self.mask}), device=rows.device)
        step = DecoderStep(path, path.start(encoder_out, rows), rows.numel(), banned,
                           normalize=True)  # fmt: skip
        first = scores[rows].index_fill(-1, banned, float("-inf"))  # n x W x V, the draft
        out = mask_predict(step, lengths[rows], self.mask, self.pad, self.refine, first_pass=first)
        bad = torch.zeros_like(lengths, dtype=torch.bool).index_copy(0, rows, step.nonfinite)
        refuse_nonfinite(bad, sample)  # B
        # out's rows are as wide as the longest draft: W
        history = [draft.tokens.index_copy(0, rows, h) for h in out.history[1:]]  # passes 2..T
        return DecodeResult(
            tokens=draft.tokens.index_copy(0, rows, out.tokens),  # B x W
            token_logprobs=draft.token_logprobs.index_copy(0, rows, out.token_logprobs),
            scores=draft.scores.index_copy(0, rows, out.scores),
            steps=draft.steps.index_copy(0, rows, out.steps),
            history=draft.history + history,
        )


def uses_ctc(models) -> bool:
    """Whether the (one) model to decode was trained with CTC."""
    return bool(models) and bool(getattr(models[0], "ctc_upsample", 0))


def build_ctc_generator(tgt_dict, src_dict, models, args, task_cfg) -> CTCGenerator:
    """The generator of a CTC model, its flags checked before the first batch."""
    check_ctc_options(task_cfg)
    max_iter = getattr(args, "iter_decode_max_iter", 10)
    warn_if_update_observed_is_idle(task_cfg, max_iter)  # it acts in Mask-CTC's passes
    generator = CTCGenerator(
        tgt_dict,
        max_iter,
        getattr(args, "iter_decode_with_beam", 1),
        decoder_impl=getattr(task_cfg, "decoder_impl", "fast"),
        blank_penalty=getattr(task_cfg, "ctc_blank_penalty", 0.0),
        refine=mask_predict_options(args, task_cfg) if max_iter > 1 else None,
    )
    generator.source_symbols = (src_dict.pad(), src_dict.eos())
    generator.check_models(models)
    return generator


def check_ctc_options(task_cfg) -> None:
    """Refuse the task's decoding options that a one-pass CTC decode has no use for."""
    unused = [
        flag
        for flag, value in (
            ("--decoding diffusion", task_cfg.decoding == "diffusion"),
            ("--rerank-with", getattr(task_cfg, "rerank_with", None)),
            ("--length-shift", getattr(task_cfg, "length_shift", 0)),
            ("--length-prior-weight", getattr(task_cfg, "length_prior_weight", 0.0)),
            ("--pll-rerank", getattr(task_cfg, "pll_rerank", 0)),
            ("--collapse-repeats", getattr(task_cfg, "collapse_repeats", False)),
        )
        if value
    ]
    if unused:
        raise CMLMPluginError(
            f"this model was trained with CTC (--ctc-upsample) and decodes in one pass "
            f"without length candidates: drop {', '.join(unused)}"
        )
