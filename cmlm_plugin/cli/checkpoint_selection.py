"""Which checkpoints ``cmlm-average-checkpoints`` averages: files, or a folder's selection.

* ``--num-last N``: the N epoch checkpoints ``checkpoint<EPOCH>.pt`` of the highest epochs;
* ``--num-update-checkpoints N``: the N update checkpoints ``checkpoint_<EPOCH>_<UPDATE>.pt``
  of the highest update numbers;
* ``--num-best N``: the N best by ``--best-metric`` from the names
  ``checkpoint.best_<METRIC>_<VALUE>.pt`` (ranked by the number as written, as fairseq ranks
  it), else the epoch and update checkpoints ranked by the value each stores in
  ``extra_state["val_loss"]``, refusing checkpoints trained to rank by another metric.

Explicit files are taken in the given order, each once. Every refusal is a one-line
``CMLMPluginError`` naming the folder, the file pattern and the flag to change.
"""

import argparse
import os
import re
from collections.abc import Mapping

from ..errors import CMLMPluginError
from .checkpoint_averaging import load_checkpoint

EPOCH_FILE = re.compile(r"checkpoint(\d+)\.pt")
UPDATE_FILE = re.compile(r"checkpoint_(\d+)_(\d+)\.pt")
ANY_BEST_FILE = re.compile(r"checkpoint\.best_(.+)_(-?\d+(?:\.\d*)?)\.pt")
SHOWN = 6  # file names listed in an error message


def best_file_pattern(metric: str):
    """The names ``fairseq-train --keep-best-checkpoints`` writes for ``metric``."""
    return re.compile(r"checkpoint\.best_" + re.escape(metric) + r"_(-?\d+(?:\.\d*)?)\.pt")


def _names(paths) -> str:
    names = [os.path.basename(p) for p in paths]
    more = f", ... ({len(names) - SHOWN} more)" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more


def _matching(folder, pattern):
    try:
        names = os.listdir(folder)
    except OSError as exc:
        raise CMLMPluginError(f"--inputs: cannot list {folder}: {exc.strerror or exc}") from exc
    return [(m, os.path.join(folder, name)) for name in names if (m := pattern.fullmatch(name))]


def _take(found, n, flag, folder, what):
    """The first ``n`` of ``found`` (already ordered), or the error saying how many there are."""
    if len(found) < n:
        paths = [path for path, _ in found]
        raise CMLMPluginError(
            f"{flag} {n} needs {n} {what} but {folder} has only {len(found)} "
            f"({_names(paths)}): use {flag} {len(found)} or fewer"
        )
    return found[:n]


def _checkpoint_cfg(state) -> Mapping:
    """The ``checkpoint`` section of the training configuration stored in ``state``."""
    cfg = state.get("cfg")
    if isinstance(cfg, Mapping) and isinstance(cfg.get("checkpoint"), Mapping):
        return cfg["checkpoint"]
    if isinstance(state.get("args"), argparse.Namespace):  # legacy checkpoints
        return vars(state["args"])
    return {}


def check_metric(path, state, metric, maximize) -> None:
    """Refuse ranking by ``metric`` when ``state`` was trained to rank by another."""
    stored = _checkpoint_cfg(state)
    trained_metric = stored.get("best_checkpoint_metric")
    if trained_metric is not None and trained_metric != metric:
        raise CMLMPluginError(
            f"--num-best: {path} was trained with --best-checkpoint-metric {trained_metric}, "
            f"so its validation value is not {metric}: pass --best-metric {trained_metric}"
        )
    trained_max = stored.get("maximize_best_checkpoint_metric")
    if trained_max is not None and bool(trained_max) != maximize:
        fix = "pass --maximize" if trained_max else "drop --maximize"
        how = "higher" if trained_max else "lower"
        raise CMLMPluginError(
            f"--num-best: {path} was trained to rank {metric} {how} is better "
            f"(--maximize-best-checkpoint-metric {bool(trained_max)}): {fix}"
        )


def select_last_epochs(folder, n):
    found = [
        (path, f"epoch {m.group(1)}")
        for m, path in sorted(
            _matching(folder, EPOCH_FILE), key=lambda mp: int(mp[0].group(1)), reverse=True
        )
    ]
    if not found:
        raise CMLMPluginError(
            f"--num-last {n}: no epoch checkpoints in {folder} (files named "
            "checkpoint<EPOCH>.pt; fairseq-train writes one at each epoch's end unless "
            "--no-epoch-checkpoints)"
        )
    return _take(found, n, "--num-last", folder, "epoch checkpoints (checkpoint<EPOCH>.pt)")


