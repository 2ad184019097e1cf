"""Task ``cmlm``: translation with a conditional masked language model.

Ghazvininejad et al. (2019). Loads a binarized language pair like fairseq's
``translation`` task, adds a dedicated ``<mask>`` symbol to the dictionaries (the
mask never reuses ``<unk>``), masks the training targets before each train/valid
step (``--objective cmlm``: the paper's rule; ``--objective diffusion``: the
masked-diffusion forward process of LLaDA, Nie et al., 2025), and builds the
generator for ``fairseq-generate`` / ``-interactive`` / the hub interface
(``--decoding mask_predict`` or ``diffusion``).

Targets are used without their EOS: the decoder sees and predicts the n real
tokens, and the length head predicts n.

Bad flags, a model of another architecture, split dictionaries and over-long
sentences of a binarized test set stop at start-up with a one-line ``CMLMPluginError``
(docs/reliability.md, "Bad input"). Raw text (``fairseq-interactive``, the hub interface) is
different: an over-long sentence there is skipped with a warning on stderr and gets
an empty output, so that every input line still gets exactly one output, in order.

Infilling templates (``fairseq-interactive --constraints``) are encoded by the task's BPE,
``generation.templates.TemplateBPE``: the text between ``<mask>``s goes through the BPE on
its own, so no word-start piece is fixed in front of a mask. A template without any
``<mask>`` is decoded as given (nothing to generate) with a warning on stderr naming the line.
"""

import logging
import sys

import torch
from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY
from fairseq.tasks import FairseqTask, register_task
from fairseq.tasks.translation import TranslationTask

from ..errors import CMLMPluginError
from ..generation.ctc_generator import build_ctc_generator, uses_ctc
from ..generation.generator import build_generator
from ..generation.templates import TemplateBPE, unmasked_templates
from ..models.cmlm_transformer import CMLMPluginModel
from ..symbols import MASK_SYMBOL, mask_index
from ..task_tags import TaskTags, tag_language_pair, tag_raw_sources
from ..training.ar_init import init_from_autoregressive
from ..training.noise import diffusion_mask, empty_sources, uniform_mask
from ..training.second_pass import (
    ctc_glancing_input,
    glancing_input,
    glancing_ratio,
    mask_whole_rows,
    self_correction_input,
)
from .cmlm_config import CMLMConfig

logger = logging.getLogger(__name__)

TASK_NAME = "cmlm"
INFERENCE_FIRST_ID = "cmlm_first_id"  # set on raw-text datasets: the id of their first line


def check_second_pass(cfg) -> None:
    """Start-up checks of the glancing and self-correction flags."""
    end = cfg.glancing_ratio_end
    for flag, value in (("--glancing-ratio", cfg.glancing_ratio), ("--glancing-ratio-end", end),
                        ("--self-correction", cfg.self_correction),
                        ("--glancing-full-mask", cfg.glancing_full_mask)):  # fmt: skip
        if value is not None and not 0.0 <= value <= 1.0:
            raise CMLMPluginError(f"{flag} must be in [0, 1], got {value}")
    if cfg.second_pass_from_update < 0:
        raise CMLMPluginError(
            f"--second-pass-from-update must be >= 0, got {cfg.second_pass_from_update}"
        )
    if cfg.glancing_anneal_updates < 0:
        raise CMLMPluginError(
            f"--glancing-anneal-updates must be >= 0, got {cfg.glancing_anneal_updates}"
        )
    if cfg.glancing_full_mask > 0 and cfg.glancing_ratio <= 0:
        raise CMLMPluginError(
            "--glancing-full-mask shapes the glancing first pass: add --glancing-ratio "
            "(GLAT: 0.5) or drop it"
        )
    used = cfg.glancing_ratio > 0 or cfg.self_correction > 0
    if used and cfg.objective != "cmlm":
        raise CMLMPluginError(
            "--glancing-ratio and --self-correction train the cmlm objective: drop them "
            "or use --objective cmlm"
        )


