"""Checkpoint errors that name the file: unreadable, refused, or not fitting the data.

fairseq reads checkpoints with ``checkpoint_utils.load_checkpoint_to_cpu`` (training
resume, ``--restore-file``, every decoding command) and builds models from them with
``load_model_ensemble_and_task``. A truncated file then fails deep inside torch's
zip reader with ``OSError: [Errno 22] Invalid argument``, and a model of another
task fails with a page of ``size mismatch`` lines. This module wraps the two
functions (behaviour unchanged on success) so that such failures become one
``CMLMPluginError`` naming the checkpoint file and the fix; the original
exception stays chained (``CMLM_PLUGIN_TRACEBACK=1`` shows it).
"""

import functools
import pickle
import re

from fairseq import checkpoint_utils

from ..errors import CMLMPluginError


def read_error(path, exc: BaseException) -> CMLMPluginError:
    """The error for a checkpoint file that torch cannot load."""
    first = (str(exc).strip().splitlines() or [""])[0][:160]
    if isinstance(exc, pickle.UnpicklingError) and "weights only" in str(exc).lower():
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(exc))
        what = found.group(1) if found else "an object torch does not allow"
        return CMLMPluginError(
            f"checkpoint {path} holds a pickled {what}, outside the weights-only "
            "allow-list; it is refused because unpickling it could run code: load only "
            "checkpoints you trust, saved by fairseq-train"
        )
    return CMLMPluginError(
        f"cannot read checkpoint {path}: the file is truncated or corrupt "
        f"({type(exc).__name__}: {first}); point to an intact checkpoint "
        "(checkpoint_best.pt or an epoch checkpoint)"
    )


def _wrap_reader(load):
    @functools.wraps(load)
    def load_checkpoint_to_cpu(path, *args, **kwargs):
        try:
            return load(path, *args, **kwargs)
        except CMLMPluginError:
            raise
        except Exception as exc:
            raise read_error(path, exc) from exc

    load_checkpoint_to_cpu._cmlm_plugin = True
    return load_checkpoint_to_cpu


def _wrap_builder(load):
    @functools.wraps(load)
    def load_model_ensemble_and_task(filenames, *args, **kwargs):
        try:
            return load(filenames, *args, **kwargs)
        except CMLMPluginError as exc:
            names = ", ".join(str(f) for f in filenames)
            if names in str(exc):
                raise
            raise CMLMPluginError(f"checkpoint {names}: {exc}") from exc

    load_model_ensemble_and_task._cmlm_plugin = True
    return load_model_ensemble_and_task


def install() -> None:
    """Wrap fairseq's checkpoint readers once (idempotent)."""
    if not getattr(checkpoint_utils.load_checkpoint_to_cpu, "_cmlm_plugin", False):
        checkpoint_utils.load_checkpoint_to_cpu = _wrap_reader(
            checkpoint_utils.load_checkpoint_to_cpu
        )
    if not getattr(checkpoint_utils.load_model_ensemble_and_task, "_cmlm_plugin", False):
        checkpoint_utils.load_model_ensemble_and_task = _wrap_builder(
            checkpoint_utils.load_model_ensemble_and_task
        )