def select_last_updates(folder, n):
    matches = sorted(
        _matching(folder, UPDATE_FILE),
        key=lambda mp: (int(mp[0].group(2)), int(mp[0].group(1))),
        reverse=True,
    )
    found = [(path, f"epoch {m.group(1)}, update {m.group(2)}") for m, path in matches]
    if not found:
        raise CMLMPluginError(
            f"--num-update-checkpoints {n}: no update checkpoints in {folder} (files named "
            "checkpoint_<EPOCH>_<UPDATE>.pt; fairseq-train writes them with "
            "--save-interval-updates N)"
        )
    return _take(
        found,
        n,
        "--num-update-checkpoints",
        folder,
        "update checkpoints (checkpoint_<EPOCH>_<UPDATE>.pt)",
    )


def _shown_value(text: str) -> str:
    """The metric in a best-checkpoint name, without fairseq's tie-breaking digits."""
    m = re.fullmatch(r"(-?\d+\.\d{3})\d*", text)
    return m.group(1) if m else text


def select_best(folder, n, metric, maximize):
    named = _matching(folder, best_file_pattern(metric))
    if named:
        check_metric(named[0][1], load_checkpoint(named[0][1], mmap=True), metric, maximize)
        named.sort(key=lambda mp: float(mp[0].group(1)), reverse=maximize)
        found = [(path, f"{metric} {_shown_value(m.group(1))}") for m, path in named]
        return _take(
            found, n, "--num-best", folder, f"checkpoints named checkpoint.best_{metric}_*.pt"
        )
    others = sorted({m.group(1) for m, _ in _matching(folder, ANY_BEST_FILE)})
    if others:
        raise CMLMPluginError(
            f"--num-best {n}: no files named checkpoint.best_{metric}_<VALUE>.pt in {folder}, "
            f"but there are best checkpoints by {', '.join(others)}: pass "
            f"--best-metric {others[0]}"
        )
    # No named best files: rank the epoch and update checkpoints by their stored value.
    candidates = [
        path for _, path in _matching(folder, EPOCH_FILE) + _matching(folder, UPDATE_FILE)
    ]
    scored = []
    for path in sorted(candidates):
        state = load_checkpoint(path, mmap=True)
        extra = state.get("extra_state")
        value = extra.get("val_loss") if isinstance(extra, Mapping) else None
        if value is not None:
            check_metric(path, state, metric, maximize)
            value = float(value)
            if value == value:  # NaN ranks nowhere
                scored.append((value, path))
        del state
    if not scored:
        none = f" ({_names(sorted(candidates))} store none)" if candidates else ""
        raise CMLMPluginError(
            f"--num-best {n}: no checkpoints to rank by {metric} in {folder}: no files named "
            f"checkpoint.best_{metric}_<VALUE>.pt (fairseq-train --keep-best-checkpoints N "
            "writes them) and no epoch or update checkpoint (checkpoint<EPOCH>.pt, "
            f"checkpoint_<EPOCH>_<UPDATE>.pt) storing a validation value{none}"
        )
    scored.sort(key=lambda vp: vp[0], reverse=maximize)
    found = [(path, f"stored {metric} {value:.4f}") for value, path in scored]
    return _take(
        found,
        n,
        "--num-best",
        folder,
        f"epoch or update checkpoints storing a validation {metric}",
    )


def select_inputs(args):
    """``[(path, note)]`` to average, first the one whose other fields the output keeps."""
    folders = [p for p in args.inputs if os.path.isdir(p)]
    missing = [p for p in args.inputs if not os.path.exists(p)]
    if missing:
        raise CMLMPluginError(f"--inputs: {missing[0]} does not exist")
    flag = next(
        (
            f"--{name.replace('_', '-')} {getattr(args, name)}"
            for name in ("num_last", "num_best", "num_update_checkpoints")
            if getattr(args, name)
        ),
        None,
    )
    if not args.num_best and (args.best_metric is not None or args.maximize):
        raise CMLMPluginError("--best-metric and --maximize apply only to --num-best")
    if folders:
        if len(args.inputs) > 1:
            raise CMLMPluginError(
                f"--inputs: give one folder (with {flag or '--num-last N'}) or only files, "
                f"not {len(args.inputs)} paths with the folder {folders[0]}"
            )
        if flag is None:
            raise CMLMPluginError(
                f"--inputs {folders[0]} is a folder: choose its checkpoints with --num-last N, "
                "--num-best N or --num-update-checkpoints N"
            )
        folder = folders[0]
        if args.num_last:
            return select_last_epochs(folder, args.num_last)
        if args.num_update_checkpoints:
            return select_last_updates(folder, args.num_update_checkpoints)
        return select_best(folder, args.num_best, args.best_metric or "loss", args.maximize)
    if flag is not None:
        raise CMLMPluginError(
            f"{flag} selects checkpoints from a folder: give --inputs FOLDER, or list the "
            "files to average without it"
        )
    seen = {}
    for path in args.inputs:
        real = os.path.realpath(path)
        if real in seen:
            raise CMLMPluginError(
                f"--inputs: {path} is given twice ({seen[real]}): each checkpoint counts once"
            )
        seen[real] = path
    return [(path, "") for path in args.inputs]
