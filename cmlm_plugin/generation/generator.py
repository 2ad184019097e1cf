"""fairseq generators for parallel decoding: Mask-Predict and masked diffusion.

Ghazvininejad et al. (2019), §3, and Nie et al. (2025), §2.4. A generator is glue: it
encodes each source once through the model's inference path (``models.inference``),
proposes the top-l lengths of the length head, starts the decoder state of the l
candidates (no second encoder pass), hands a ``DecoderStep`` to the pure-torch loop of
``cmlm_decoding``, keeps each sentence's candidate with the highest mean
log-probability (with the task's ``--pll-rerank``, the highest masked
pseudo-log-likelihood under the same model: ``cmlm_decoding.pseudo_likelihood``; with
``--rerank-with``, the one an autoregressive model scores best: ``rerank``), with
``--collapse-repeats`` keeps each run of one token once (``cmlm_decoding.repeats``) and
returns fairseq's hypothesis dicts (``hypotheses``).

Flags (fairseq's generation options, with the paper's meaning):
``--iter-decode-max-iter T`` decoder passes (T = 1: single-pass NAT; also the
diffusion step count unless ``--diffusion-steps``); ``--iter-decode-with-beam l``
length candidates; ``--iter-decode-force-max-iter`` spends all T passes on every
sentence (with the task's ``--adaptive-passes``, all of each sentence's own T_i);
``--retain-iter-history`` and ``--print-step`` add the per-step outputs and the passes
(diffusion: model calls, NFE) to the hypotheses. The task's ``--decoding`` and its options
choose and tune the algorithm; ``build_generator`` turns them into the core's options
record (``MaskPredictOptions`` or ``DiffusionOptions``), which checks every value once,
at start-up.

Infilling (``templates``): a target template per sentence fixes the target length and
the given tokens; only its ``<mask>`` positions are generated.
"""

import sys

import torch

from cmlm_decoding import (
    DiffusionOptions,
    MaskPredictOptions,
    OptionError,
    collapse_repeats,
    diffusion_sample,
    initial_tokens,
    length_candidates,
    mask_predict,
    pseudo_log_likelihood,
    select_best,
)

from ..errors import CMLMPluginError
from ..models.inference import inference_path
from ..symbols import mask_index
from ..training.noise import empty_sources
from .hypotheses import hypotheses
from .rerank import build_reranker, combine
from .step import DecoderStep, refuse_nonfinite
from .templates import apply_templates, parse_templates, start_tokens

_NO_ENSEMBLE = "parallel decoding uses one model: pass one checkpoint to --path (no ensembles)"

# the command-line flag of each field of the core's options records
MASK_PREDICT_FLAGS = {
    "num_passes": "--iter-decode-max-iter",
    "beam": "--iter-decode-with-beam",
    "force_max_iter": "--iter-decode-force-max-iter",
    "schedule": "--remask-schedule",
    "ratio": "--remask-ratio",
    "confidence": "--remask-confidence",
    "calibration_temperature": "--calibration-temperature",
    "prune_after": "--length-prune-after",
    "prune_keep": "--length-prune-keep",
    "stop_unchanged": "--stop-unchanged",
    "adaptive_passes": "--adaptive-passes",
    "remask_regions": "--remask-regions",
    "update_observed": "--update-observed",
}
DIFFUSION_FLAGS = {
    "block_length": "--block-length",
    "temperature": "--sampling-temperature",
    "remasking": "--remasking",
    "threshold": "--confidence-threshold",
}


def build_options(record, flags, **values):
    """``record(**values)``, a bad value stopping with the flag's name in one line."""
    try:
        return record(**values)
    except OptionError as error:
        raise CMLMPluginError(error.render(flags)) from None


def check_beam(beam_size: int) -> None:
    if beam_size < 1:
        raise CMLMPluginError(
            "--iter-decode-with-beam is the number of length candidates and must "
            f"be >= 1, got {beam_size}"
        )


