"""Loading a fairseq autoregressive encoder-decoder checkpoint beside a CMLM.

Two options of task ``cmlm`` take the checkpoint of an autoregressive model trained on
the same binarized data (e.g. ``fairseq-train DATA_BIN --task translation --arch
transformer``, the distillation teacher): ``--rerank-with`` scores the length candidates
with it (``generation/rerank.py``) and ``--init-from-ar`` copies its weights into a new
CMLM before training (``training/ar_init.py``). ``load_autoregressive`` reads it with
fairseq's ``checkpoint_utils`` (weights-only loading, ``checkpoints/safety.py``), refuses
non-autoregressive models and other language directions, checks that its dictionaries
are ours (our ``<mask>``, which ``--task cmlm`` appends, aside: symbol by symbol when the
teacher's ``dict.*.txt`` still exists) and builds the model in eval mode on the CPU.
"""

import copy
import os
from typing import Optional

from fairseq import checkpoint_utils
from fairseq.data import Dictionary
from fairseq.data.data_utils import infer_language_pair
from fairseq.models import (
    ARCH_MODEL_REGISTRY,
    MODEL_REGISTRY,
    FairseqEncoderDecoderModel,
    FairseqIncrementalDecoder,
)
from fairseq.models import build_model as fairseq_build_model
from fairseq.models.nat import FairseqNATModel
from fairseq.tasks.translation import TranslationTask

from ..errors import CMLMPluginError
from ..symbols import MASK_SYMBOL
from . import safety  # noqa: F401  (the weights-only allow-list)

FIX = (
    "give the checkpoint of an autoregressive model trained on the same binarized data, "
    "e.g. fairseq-train DATA_BIN --task translation --arch transformer"
)


def _field(cfg, name: str):
    """``cfg.name`` of an argparse Namespace or an omegaconf config, None when absent."""
    try:
        return getattr(cfg, name, None)
    except Exception:  # an omegaconf struct without the key
        return None


def _trim(dictionary: Dictionary, size: int) -> Dictionary:
    """A copy of ``dictionary`` holding its first ``size`` symbols."""
    trimmed = copy.copy(dictionary)
    trimmed.symbols = dictionary.symbols[:size]
    trimmed.count = dictionary.count[:size]
    trimmed.indices = {symbol: i for i, symbol in enumerate(trimmed.symbols)}
    return trimmed


def _embedding_rows(model_state: dict, prefix: str) -> Optional[int]:
    for key in (f"{prefix}.output_projection.weight", f"{prefix}.embed_tokens.weight"):
        if key in model_state:
            return int(model_state[key].size(0))
    return None


def _matching_dictionary(flag, who, path, side, ours: Dictionary, rows, theirs_file) -> Dictionary:
    """The ``side`` dictionary of ``who`` (the reranker, the teacher): ours, checked.

    Ours less a trailing ``<mask>``, where --task cmlm appended one.

    ``rows`` is the size of the checkpoint's embedding matrix (None if unknown);
    ``theirs_file``, its own ``dict.*.txt`` when it still exists, is compared
    symbol by symbol.
    """
    sizes, ours_text = [len(ours)], f"{len(ours)}"
    if ours.symbols[-1] == MASK_SYMBOL:  # --task cmlm appended it; an AR task did not
        sizes.append(len(ours) - 1)
        ours_text += f" ({len(ours) - 1} without the <mask> that --task cmlm adds)"
    theirs = None
    if theirs_file is not None and os.path.isfile(theirs_file):
        theirs = Dictionary.load(theirs_file)
    size = len(theirs) if theirs is not None else rows
    if size is None:
        size = sizes[-1]
    differs = size not in sizes or (rows is not None and rows != size)
    where = ""
    if theirs is not None and not differs:
        pairs = enumerate(zip(theirs.symbols, ours.symbols))
        i = next((i for i, (a, b) in pairs if a != b), None)  # the first differing symbol
        if i is not None:
            differs = True
            where = f"; symbol {i} is {theirs.symbols[i]!r} there and {ours.symbols[i]!r} here"
    if differs:
        shown = rows if rows is not None and rows != size else size
        raise CMLMPluginError(
            f"{flag} {path}: {who}'s {side} dictionary has {shown} symbols but ours "
            f"has {ours_text}{where}: {FIX}"
        )
    return _trim(ours, size)


