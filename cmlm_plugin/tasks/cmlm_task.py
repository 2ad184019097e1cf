"""Task ``cmlm``: translation with a conditional masked language model.

Ghazvininejad et al. (2019). Loads a binarized language pair like fairseq's
``translation`` task, adds a dedicated ``<mask>`` symbol to the dictionaries (the
mask never reuses ``<unk>``), masks the training targets with the CMLM rule of
``cmlm_plugin.noise`` before each train/valid step, and builds the Mask-Predict
generator for ``fairseq-generate`` / ``fairseq-interactive`` / the hub interface.

Targets are used without their EOS: the decoder sees and predicts the n real
tokens, and the length head predicts n.
"""

from dataclasses import dataclass, field

from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from ..generator import MaskPredictGenerator
from ..noise import uniform_mask
from ..symbols import MASK_SYMBOL, mask_index

TASK_NAME = "cmlm"


@dataclass
class CMLMConfig(TranslationConfig):
    mask_ratio_min: float = field(
        default=0.0,
        metadata={
            "help": "lower bound on the fraction of target tokens masked in training "
            "(the count is uniform in ceil(min*n)..floor(max*n), at least 1; "
            "0 and 1 give the paper's uniform 1..n)"
        },
    )
    mask_ratio_max: float = field(
        default=1.0,
        metadata={"help": "upper bound on the fraction of target tokens masked in training"},
    )


@register_task(TASK_NAME, dataclass=CMLMConfig)
class CMLMPluginTask(TranslationTask):
    cfg: CMLMConfig

    def __init__(self, cfg: CMLMConfig, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        if not 0.0 <= cfg.mask_ratio_min <= cfg.mask_ratio_max <= 1.0:
            raise ValueError(
                "--mask-ratio-min/--mask-ratio-max must satisfy 0 <= min <= max <= 1, "
                f"got {cfg.mask_ratio_min} and {cfg.mask_ratio_max}"
            )
        if cfg.left_pad_target:
            raise ValueError("--task cmlm needs right-padded targets: drop --left-pad-target")
        self.mask_idx = mask_index(tgt_dict)
        self.special_ids = sorted({tgt_dict.pad(), tgt_dict.bos(), tgt_dict.eos(), self.mask_idx})

    @classmethod
    def load_dictionary(cls, filename):
        dictionary = super().load_dictionary(filename)
        dictionary.add_symbol(MASK_SYMBOL)
        return dictionary

    def add_noise(self, sample):
        """Drop the target's EOS and store the masked target as ``prev_target``."""
        target = sample["target"]  # B x T, right-padded, ends with EOS
        target = target.masked_fill(target.eq(self.tgt_dict.eos()), self.tgt_dict.pad())
        sample["target"] = target
        sample["prev_target"] = uniform_mask(
            target,
            self.mask_idx,
            self.special_ids,
            self.cfg.mask_ratio_min,
            self.cfg.mask_ratio_max,
        )
        return sample

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        return super().train_step(
            self.add_noise(sample), model, criterion, optimizer, update_num, ignore_grad
        )

    def valid_step(self, sample, model, criterion):
        return super().valid_step(self.add_noise(sample), model, criterion)

    def get_batch_iterator(self, dataset, *args, required_batch_size_multiple=1, **kwargs):
        """fairseq's iterator, but evaluation batches are never dropped.

        fairseq's main branch drops the last batch when its size is not a multiple of
        ``--required-batch-size-multiple`` (default 8), so fairseq-generate silently
        skips up to 7 test sentences. Splits other than ``train*`` (and inference
        data) are batched with a multiple of 1 so that every sentence is decoded.
        """
        split = next((k for k, v in self.datasets.items() if v is dataset), None)
        if split is None or not split.startswith("train"):
            required_batch_size_multiple = 1
        return super().get_batch_iterator(
            dataset, *args, required_batch_size_multiple=required_batch_size_multiple, **kwargs
        )

    def build_generator(self, models, args, **unused):
        return MaskPredictGenerator.from_args(self.target_dictionary, models, args)