def check_ctc(cfg, model, src_dict, tgt_dict, from_checkpoint: bool) -> None:
    """A CTC model (``--ctc-upsample``): a source canvas reads source ids as target ids,
    and training takes glancing (on the canvas) but no other CMLM noise option."""
    if model.ctc_canvas_kind == "source" and src_dict != tgt_dict:
        raise CMLMPluginError(
            f"--ctc-canvas source feeds source tokens to the decoder, but {cfg.data} has "
            "different source and target dictionaries: binarize with fairseq-preprocess "
            "--joined-dictionary, or use --ctc-canvas mask"
        )
    if from_checkpoint:
        return
    if cfg.objective != "cmlm" or cfg.self_correction > 0 or cfg.glancing_full_mask > 0:
        raise CMLMPluginError(
            "--ctc-upsample trains the decoder with CTC on its own canvas (glancing "
            "included): drop --objective diffusion, --self-correction and "
            "--glancing-full-mask (or drop --ctc-upsample)"
        )


@register_task(TASK_NAME, dataclass=CMLMConfig)
class CMLMPluginTask(TranslationTask):
    cfg: CMLMConfig

    def __init__(self, cfg: CMLMConfig, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        if not 0.0 <= cfg.mask_ratio_min <= cfg.mask_ratio_max <= 1.0:
            raise CMLMPluginError(
                "--mask-ratio-min/--mask-ratio-max must satisfy 0 <= min <= max <= 1, "
                f"got {cfg.mask_ratio_min} and {cfg.mask_ratio_max}"
            )
        if not 0.0 < cfg.diffusion_eps < 1.0:
            raise CMLMPluginError(f"--diffusion-eps must be in (0, 1), got {cfg.diffusion_eps}")
        if not 0.0 <= cfg.p_uncond < 1.0:
            raise CMLMPluginError(f"--p-uncond must be in [0, 1), got {cfg.p_uncond}")
        if cfg.mc_samples < 1:
            raise CMLMPluginError(f"--mc-samples must be >= 1, got {cfg.mc_samples}")
        if cfg.eos_fill and cfg.objective != "diffusion":
            raise CMLMPluginError("--eos-fill belongs to --objective diffusion")
        check_second_pass(cfg)
        if cfg.diffusion_steps < 0:
            raise CMLMPluginError(
                "--diffusion-steps must be >= 1 (0: --iter-decode-max-iter), "
                f"got {cfg.diffusion_steps}"
            )
        if cfg.left_pad_target:
            raise CMLMPluginError("--task cmlm needs right-padded targets: drop --left-pad-target")
        self.mask_idx = mask_index(tgt_dict)
        self.task_tags = TaskTags(src_dict)  # {tag: id}, read once
        if cfg.target_tag is not None:
            self.task_tags.index(cfg.target_tag)  # a clear error for an unknown tag
        self.special_ids = sorted({tgt_dict.pad(), tgt_dict.bos(), tgt_dict.eos(), self.mask_idx})
        self.ctc_model = False  # set by build_model: glancing then works on the CTC canvas

    @classmethod
    def load_dictionary(cls, filename):
        dictionary = super().load_dictionary(filename)
        dictionary.add_symbol(MASK_SYMBOL)
        return dictionary

    def build_model(self, cfg, from_checkpoint=False):
        """fairseq's model builder, after checking that the model and data fit the task."""
        arch = getattr(cfg, "arch", None) or getattr(cfg, "_name", None)
        model_class = ARCH_MODEL_REGISTRY.get(arch) or MODEL_REGISTRY.get(arch)
        if model_class is None or not issubclass(model_class, CMLMPluginModel):
            raise CMLMPluginError(
                f"the model is --arch {arch}, not a cmlm_plugin model: --task cmlm trains "
                "and decodes --arch cmlm_plugin_{tiny,small,base,big} (decode other "
                "models with their own task, e.g. --task translation)"
            )
        if getattr(cfg, "share_all_embeddings", False) and self.src_dict != self.tgt_dict:
            raise CMLMPluginError(
                f"{self.cfg.data} has different source and target dictionaries, but the "
                "model shares one embedding table: binarize with fairseq-preprocess "
                "--joined-dictionary"
            )
        model = super().build_model(cfg, from_checkpoint)
        self.ctc_model = bool(model.ctc_upsample)
        if model.ctc_upsample:
            check_ctc(self.cfg, model, self.src_dict, self.tgt_dict, from_checkpoint)
        if self.cfg.init_from_ar and not from_checkpoint:  # a new model, not a loaded one
            languages = (self.cfg.source_lang, self.cfg.target_lang)
            report = init_from_autoregressive(
                model, self.cfg.init_from_ar, self.src_dict, self.tgt_dict, languages
            )
            logger.info(report)
        return model

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        """fairseq's language pair; evaluation splits of a multi-task model get task tags.

        A source without a tag gets ``--target-tag``, or the split is refused
        (``task_tags.tag_language_pair``). Training splits are used as binarized.
        """
        super().load_dataset(split, epoch, combine, **kwargs)
        if not split.startswith("train"):
            tag_language_pair(self.datasets[split], split, self.task_tags, self.cfg.target_tag)

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        """fairseq's dataset of raw text, marked with the running id of its first line.

        ``fairseq-interactive`` builds one per ``--buffer-size`` lines, in input order,
        so the running count is the id of the ``S-``/``H-`` lines it prints (the hub
        interface builds one per call: its count runs on across calls). A multi-task
        model's sources get ``--target-tag`` where they start with no tag of their own.
        """
        first_id = getattr(self, "_inference_lines", 0)
        tagged = tag_raw_sources(src_tokens, self.task_tags, self.cfg.target_tag, first_id)
        if tagged is not src_tokens:
            src_tokens, src_lengths = tagged, [t.numel() for t in tagged]
        dataset = super().build_dataset_for_inference(src_tokens, src_lengths, constraints)
        setattr(dataset, INFERENCE_FIRST_ID, first_id)
        self._inference_lines = first_id + len(dataset)
        if constraints is not None:
            self.warn_unmasked_templates(constraints, first_id)
        return dataset

    def build_bpe(self, args):
        """fairseq's BPE (or none), encoding infilling templates mask by mask."""
        return TemplateBPE(super().build_bpe(args), self.tgt_dict, self.task_tags)

    def warn_unmasked_templates(self, constraints, first_id: int) -> None:
        """One warning per template of the ``B x K`` packed ``constraints`` with no ``<mask>``."""
        for i, template in unmasked_templates(constraints, self.mask_idx):
            start = self.tgt_dict.string(torch.tensor(template[:5]))  # dictionary symbols only
            print(
                f"cmlm_plugin warning: input line {first_id + i}: the infilling template "
                f"({start} …) has no <mask>, so nothing is generated and its output is the "
                "template as given (score 0); write each piece to generate as <mask> "
                "(or <mask:N> for N pieces)",
                file=sys.stderr,
                flush=True,
            )

    def blank_long_sources(self, dataset, max_positions) -> None:
        """Replace each raw-text source too long for the model by EOS alone, with a warning.

        The generator returns the empty hypothesis for an EOS-only source, so the
        sentence keeps its place in the output (fairseq's own filter would drop it,
        and the hub interface would then pair outputs with the wrong inputs).
        """
        if isinstance(max_positions, (tuple, list)):
            max_positions = max_positions[0]
        if max_positions is None:
            return
        sizes = dataset.src_sizes
        too_long = [int(i) for i in (sizes > max_positions).nonzero()[0]]
        if not too_long:
            return
        dataset.src = list(dataset.src)  # never the caller's list
        eos = torch.tensor([self.src_dict.eos()], dtype=torch.long)
        first_id = getattr(dataset, INFERENCE_FIRST_ID)
        for i in too_long:
            start = self.src_dict.string(dataset.src[i][:5])  # dictionary symbols only
            print(
                f"cmlm_plugin warning: input line {first_id + i} ({start} …) has "
                f"{int(sizes[i])} tokens (EOS included) but the model reads at most "
                f"{max_positions}: skipped, its output is empty; split it into shorter sentences",
                file=sys.stderr,
                flush=True,
            )
            dataset.src[i] = eos
            sizes[i] = 1

    def filter_indices_by_size(
        self, indices, dataset, max_positions=None, ignore_invalid_inputs=False
    ):
        """fairseq's size filter; a sentence too long for the model is a one-line error."""
        try:
            return super().filter_indices_by_size(
                indices, dataset, max_positions, ignore_invalid_inputs
            )
        except Exception as exc:
            if "--skip-invalid-size-inputs-valid-test" not in str(exc):
                raise
            raise CMLMPluginError(f"a sentence is too long for the model: {exc}") from exc

    def add_noise(self, sample, generator=None):
        """Drop the target's EOS and store the masked target as ``prev_target``.

        The diffusion objective also stores each sentence's masking probability as
        ``mask_prob``, which the criterion turns into the 1/t loss weight. With
        ``--eos-fill`` the EOS stays and fills the padding, and is masked like a token.
        """
        target = sample["target"]  # B x T, right-padded, ends with EOS
        eos, pad = self.tgt_dict.eos(), self.tgt_dict.pad()
        if self.cfg.eos_fill:
            target = target.masked_fill(target.eq(pad), eos)  # B x T, no padding left
        else:
            target = target.masked_fill(target.eq(eos), pad)
        sample["target"] = target
        if self.cfg.objective == "diffusion":
            special = [i for i in self.special_ids if not (self.cfg.eos_fill and i == eos)]
            sample["prev_target"], sample["mask_prob"] = diffusion_mask(
                target, self.mask_idx, special, self.cfg.diffusion_eps, generator=generator
            )
        else:
            sample["prev_target"] = uniform_mask(
                target,
                self.mask_idx,
                self.special_ids,
                self.cfg.mask_ratio_min,
                self.cfg.mask_ratio_max,
                generator=generator,
            )
        return sample

    def drop_sources(self, sample, generator=None):
        """With probability ``--p-uncond`` per sentence, train on an empty source."""
        if self.cfg.p_uncond <= 0:
            return sample
        net_input = sample["net_input"]
        src_tokens = net_input["src_tokens"]  # B x S
        drop = torch.rand(src_tokens.size(0), device=src_tokens.device, generator=generator)
        drop = drop < self.cfg.p_uncond  # B
        net_input["src_tokens"], net_input["src_lengths"] = empty_sources(
            src_tokens, drop, self.src_dict.pad(), self.src_dict.eos(), self.cfg.left_pad_source
        )
        return sample

    @staticmethod
    def noise_generator(sample) -> torch.Generator:
        """The training noise's random stream: fairseq's per-update seed and the batch.

        fairseq reseeds torch with ``--seed`` + update number before each update; the
        sentence ids then tell the batches of one update apart. A batch draws the same
        masks whether it is one of ``--update-freq N`` micro-batches or one of N
        data-parallel workers' shares, so N workers train exactly like one process
        with ``--update-freq N`` (tested), and a resumed run redraws the same masks.
        """
        ids = sample["id"]  # B
        seed = torch.initial_seed() * 1_000_003 + int(ids.min()) * 1009 + ids.numel()
        device = sample["target"].device
        return torch.Generator(device=device).manual_seed(seed % 2**63)

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        generator = self.noise_generator(sample)
        sample = self.drop_sources(self.add_noise(sample, generator), generator)
        revise = self.second_pass(sample, update_num, generator)
        if revise is not None:
            sample["revise"] = revise
        return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)

    def second_pass(self, sample, update_num, generator):
        """The model's ``revise`` function for glancing and self-correction, or None.

        A sentence is rebuilt by self-correction with probability
        ``--self-correction``; the others get glancing when ``--glancing-ratio`` > 0,
        a share ``--glancing-full-mask`` of them from the whole target masked.
        Before ``--second-pass-from-update`` neither runs (plain CMLM training).
        All random draws come from the batch's noise ``generator``. A CTC model's
        ``revise`` reveals canvas positions instead (``ctc_glancing_input``).
        """
        cfg = self.cfg
        end = cfg.glancing_ratio if cfg.glancing_ratio_end is None else cfg.glancing_ratio_end
        ratio = glancing_ratio(cfg.glancing_ratio, end, cfg.glancing_anneal_updates, update_num)
        if ratio <= 0 and cfg.self_correction <= 0:
            return None
        if update_num < cfg.second_pass_from_update:  # the plain objective first
            return None
        if self.ctc_model:

            def revise_canvas(canvas, predicted, aligned, candidates):
                return ctc_glancing_input(canvas, predicted, aligned, candidates, ratio, generator)

            return revise_canvas
        target = sample["target"]  # B x T
        rows = torch.zeros(target.size(0), dtype=torch.bool, device=target.device)  # B
        remask = None
        if cfg.self_correction > 0:
            draw = torch.rand(target.size(0), device=target.device, generator=generator)
            rows = draw < cfg.self_correction  # B, rebuilt by self-correction
            remask = uniform_mask(target, self.mask_idx, self.special_ids, generator=generator)
        if ratio > 0 and cfg.glancing_full_mask > 0:  # drawn only when on: seeded runs unchanged
            draw = torch.rand(target.size(0), device=target.device, generator=generator)
            full = (draw < cfg.glancing_full_mask) & ~rows  # B, GLAT's all-masked first pass
            sample["prev_target"] = mask_whole_rows(
                sample["prev_target"], target, full, self.mask_idx, self.special_ids
            )

        def revise(prev, predicted):
            new, loss = prev, prev.eq(self.mask_idx)  # B x T each
            if ratio > 0:
                new, loss = glancing_input(prev, target, predicted, self.mask_idx, ratio,
                                           generator)  # fmt: skip
            if remask is not None:
                fixed, fixed_loss = self_correction_input(
                    prev, target, predicted, remask, self.mask_idx
                )
                new = torch.where(rows[:, None], fixed, new)
                loss = torch.where(rows[:, None], fixed_loss, loss)
            return new, loss

        return revise

    def valid_step(self, sample, model, criterion):
        loss, sample_size, logging_output = super().valid_step(
            self.add_noise(sample), model, criterion
        )
        for _ in range(self.cfg.mc_samples - 1):  # more noise draws, summed
            more = FairseqTask.valid_step(self, self.add_noise(sample), model, criterion)
            loss, sample_size = loss + more[0], sample_size + more[1]
            for key, value in more[2].items():
                if not key.startswith("_"):  # every count and sum; not BLEU statistics
                    logging_output[key] = logging_output.get(key, 0) + value
        return loss, sample_size, logging_output

    def get_batch_iterator(
        self,
        dataset,
        max_tokens=None,
        max_sentences=None,
        max_positions=None,
        *args,
        required_batch_size_multiple=1,
        disable_iterator_cache=False,
        **kwargs,
    ):
        """fairseq's iterator, but evaluation batches are never dropped.

        fairseq's main branch drops the last batch when its size is not a multiple of
        ``--required-batch-size-multiple`` (default 8), so fairseq-generate silently
        skips up to 7 test sentences. Splits other than ``train*`` (and inference
        data) are batched with a multiple of 1 so that every sentence is decoded.

        Raw text (``build_dataset_for_inference``) keeps one output per line: a source
        too long for the model is blanked (``blank_long_sources``), ``max_tokens`` is
        raised to the buffer's longest source so that one longer than ``max_tokens``
        is decoded (in a batch of its own) instead of failing the whole run, and
        the iterator is not cached (fairseq would keep every ``--buffer-size`` block
        of a ``fairseq-interactive`` stream in memory until the end).
        """
        split = next((k for k, v in self.datasets.items() if v is dataset), None)
        if split is None or not split.startswith("train"):
            required_batch_size_multiple = 1
        if hasattr(dataset, INFERENCE_FIRST_ID):
            disable_iterator_cache = True
            self.blank_long_sources(dataset, max_positions)
            if max_tokens is not None and len(dataset) > 0:
                max_tokens = max(max_tokens, int(dataset.src_sizes.max()))
        return super().get_batch_iterator(
            dataset,
            max_tokens,
            max_sentences,
            max_positions,
            *args,
            required_batch_size_multiple=required_batch_size_multiple,
            disable_iterator_cache=disable_iterator_cache,
            **kwargs,
        )

    def build_generator(self, models, args, **unused):
        """Mask-Predict or diffusion (``--decoding``); a CTC model's one-pass decoder."""
        if uses_ctc(models):
            return build_ctc_generator(
                self.target_dictionary, self.source_dictionary, models, args, self.cfg
            )
        return build_generator(
            self.target_dictionary, self.source_dictionary, models, args, self.cfg
        )