def load_autoregressive(
    path: str, src_dict: Dictionary, tgt_dict: Dictionary, languages=None, *, flag: str, who: str
):
    """The autoregressive model of checkpoint ``path``, on the CPU in eval mode, checked.

    ``languages``: our ``(source, target)``; a model of another direction is refused.
    ``flag`` and ``who`` (``"--rerank-with"``, ``"the reranker"``) name it in the errors.
    """
    if not os.path.isfile(path):
        raise CMLMPluginError(f"{flag} {path}: no such checkpoint file: {FIX}")
    state = checkpoint_utils.load_checkpoint_to_cpu(path)  # unreadable: errors name the file
    cfg = state.get("cfg")
    if cfg is None or "model" not in state:
        raise CMLMPluginError(f"{flag} {path}: not a fairseq checkpoint (no cfg/model): {FIX}")
    model_cfg, task_cfg = cfg["model"], cfg["task"]
    arch = _field(model_cfg, "_name") or _field(model_cfg, "arch")
    task_name = _field(task_cfg, "_name")
    model_class = ARCH_MODEL_REGISTRY.get(arch) or MODEL_REGISTRY.get(arch)
    autoregressive = (
        model_class is not None
        and issubclass(model_class, FairseqEncoderDecoderModel)
        and not issubclass(model_class, FairseqNATModel)
        and not hasattr(model_class, "predict_length")  # ours: non-autoregressive
        and task_name not in ("cmlm", "translation_lev")
    )
    if not autoregressive:
        raise CMLMPluginError(
            f"{flag} {path}: the checkpoint is --task {task_name} --arch {arch}, not an "
            f"autoregressive encoder-decoder model: {FIX}"
        )
    data = str(_field(task_cfg, "data") or "").split(os.pathsep)[0]
    source_lang, target_lang = _field(task_cfg, "source_lang"), _field(task_cfg, "target_lang")
    if (source_lang is None or target_lang is None) and os.path.isdir(data):
        source_lang, target_lang = infer_language_pair(data)  # as its fairseq-train did
    if languages and None not in (*languages, source_lang, target_lang):
        if tuple(languages) != (source_lang, target_lang):
            raise CMLMPluginError(
                f"{flag} {path}: {who} translates {source_lang}-{target_lang} but we "
                f"translate {languages[0]}-{languages[1]}: {FIX}, in the same direction"
            )

    def own_file(lang):
        return os.path.join(data, f"dict.{lang}.txt") if data and lang else None

    weights = state["model"]
    theirs_tgt = _matching_dictionary(
        flag,
        who,
        path,
        "target",
        tgt_dict,
        _embedding_rows(weights, "decoder"),
        own_file(target_lang),
    )
    theirs_src = _matching_dictionary(
        flag,
        who,
        path,
        "source",
        src_dict,
        _embedding_rows(weights, "encoder"),
        own_file(source_lang),
    )
    task = TranslationTask(task_cfg, theirs_src, theirs_tgt)
    try:
        model = fairseq_build_model(model_cfg, task)
        model.load_state_dict(weights, strict=True, model_cfg=model_cfg)
    except RuntimeError as error:  # e.g. size mismatch: another model than its config says
        first = (str(error).strip().splitlines() or [""])[0][:160]
        raise CMLMPluginError(f"{flag} {path}: cannot load the model ({first}): {FIX}") from error
    if not isinstance(model.decoder, FairseqIncrementalDecoder):
        raise CMLMPluginError(
            f"{flag} {path}: its decoder ({type(model.decoder).__name__}) is not an "
            f"autoregressive (incremental) decoder: {FIX}"
        )
    return model.eval()
