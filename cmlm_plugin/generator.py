"""fairseq adapters for parallel decoding: Mask-Predict and masked diffusion.

Ghazvininejad et al. (2019), §3, and Nie et al. (2025), §2.4. Both generators
encode each source once, propose the top-l lengths of the length head, expand
the encoder output to the l candidates (a gather, not a second encoder pass),
decode all candidates of the batch at once with the pure-torch core of
``cmlm_plugin.decoding``, keep each sentence's candidate with the highest mean
log-probability and return fairseq's hypothesis dicts.

Flags (fairseq's generation options, with the paper's meaning):
``--iter-decode-max-iter T`` decoder passes (T = 1: single-pass NAT; also the
diffusion step count unless ``--diffusion-steps``); ``--iter-decode-with-beam l``
length candidates; ``--iter-decode-force-max-iter`` spends all T passes on every
sentence; ``--retain-iter-history`` and ``--print-step`` add the per-step outputs
and the passes (diffusion: model calls, NFE) to the hypotheses. The task's
``--decoding`` and its options choose and tune the algorithm.

Infilling: a target template per sentence (fairseq's packed ``constraints``, as
``fairseq-interactive --constraints`` builds them from ``source<TAB>template``
lines, or ``cmlm_plugin.infill`` from Python) fixes the target length and the
given tokens; only its ``<mask>`` positions are generated.
"""

from typing import Dict, List

import torch
from torch import Tensor

from .decoding import (
    diffusion_sample,
    guided_logits,
    initial_tokens,
    length_candidates,
    mask_predict,
    select_best,
)
from .errors import CMLMPluginError
from .models.fast_decoder import FastDecoder, unsupported
from .models.fast_encoder import FastEncoder
from .noise import empty_sources
from .symbols import mask_index

_NO_ENSEMBLE = "parallel decoding uses one model: pass one checkpoint to --path (no ensembles)"


class QuantizedPaths:
    """The int8 encoder and decoder of one model, re-quantized when its weights change
    (a parameter's storage or ``_version``; see ``LengthBeamGenerator.fast_paths``)."""

    def __init__(self, model):
        self.model = model
        self.params = list(model.parameters())  # walked once, not per batch
        self.versions = None
        self.cached = None

    def paths(self):
        versions = [(p.data_ptr(), p._version) for p in self.params]
        if versions != self.versions:
            encoder = FastEncoder.build(self.model.encoder, int8=True) or self.model.encoder
            self.cached = (encoder, FastDecoder(self.model, int8=True))
            self.versions = versions
        return self.cached


