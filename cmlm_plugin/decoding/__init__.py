"""Pure-torch decoding core: no fairseq import anywhere below this package.

The glue in ``cmlm_plugin.generator`` turns a fairseq model into a ``step``
function and hands it to these functions; they can be tested with hand-built
log-probabilities alone.
"""

from .confidence import select_lowest
from .diffusion import DiffusionResult, diffusion_sample, initial_tokens
from .length_beam import length_candidates, select_best
from .mask_predict import MaskPredictResult, mask_predict
from .sampling import choose_tokens, confidence, guided_logits
from .schedules import linear_remask_count, transfer_counts

__all__ = [
    "DiffusionResult",
    "MaskPredictResult",
    "choose_tokens",
    "confidence",
    "diffusion_sample",
    "guided_logits",
    "initial_tokens",
    "length_candidates",
    "linear_remask_count",
    "mask_predict",
    "select_best",
    "select_lowest",
    "transfer_counts",
]
