"""Pure-torch decoding core: no fairseq import anywhere below this package.

The glue in ``cmlm_plugin.generator`` turns a fairseq model into a ``step``
function and hands it to these functions; they can be tested with hand-built
log-probabilities alone.
"""

from .confidence import select_lowest
from .length_beam import length_candidates, select_best
from .mask_predict import MaskPredictResult, mask_predict
from .schedules import linear_remask_count

__all__ = [
    "MaskPredictResult",
    "length_candidates",
    "linear_remask_count",
    "mask_predict",
    "select_best",
    "select_lowest",
]