class LengthBeamGenerator:
    """Shared machinery: encoder pass, length candidates, step function, hypotheses."""

    def __init__(self, tgt_dict, max_iter: int = 10, beam_size: int = 1, retain_history=False):
        if max_iter < 1:
            raise CMLMPluginError(
                f"--iter-decode-max-iter is the number of decoder passes and must be "
                f">= 1, got {max_iter}"
            )
        if beam_size < 1:
            raise CMLMPluginError(
                f"--iter-decode-with-beam is the number of length candidates and must "
                f"be >= 1, got {beam_size}"
            )
        self.tgt_dict = tgt_dict
        self.max_iter = max_iter
        self.beam_size = beam_size
        self.retain_history = retain_history
        self.pad = tgt_dict.pad()
        self.eos = tgt_dict.eos()  # read by fairseq-generate to strip outputs
        self.mask = mask_index(tgt_dict)
        # symbols a position may never be decoded as
        self.banned = sorted({self.pad, tgt_dict.bos(), self.eos, self.mask})
        self.guidance = 0.0  # classifier-free guidance scale (diffusion only)
        self.empty_source = None  # (pad, eos, left_pad) to build unconditional inputs
        self.source_symbols = None  # (pad, eos) of the source: empty sources -> empty outputs
        # log_softmax over the whole vocabulary before banning symbols (Mask-Predict's
        # confidences, as the original code and fairseq compute them); else logits
        self.normalize_before_ban = False
        self.decoder_impl = "fast"  # --decoder-impl: fast, int8 or modules
        self._int8 = None  # QuantizedPaths of the last model decoded with int8

    def fast_paths(self, model, device):
        """``(encoder, decoder)`` for ``--decoder-impl``: the encoder to call (a
        ``FastEncoder``, or fairseq's module) and a ``FastDecoder`` (None: modules).

        ``fast`` packs its weights anew for every batch (well under a millisecond), so
        it always reads the current parameters. ``int8`` quantizes once per model
        (about 0.1 s at d=256) and re-quantizes when a parameter is replaced or
        updated in place through autograd-visible ops (its ``_version``); updates
        through ``.data`` are not seen, so decode a model whose weights change between
        calls (validation during training) with ``fast``.
        """
        if self.decoder_impl == "modules":
            return model.encoder, None
        int8 = self.decoder_impl == "int8"
        if int8 and device.type != "cpu":
            raise CMLMPluginError(
                "--decoder-impl int8 runs on CPU only: decode with --cpu, or use "
                "--decoder-impl fast (with --fp16 on a GPU)"
            )
        dtype = model.decoder.embed_tokens.weight.dtype
        if int8 and dtype != torch.float32:
            raise CMLMPluginError(
                f"--decoder-impl int8 quantizes a float32 model, this one is {dtype}: "
                "drop --fp16/--bf16, or use --decoder-impl fast"
            )
        reason = unsupported(model.decoder)
        if reason is not None:
            if int8:
                raise CMLMPluginError(
                    f"--decoder-impl int8 cannot evaluate this decoder ({reason}): use "
                    "--decoder-impl modules"
                )
            return model.encoder, None  # fairseq's module forward handles every option
        if not int8:
            return FastEncoder.build(model.encoder) or model.encoder, FastDecoder(model)
        if self._int8 is None or self._int8.model is not model:
            self._int8 = QuantizedPaths(model)
        return self._int8.paths()

    def check_models(self, models) -> None:
        if len(models) != 1:
            raise CMLMPluginError(_NO_ENSEMBLE)
        model = models[0]
        if not hasattr(model, "predict_length"):
            raise CMLMPluginError(
                f"{type(model).__name__} is not a cmlm_plugin model: train it with "
                "--task cmlm --arch cmlm_plugin_base (or another cmlm_plugin_* arch)"
            )
        classes = model.length_head.num_classes
        if self.beam_size > classes:
            raise CMLMPluginError(
                f"--iter-decode-with-beam {self.beam_size} exceeds the model's "
                f"{classes} length classes: use at most {classes}"
            )

    def templates(self, constraints: Tensor, max_length: int) -> List:
        """Per sentence, the template in fairseq's packed constraints, or None.

        Packed format (``fairseq.token_generation_constraints``): ``[count, c1..., 0,
        c2..., 0, ...]``; the first constraint is the template.
        """
        special = {self.pad, self.eos, self.tgt_dict.bos()}
        found = []
        for row in constraints.tolist():  # input preparation, once per batch
            if row[0] == 0:
                found.append(None)
                continue
            body = row[1:]
            template = body[: body.index(0)] if 0 in body else body
            if not template:
                raise CMLMPluginError("an infilling template is empty: give its tokens and <mask>s")
            if set(template) & special:
                raise CMLMPluginError(
                    "an infilling template holds pad/BOS/EOS: give words and <mask>s"
                )
            if len(template) > max_length:
                raise CMLMPluginError(
                    f"an infilling template has {len(template)} tokens, more than the "
                    f"model's {max_length} target positions"
                )
            found.append(template)
        return found

    @torch.no_grad()
    def generate(self, models, sample, prefix_tokens=None, constraints=None, **unused):
        if prefix_tokens is not None:
            raise CMLMPluginError("--prefix-size is not supported by --task cmlm")
        self.check_models(models)
        model = models[0]
        if model.training:  # walking every module costs ~1 ms per call at batch 1
            model.eval()
        net_input = sample["net_input"]
        src_tokens, src_lengths = net_input["src_tokens"], net_input["src_lengths"]  # B x S
        num_sentences = src_tokens.size(0)
        beam = self.beam_size
        device = src_tokens.device

        no_source = torch.zeros(num_sentences, dtype=torch.bool, device=device)  # B
        if self.source_symbols is not None:  # no token but EOS: the output is empty
            source_pad, source_eos = self.source_symbols
            no_source = (src_tokens.ne(source_pad) & src_tokens.ne(source_eos)).sum(dim=1).eq(0)

        guided = self.guidance != 0.0
        if guided:  # one encoder call on [sources; empty sources]
            drop = torch.ones(num_sentences, dtype=torch.bool, device=device)
            empty, empty_lengths = empty_sources(src_tokens, drop, *self.empty_source)
            src_tokens = torch.cat([src_tokens, empty])  # 2B x S
            src_lengths = torch.cat([src_lengths, empty_lengths])  # 2B
        encode, fast = self.fast_paths(model, device)
        encoder_out = encode(src_tokens, src_lengths=src_lengths)
        length = model.predict_length(encoder_out)
        max_length = model.decoder.max_positions()
        lengths, _ = length_candidates(
            length["logprobs"][:num_sentences],
            length["class_lengths"][:num_sentences],
            beam,
            max_length,
        )  # B x beam, from the conditional pass
        template = None
        if constraints is not None:
            lengths, template = self._apply_templates(
                self.templates(constraints, max_length), lengths
            )
        lengths = lengths.reshape(-1)  # B*beam, candidates of a sentence contiguous
        order = torch.arange(num_sentences, device=device).repeat_interleave(beam)  # N
        num_candidates = order.numel()
        if guided:
            order = torch.cat([order, order + num_sentences])  # 2N: cond, then uncond
        if fast is None:  # fairseq's module forward on B*beam expanded encoder states
            candidates_out = model.encoder.reorder_encoder_out(encoder_out, order)
        else:  # cross-attention keys/values once per sentence, for all passes
            cache = fast.prepare(encoder_out)
        banned = torch.tensor(self.banned, device=device)
        nonfinite = torch.zeros(num_candidates, dtype=torch.bool, device=device)  # N

        def logits_fn(tokens: Tensor, rows, where=None) -> Tensor:
            """n x L tokens of candidates ``rows`` (all when None) -> n x L x V logits,
            or M x V at the M positions where the n x L bool ``where`` is True."""
            seen = slice(None) if rows is None else rows
            if guided:  # candidates_out holds the N conditional rows, then the N others
                rows = None if rows is None else torch.cat([rows, rows + num_candidates])  # 2n
                tokens = torch.cat([tokens, tokens])  # 2n x L
                where = None if where is None else torch.cat([where, where])  # 2n x L
            if fast is not None:
                sentences = order if rows is None else order[rows]  # n, sentence of each row
                logits = fast.logits(tokens, cache, sentences, where)
            else:
                enc = (
                    candidates_out
                    if rows is None
                    else model.encoder.reorder_encoder_out(candidates_out, rows)
                )
                logits = model.decoder_logits(tokens, enc, where)
            logits = logits.float()  # n x L x V, or M x V
            finite = torch.isfinite(logits.sum(dim=-1))  # n x L, or M: any NaN/inf -> NaN/inf
            if where is not None:
                finite = torch.ones_like(where).masked_scatter(where, finite)  # n x L
            bad = ~finite.all(dim=1)  # n (2n guided), no sync
            nonfinite[seen] |= bad.view(2, -1).any(dim=0) if guided else bad
            if guided:
                cond, uncond = logits.chunk(2)
                logits = guided_logits(cond, uncond, self.guidance)  # n x L x V
            if self.normalize_before_ban:  # probabilities over the whole vocabulary
                logits = torch.log_softmax(logits, dim=-1)  # n x L x V
            return logits.index_fill_(-1, banned, float("-inf"))

        if template is not None:
            template = template.repeat_interleave(beam, dim=0)  # N x L
        result = self.decode(logits_fn, lengths, template)
        self._check_finite(nonfinite.view(num_sentences, beam).any(dim=1), sample)
        best = select_best(result.scores, beam)  # B
        return self._hypotheses(result, best, no_source)

    @staticmethod
    def _check_finite(bad: Tensor, sample) -> None:
        """Refuse outputs of a decoder pass that produced NaN/inf logits (``bad``: B)."""
        if bad.any():  # one check per batch, after decoding
            ids = sample["id"][bad] if "id" in sample else bad.nonzero().view(-1)
            raise CMLMPluginError(
                f"the decoder produced NaN/inf logits for {int(bad.sum())} sentence(s) "
                f"(ids {ids.tolist()[:10]}); in fp16 this is an overflow: decode in fp32 "
                "(drop --fp16) and check the checkpoint"
            )

    def _apply_templates(self, templates: List, lengths: Tensor):
        """Template rows get the template's length for every candidate.

        Returns the new ``B x beam`` lengths and the ``B x L`` start tokens
        (templates, or all ``<mask>`` up to the longest candidate).
        """
        device = lengths.device
        for i, template in enumerate(templates):
            if template is not None:
                lengths[i] = len(template)
        width = int(lengths.max())
        start = torch.full((lengths.size(0), width), self.mask, dtype=torch.long, device=device)
        for i, template in enumerate(templates):
            if template is not None:
                start[i, : len(template)] = torch.tensor(template, device=device)
                start[i, len(template) :] = self.pad
        return lengths, start

    def decode(self, logits_fn, lengths: Tensor, template=None):
        """Decode ``N`` candidates; returns tokens, token_logprobs, scores, steps, history.

        ``template`` (``N x L`` or None) holds given tokens and ``<mask>``; only
        candidates whose rows contain non-mask tokens are constrained by it.
        """
        raise NotImplementedError

    def start_tokens(self, lengths: Tensor, template) -> Tensor:
        """``N x L``: all ``<mask>`` up to each length, or the template's given tokens."""
        tokens = initial_tokens(lengths, self.mask, self.pad)  # N x L
        if template is not None:
            tokens = torch.where(tokens.eq(self.mask), template[:, : tokens.size(1)], tokens)
        return tokens

    def _hypotheses(self, result, best: Tensor, empty: Tensor) -> List[List[Dict]]:
        """fairseq's output format: one list holding one hypothesis per sentence.

        Sentences whose source is ``empty`` (``B``) get the empty hypothesis.
        """
        # the loop below only slices finished tensors into per-sentence outputs
        tokens = result.tokens[best].cpu()  # B x L
        logprobs = result.token_logprobs[best].cpu()  # B x L
        scores = result.scores[best].cpu()
        steps = result.steps[best].cpu()
        kept = result.tokens[best].ne(self.pad).sum(dim=1).masked_fill(empty, 0).cpu()  # B
        empty = empty.cpu()
        history = [h[best].cpu() for h in result.history]
        eos = torch.tensor([self.eos])
        hypos = []
        for i in range(best.numel()):
            n = int(kept[i])
            hypo = {
                "tokens": torch.cat([tokens[i, :n], eos]),
                "score": 0.0 if empty[i] else float(scores[i]),
                "positional_scores": logprobs[i, :n],
                "attention": None,
                "alignment": None,
                "steps": 0 if empty[i] else int(steps[i]),
            }
            if self.retain_history:
                hypo["history"] = [
                    {
                        "tokens": torch.cat([h[i, :n], eos]),
                        "score": 0.0,
                        "attention": None,
                        "alignment": None,
                    }
                    for h in history[: int(steps[i])]
                ]
            hypos.append([hypo])
        return hypos


