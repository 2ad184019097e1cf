"""Weights-only checkpoint loading for fairseq checkpoints (torch >= 2.6).

torch.load defaults to ``weights_only=True`` since torch 2.6; fairseq's
``checkpoint_utils`` calls it without the flag, so a checkpoint loads only if
every non-tensor object in it is allow-listed. Two kinds of object occur in the
checkpoints fairseq itself writes, and only these are added here:

- fairseq's legacy ``args``: an ``argparse.Namespace``;
- numpy arrays of numbers in ``extra_state["metrics"]``: fairseq's ``--eval-bleu``
  logs the n-gram counts of the validation BLEU as ``np.ndarray`` (so every
  ``translation`` run with ``--eval-bleu`` needs them to resume or to decode). An
  array is rebuilt from ``numpy._core.multiarray._reconstruct``, ``np.ndarray``,
  ``np.dtype`` and its numeric dtype class; object arrays are not allowed (their
  dtype class is not listed), so nothing callable can come in through them.

Weights-only loading itself stays on: a checkpoint holding any other pickled
callable is still refused.
"""

import argparse

import numpy as np
import torch


def _numpy_globals() -> list:
    """What unpickling a numeric numpy array needs (numpy 1 and 2 name it differently)."""
    try:
        from numpy._core.multiarray import _reconstruct  # numpy >= 2
    except ImportError:  # pragma: no cover  (numpy 1.x)
        from numpy.core.multiarray import _reconstruct
    numeric = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
               np.uint32, np.uint64, np.float16, np.float32, np.float64]  # fmt: skip
    dtype_classes = [type(np.dtype(t)) for t in numeric]  # numpy >= 1.25: one class each
    return [_reconstruct, np.ndarray, np.dtype, *dict.fromkeys(dtype_classes)]


SAFE_GLOBALS = [argparse.Namespace, *_numpy_globals()]

if hasattr(torch.serialization, "add_safe_globals"):
    torch.serialization.add_safe_globals(SAFE_GLOBALS)