class LengthBeamGenerator:
    """Shared machinery: encoder pass, length candidates, step, hypotheses."""

    def __init__(self, tgt_dict, beam_size: int = 1, retain_history=False, decoder_impl="fast"):
        self.tgt_dict = tgt_dict
        self.beam_size = beam_size
        self.retain_history = retain_history
        self.decoder_impl = decoder_impl  # --decoder-impl: a name of models.inference
        self.pad = tgt_dict.pad()
        self.eos = tgt_dict.eos()  # read by fairseq-generate to strip outputs
        self.mask = mask_index(tgt_dict)
        # symbols a position may never be decoded as
        self.banned = sorted({self.pad, tgt_dict.bos(), self.eos, self.mask})
        self.guidance = 0.0  # classifier-free guidance scale (diffusion only)
        self.empty_source = None  # (pad, eos, left_pad) to build unconditional inputs
        self.source_symbols = None  # (pad, eos) of the source: empty sources -> empty outputs
        # the step returns log-probabilities over the whole vocabulary (Mask-Predict)
        self.normalize_before_ban = False
        self.length_prior_weight = 0.0  # --length-prior-weight: 0 is the paper's selection
        self.length_shift = 0  # --length-shift: pieces added to every length candidate
        self.pll_groups = 0  # --pll-rerank: candidates ranked by pseudo-log-likelihood (0: off)
        self.reranker = None  # --rerank-with: an AR model rescoring the candidates (rerank.py)
        self.rerank_weight = 1.0  # --rerank-weight: the AR score's share
        self.collapse_repeats = False  # --collapse-repeats: "a a b" -> "a b" after selection

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

    def templates(self, constraints, max_length: int):
        """Per sentence, the template in fairseq's packed constraints, or None."""
        return parse_templates(constraints, max_length, (self.pad, self.eos, self.tgt_dict.bos()))

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
        sources = (src_tokens, src_lengths)  # before guidance adds empty sources
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
        path = inference_path(model, self.decoder_impl, device)
        encoder_out = path.encode(src_tokens, src_lengths)
        length = model.predict_length(encoder_out)
        max_length = model.decoder.max_positions()
        lengths, length_logprobs = length_candidates(
            length["logprobs"][:num_sentences],
            length["class_lengths"][:num_sentences] + self.length_shift,  # B x C
            beam,
            max_length,
        )  # B x beam, from the conditional pass
        template = None
        if constraints is not None:
            lengths, template = apply_templates(
                self.templates(constraints, max_length), lengths, self.mask, self.pad
            )
        lengths = lengths.reshape(-1)  # B*beam, candidates of a sentence contiguous
        order = torch.arange(num_sentences, device=device).repeat_interleave(beam)  # N
        num_candidates = order.numel()
        if guided:
            order = torch.cat([order, order + num_sentences])  # 2N: cond, then uncond
        step = DecoderStep(
            path,
            path.start(encoder_out, order),
            num_candidates,
            torch.tensor(self.banned, device=device),
            guidance=self.guidance,
            normalize=self.normalize_before_ban,
        )
        if template is not None:
            template = template.repeat_interleave(beam, dim=0)  # N x L
        result = self.decode(step, lengths, template)
        refuse_nonfinite(step.nonfinite.view(num_sentences, beam).any(dim=1), sample)
        scores = result.scores  # N
        if self.pll_groups:  # --pll-rerank G: G more passes over the candidates
            pll = pseudo_log_likelihood(step, result.tokens, self.mask, self.pad, self.pll_groups)
            scores = pll.masked_fill(scores == float("-inf"), float("-inf"))  # pruned stay out
        if self.length_prior_weight:  # the length head's belief as a prior over candidates
            scores = scores + self.length_prior_weight * length_logprobs.reshape(-1).float()
        if self.reranker is not None:  # one teacher-forced AR pass over the N candidates
            self.reranker.follow(model)
            ar_scores = self.reranker.score(*sources, result.tokens, order[:num_candidates])
            scores = combine(scores, ar_scores, self.rerank_weight)  # N
        best = select_best(scores, beam)  # B
        if self.collapse_repeats:  # after selection: the scores are those of the decoding
            given = None
            if template is not None:  # an infilling template's given tokens stay
                given = template[:, : result.tokens.size(1)]  # N x L
                given = given.ne(self.mask) & given.ne(self.pad)
            tokens, logprobs = collapse_repeats(
                result.tokens, result.token_logprobs, self.pad, given
            )  # N x L each
            result = result._replace(tokens=tokens, token_logprobs=logprobs)
        return hypotheses(result, best, no_source, self.pad, self.eos, self.retain_history)

    def decode(self, step, lengths, template=None):
        """Decode ``N`` candidates into a ``cmlm_decoding.DecodeResult``.

        ``template`` (``N x L`` or None) holds given tokens and ``<mask>``; only
        candidates whose rows contain non-mask tokens are constrained by it.
        """
        raise NotImplementedError