class MaskPredictGenerator(LengthBeamGenerator):
    """Mask-Predict (``decoding.mask_predict``): T passes, re-mask the least confident."""

    def __init__(self, tgt_dict, max_iter=10, beam_size=1, force_max_iter=False,
                 retain_history=False, **variants):  # fmt: skip
        super().__init__(tgt_dict, max_iter, beam_size, retain_history)
        self.force_max_iter = force_max_iter
        self.variants = variants  # schedule, ratio, confidence, ... of mask_predict
        if variants.get("prune_after", 0) < 0 or variants.get("prune_keep", 1) < 1:
            raise CMLMPluginError(
                "--length-prune-after must be >= 0 and --length-prune-keep >= 1, got "
                f"{variants.get('prune_after')} and {variants.get('prune_keep')}"
            )
        if force_max_iter and variants.get("stop_unchanged"):
            raise CMLMPluginError(
                "--stop-unchanged stops sentences early and --iter-decode-force-max-iter "
                "forbids it: drop one of them"
            )
        self.normalize_before_ban = True  # logits_fn returns log-probabilities

    def decode(self, logits_fn, lengths, template=None):
        if template is not None:
            template = self.start_tokens(lengths, template)
        return mask_predict(
            logits_fn,
            lengths,
            self.max_iter,
            self.mask,
            self.pad,
            sparse_step=True,
            force_max_iter=self.force_max_iter,
            retain_history=self.retain_history,
            template=template,
            **self.variants,
        )


