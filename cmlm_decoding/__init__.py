"""Pure-torch parallel decoding for conditional masked language models.

Mask-Predict (Ghazvininejad et al., EMNLP 2019) and block-wise masked-diffusion
sampling (LLaDA, Nie et al., 2025) as functions of a ``step`` callable
(``contract.Step``): no fairseq import anywhere in this package, so other projects
can use it and its tests need hand-built scores only. ``cmlm_plugin`` turns a fairseq
model into a step and calls these functions.
"""

from .calibration import fit_temperature, tempered_nll
from .confidence import select_lowest, select_lowest_by_region, spread_counts
from .contract import DecodeResult, OptionError, Step, initial_tokens
from .diffusion import DiffusionOptions, diffusion_sample
from .length_beam import length_candidates, select_best
from .mask_predict import MaskPredictOptions, mask_predict
from .pseudo_likelihood import pseudo_log_likelihood
from .repeats import collapse_repeats, repeat_positions
from .sampling import choose_tokens, confidence, guided_logits
from .schedules import (
    adaptive_pass_budget,
    linear_remask_count,
    remask_count_per_row,
    transfer_counts,
)

__all__ = [
    "DecodeResult",
    "DiffusionOptions",
    "MaskPredictOptions",
    "OptionError",
    "Step",
    "adaptive_pass_budget",
    "choose_tokens",
    "collapse_repeats",
    "confidence",
    "diffusion_sample",
    "fit_temperature",
    "guided_logits",
    "initial_tokens",
    "length_candidates",
    "linear_remask_count",
    "mask_predict",
    "pseudo_log_likelihood",
    "remask_count_per_row",
    "repeat_positions",
    "select_best",
    "select_lowest",
    "select_lowest_by_region",
    "spread_counts",
    "tempered_nll",
    "transfer_counts",
]