class MaskPredictGenerator(LengthBeamGenerator):
    """Mask-Predict (``cmlm_decoding.mask_predict``): T passes, re-mask the least confident."""

    def __init__(self, tgt_dict, options: MaskPredictOptions, decoder_impl="fast"):
        super().__init__(tgt_dict, options.beam, options.retain_history, decoder_impl)
        self.options = options
        self.max_iter = options.num_passes
        self.normalize_before_ban = True  # the step returns log-probabilities

    def decode(self, step, lengths, template=None):
        if template is not None:
            initial = initial_tokens(lengths, self.mask, self.pad)  # N x L
            template = start_tokens(initial, template, self.mask)
        return mask_predict(step, lengths, self.mask, self.pad, self.options, template)


class DiffusionGenerator(LengthBeamGenerator):
    """Block-wise masked-diffusion sampling (``cmlm_decoding.diffusion_sample``).

    ``gen_length`` (0: the length head) fixes every output's length; the output then
    ends at a generated EOS (LLaDA's fixed-length generation).
    """

    def __init__(self, tgt_dict, options: DiffusionOptions, beam_size=1, guidance=0.0,
                 empty_source=None, seed=None, gen_length=0, decoder_impl="fast"):  # fmt: skip
        check_beam(beam_size)
        super().__init__(tgt_dict, beam_size, options.retain_history, decoder_impl)
        if gen_length < 0:
            raise CMLMPluginError(
                f"--gen-length must be >= 0 (0: the length head), got {gen_length}"
            )
        if gen_length and beam_size != 1:
            raise CMLMPluginError("--gen-length fixes the length: use --iter-decode-with-beam 1")
        block_length = options.block_length
        if gen_length and block_length and gen_length % block_length:
            raise CMLMPluginError(
                f"--block-length {block_length} does not divide --gen-length {gen_length}: "
                "use a divisor (LLaDA decodes whole blocks)"
            )
        if guidance != 0.0 and empty_source is None:
            raise CMLMPluginError("--cfg-scale needs the source dictionary to build empty sources")
        self.options = options
        self.max_iter = options.steps
        self.gen_length = gen_length
        if gen_length:  # the output ends at a generated EOS
            self.banned = [i for i in self.banned if i != self.eos]
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

    def decode(self, step, lengths, template=None):
        if self.gen_length and template is None:
            lengths = torch.full_like(lengths, self.gen_length)
        tokens = start_tokens(initial_tokens(lengths, self.mask, self.pad), template, self.mask)
        generator = None
        if self.seed is not None and self.options.temperature > 0:
            generator = torch.Generator(device=lengths.device).manual_seed(self.seed)
        eos = self.eos if self.gen_length else None
        return diffusion_sample(step, tokens, self.mask, self.pad, self.options, eos, generator)