class DiffusionResultView:
    """A ``DiffusionResult`` seen through Mask-Predict's field names (steps = NFE)."""

    def __init__(self, result):
        self.tokens, self.token_logprobs = result.tokens, result.token_logprobs
        self.scores, self.steps, self.history = result.scores, result.nfe, result.history


class DiffusionGenerator(LengthBeamGenerator):
    """Block-wise masked-diffusion sampling (``decoding.diffusion_sample``)."""

    def __init__(self, tgt_dict, steps=10, beam_size=1, retain_history=False, block_length=0,
                 temperature=0.0, remasking="low_confidence", threshold=None, guidance=0.0,
                 empty_source=None, seed=None, gen_length=0):  # fmt: skip
        super().__init__(tgt_dict, steps, beam_size, retain_history)
        if gen_length < 0:
            raise CMLMPluginError(
                f"--gen-length must be >= 0 (0: the length head), got {gen_length}"
            )
        if gen_length and beam_size != 1:
            raise CMLMPluginError("--gen-length fixes the length: use --iter-decode-with-beam 1")
        if gen_length and block_length and gen_length % block_length:
            raise CMLMPluginError(
                f"--block-length {block_length} does not divide --gen-length {gen_length}: "
                "use a divisor (LLaDA decodes whole blocks)"
            )
        self.gen_length = gen_length
        if gen_length:  # the output ends at a generated EOS
            self.banned = [i for i in self.banned if i != self.eos]
        if block_length < 0:
            raise CMLMPluginError(
                f"--block-length must be >= 0 (0: whole length), got {block_length}"
            )
        if temperature < 0:
            raise CMLMPluginError(f"--sampling-temperature must be >= 0, got {temperature}")
        if threshold is not None and not 0.0 < threshold <= 1.0:
            raise CMLMPluginError(f"--confidence-threshold must be in (0, 1], got {threshold}")
        if guidance != 0.0 and empty_source is None:
            raise CMLMPluginError("--cfg-scale needs the source dictionary to build empty sources")
        self.block_length = block_length
        self.temperature = temperature
        self.remasking = remasking
        self.threshold = threshold
        self.guidance = guidance
        self.empty_source = empty_source
        self.seed = seed

    def check_models(self, models) -> None:
        super().check_models(models)
        max_length = models[0].decoder.max_positions()
        if self.gen_length > max_length:
            raise CMLMPluginError(
                f"--gen-length {self.gen_length} exceeds the model's {max_length} target positions"
            )

    def decode(self, logits_fn, lengths, template=None):
        if self.gen_length and template is None:
            lengths = torch.full_like(lengths, self.gen_length)
        tokens = self.start_tokens(lengths, template)  # N x L
        block = self.block_length or max(1, tokens.size(1))
        generator = None
        if self.seed is not None and self.temperature > 0:
            generator = torch.Generator(device=lengths.device).manual_seed(self.seed)
        result = diffusion_sample(
            logits_fn,
            tokens,
            self.max_iter,
            block,
            self.mask,
            self.pad,
            temperature=self.temperature,
            remasking=self.remasking,
            threshold=self.threshold,
            eos_idx=self.eos if self.gen_length else None,
            retain_history=self.retain_history,
            generator=generator,
            sparse_step=True,
        )
        return DiffusionResultView(result)


def build_generator(tgt_dict, src_dict, models, args, task_cfg):
    """The generator ``--decoding`` names, configured from fairseq's generation args."""
    max_iter = getattr(args, "iter_decode_max_iter", 10)
    beam = getattr(args, "iter_decode_with_beam", 1)
    history = getattr(args, "retain_iter_history", False)
    if task_cfg.decoding == "diffusion":
        generator = DiffusionGenerator(
            tgt_dict,
            steps=task_cfg.diffusion_steps or max_iter,
            beam_size=beam,
            retain_history=history,
            block_length=task_cfg.block_length,
            temperature=task_cfg.sampling_temperature,
            remasking=task_cfg.remasking,
            threshold=task_cfg.confidence_threshold,
            guidance=task_cfg.cfg_scale,
            empty_source=(src_dict.pad(), src_dict.eos(), task_cfg.left_pad_source),
            seed=getattr(args, "seed", None),
            gen_length=task_cfg.gen_length,
        )
    else:
        generator = MaskPredictGenerator(
            tgt_dict,
            max_iter=max_iter,
            beam_size=beam,
            force_max_iter=getattr(args, "iter_decode_force_max_iter", False),
            retain_history=history,
            schedule=task_cfg.remask_schedule,
            ratio=task_cfg.remask_ratio,
            confidence=task_cfg.remask_confidence,
            calibration_temperature=task_cfg.calibration_temperature,
            monotone=task_cfg.monotone,
            prune_after=task_cfg.length_prune_after,
            prune_keep=task_cfg.length_prune_keep,
            stop_unchanged=getattr(task_cfg, "stop_unchanged", False),
            beam=beam,
        )
    generator.source_symbols = (src_dict.pad(), src_dict.eos())
    generator.decoder_impl = getattr(task_cfg, "decoder_impl", "fast")
    if models:
        generator.check_models(models)
    return generator