def build_generator(tgt_dict, src_dict, models, args, task_cfg):
    """The generator ``--decoding`` names, configured from fairseq's generation args.

    Every decoding option is checked here, before the first batch.
    """
    max_iter = getattr(args, "iter_decode_max_iter", 10)
    beam = getattr(args, "iter_decode_with_beam", 1)
    history = getattr(args, "retain_iter_history", False)
    impl = getattr(task_cfg, "decoder_impl", "fast")
    if task_cfg.decoding == "diffusion":
        if getattr(task_cfg, "update_observed", False):
            raise CMLMPluginError(
                "--update-observed changes Mask-Predict's passes; the diffusion sampler "
                "never re-predicts a kept token: drop it, or use --decoding mask_predict"
            )
        steps_flag = "--diffusion-steps" if task_cfg.diffusion_steps else "--iter-decode-max-iter"
        options = build_options(
            DiffusionOptions,
            dict(DIFFUSION_FLAGS, steps=steps_flag),
            steps=task_cfg.diffusion_steps or max_iter,
            block_length=task_cfg.block_length,
            temperature=task_cfg.sampling_temperature,
            remasking=task_cfg.remasking,
            threshold=task_cfg.confidence_threshold,
            retain_history=history,
            sparse_step=True,
        )
        generator = DiffusionGenerator(
            tgt_dict,
            options,
            beam_size=beam,
            guidance=task_cfg.cfg_scale,
            empty_source=(src_dict.pad(), src_dict.eos(), task_cfg.left_pad_source),
            seed=getattr(args, "seed", None),
            gen_length=task_cfg.gen_length,
            decoder_impl=impl,
        )
    else:
        options = mask_predict_options(args, task_cfg)
        generator = MaskPredictGenerator(tgt_dict, options, decoder_impl=impl)
    if getattr(task_cfg, "ctc_blank_penalty", 0.0):  # a CTC model gets ctc_generator's
        raise CMLMPluginError(
            "--ctc-blank-penalty applies to models trained with --ctc-upsample; this "
            "one is a CMLM: drop it"
        )
    weight = getattr(task_cfg, "length_prior_weight", 0.0)
    if weight < 0:
        raise CMLMPluginError(f"--length-prior-weight must be >= 0, got {weight}")
    generator.length_prior_weight = weight
    generator.length_shift = getattr(task_cfg, "length_shift", 0)
    generator.pll_groups = check_pll_groups(getattr(task_cfg, "pll_rerank", 0), generator.beam_size)
    generator.reranker = build_reranker(task_cfg, src_dict, tgt_dict, generator.beam_size)
    generator.rerank_weight = getattr(task_cfg, "rerank_weight", 1.0)
    generator.collapse_repeats = bool(getattr(task_cfg, "collapse_repeats", False))
    generator.source_symbols = (src_dict.pad(), src_dict.eos())
    if models:
        generator.check_models(models)
    return generator


def check_pll_groups(groups: int, beam: int) -> int:
    """``--pll-rerank G`` checked: G >= 0; at l = 1 there is nothing to rank (a warning)."""
    if groups < 0:
        raise CMLMPluginError(f"--pll-rerank must be >= 0 (0: off), got {groups}")
    if groups and beam < 2:
        print(
            f"cmlm_plugin warning: --pll-rerank {groups} has one candidate to rank at "
            "--iter-decode-with-beam 1: outputs are unchanged; use --iter-decode-with-beam 2 "
            "or more",
            file=sys.stderr,
            flush=True,
        )
        return 0
    return groups


def warn_if_update_observed_is_idle(task_cfg, passes: int) -> None:
    """``--update-observed`` acts from the second pass on: at T = 1 it changes nothing."""
    if getattr(task_cfg, "update_observed", False) and passes < 2:
        print(
            f"cmlm_plugin warning: --update-observed re-predicts kept tokens from the second "
            f"pass on and --iter-decode-max-iter {passes} makes one: outputs are unchanged; "
            "use --iter-decode-max-iter 2 or more",
            file=sys.stderr,
            flush=True,
        )


def mask_predict_options(args, task_cfg) -> MaskPredictOptions:
    """The Mask-Predict options of fairseq's generation args and the task's flags, checked."""
    options = build_options(
        MaskPredictOptions,
        MASK_PREDICT_FLAGS,
        num_passes=getattr(args, "iter_decode_max_iter", 10),
        force_max_iter=getattr(args, "iter_decode_force_max_iter", False),
        retain_history=getattr(args, "retain_iter_history", False),
        schedule=task_cfg.remask_schedule,
        ratio=task_cfg.remask_ratio,
        confidence=task_cfg.remask_confidence,
        calibration_temperature=task_cfg.calibration_temperature,
        monotone=task_cfg.monotone,
        sparse_step=True,
        beam=getattr(args, "iter_decode_with_beam", 1),
        prune_after=task_cfg.length_prune_after,
        prune_keep=task_cfg.length_prune_keep,
        stop_unchanged=getattr(task_cfg, "stop_unchanged", False),
        adaptive_passes=getattr(task_cfg, "adaptive_passes", None),
        remask_regions=getattr(task_cfg, "remask_regions", 1),
        update_observed=getattr(task_cfg, "update_observed", False),
    )
    warn_if_update_observed_is_idle(task_cfg, options.num_passes)
    if options.force_max_iter and options.stop_unchanged:
        raise CMLMPluginError(
            "--stop-unchanged stops sentences early and --iter-decode-force-max-iter "
            "forbids it: drop one of them"
        )
    return options
