"""``cmlm-average-checkpoints``: average the weights of several fairseq checkpoints.

    cmlm-average-checkpoints --inputs DIR_OR_FILES... --output OUT.pt
        [--num-last N | --num-best N | --num-update-checkpoints N] [--best-metric loss] [--maximize]

Checkpoint averaging as in Vaswani et al. (2017, *Attention Is All You Need*: the last 5
or 20 checkpoints) and in the Mask-Predict paper (Ghazvininejad et al., 2019), which
averages the 5 best checkpoints by validation loss. fairseq's own
``scripts/average_checkpoints.py`` is not part of its wheel; this is the plugin's version.

Inputs: explicit checkpoint files (averaged in the given order), or one folder with a
selection flag:

* ``--num-last N``: the N epoch checkpoints ``checkpoint<EPOCH>.pt`` of the highest epochs;
* ``--num-update-checkpoints N``: the N update checkpoints ``checkpoint_<EPOCH>_<UPDATE>.pt``
  of the highest update numbers (written with ``--save-interval-updates``);
* ``--num-best N``: the N best by ``--best-metric`` (default ``loss``; ``--maximize`` when
  higher is better), read from the names ``checkpoint.best_<METRIC>_<VALUE>.pt`` that
  ``fairseq-train --keep-best-checkpoints`` writes. fairseq writes the value with three
  decimals followed by random tie-breaking digits; the number as written is ranked, as
  fairseq ranks it. Without such files, the epoch and update checkpoints are ranked by the
  validation value each stores in ``extra_state["val_loss"]`` (fairseq stores there the
  value of its ``--best-checkpoint-metric``, whatever the metric; ``checkpoint_last.pt``
  and ``checkpoint_best.pt`` are left out: they are copies of those).

Every floating-point tensor of ``model`` is summed in float64 and divided by the count,
then stored in its own dtype: for float32, float16 and bfloat16 weights the float64 sum is
exact, so averaging copies of one checkpoint gives it back bit for bit. Other tensors
(integer buffers) must be equal in all inputs, and every input must hold the same keys with
the same shapes and dtypes. Weights stored once under several names (fairseq's shared
embeddings) are stored once in the output too.

The output keeps every other field (``cfg``, ``args``, ``extra_state``, ...) of the first
input -- the newest checkpoint for a folder selection (for ``--num-best``, the one with the
most updates) -- without ``last_optimizer_state``, which cannot be averaged: the file is
smaller, and training restarted from it builds a fresh optimizer. The output is written to
``OUT.pt.tmp`` and renamed, so a crash never leaves half a file, and is never one of the
inputs. Checkpoints load weights-only (``cmlm_plugin.checkpoint_safety``).
"""

import argparse
import os
import re
from collections import OrderedDict
from collections.abc import Mapping

import torch

from .. import checkpoint_safety  # noqa: F401  (allow-lists argparse.Namespace, nothing else)
from ..checkpoint_errors import read_error
from ..errors import CMLMPluginError, install_excepthook

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


# -- loading -----------------------------------------------------------------------------


def load_checkpoint(path, mmap=False) -> dict:
    """``torch.load`` weights-only onto the CPU; unreadable files raise one-line errors."""
    try:
        if mmap:  # tensors are read only when touched: cheap for reading a few fields
            try:
                state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError as exc:
                if "mmap" not in str(exc):
                    raise
                state = torch.load(path, map_location="cpu", weights_only=True)
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise read_error(path, exc) from exc
    if not isinstance(state, Mapping) or not isinstance(state.get("model"), Mapping):
        raise CMLMPluginError(
            f"{path} is not a fairseq checkpoint: it holds no 'model' state dict "
            "(give checkpoints written by fairseq-train)"
        )
    return state


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


def num_updates(state) -> int:
    history = state.get("optimizer_history")
    if isinstance(history, list) and history and isinstance(history[-1], Mapping):
        return int(history[-1].get("num_updates") or 0)
    return 0


# -- selection ---------------------------------------------------------------------------


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


# -- averaging ---------------------------------------------------------------------------


def _view(tensor):
    """Identifies the memory a tensor views, to find names for one shared tensor."""
    if tensor.numel() == 0:
        return None
    return (
        tensor.untyped_storage().data_ptr(),
        tensor.storage_offset(),
        tuple(tensor.shape),
        tensor.stride(),
        tensor.dtype,
    )


def _describe(value) -> str:
    if torch.is_tensor(value):
        return f"{str(value.dtype).replace('torch.', '')} {tuple(value.shape)}"
    return type(value).__name__


class ModelAverage:
    """Running float64 sums of ``model`` state dicts added one at a time."""

    def __init__(self):
        self.count = 0

    def add(self, path, model: Mapping) -> None:
        if self.count == 0:
            self._start(path, model)
        else:
            self._check(path, model)
            self._accumulate(model)
        self.count += 1

    def _start(self, path, model):
        self.first = path
        self.keys = list(model)
        self.spec = {
            k: (_describe(v), torch.is_tensor(v) and v.is_floating_point())
            for k, v in model.items()
        }
        self.dtypes = {k: v.dtype for k, v in model.items() if torch.is_tensor(v)}
        self.fixed = {}  # the first input's value of every key that is not averaged
        self.members = OrderedDict()  # representative key -> names of the same tensor
        self.sums = {}
        by_view = {}
        for key, value in model.items():
            if not self.spec[key][1]:
                self.fixed[key] = value
                continue
            view = _view(value)
            rep = by_view.setdefault(view, key) if view is not None else key
            self.members.setdefault(rep, []).append(key)
            if rep == key:
                self.sums[key] = value.to(torch.float64, copy=True)

    def _check(self, path, model):
        for key in self.keys:
            if key not in model:
                raise CMLMPluginError(
                    f"checkpoints differ: key {key} is in {self.first} but not in {path}: "
                    "average checkpoints of one model"
                )
        for key in model:
            if key not in self.spec:
                raise CMLMPluginError(
                    f"checkpoints differ: key {key} is in {path} but not in {self.first}: "
                    "average checkpoints of one model"
                )
        for key in self.keys:
            value, (spec, averaged) = model[key], self.spec[key]
            if _describe(value) != spec:
                raise CMLMPluginError(
                    f"checkpoints differ: key {key} is {spec} in {self.first} but "
                    f"{_describe(value)} in {path}: average checkpoints of one model"
                )
            if averaged:
                continue
            first = self.fixed[key]
            same = torch.equal(value, first) if torch.is_tensor(value) else value == first
            if not same:
                raise CMLMPluginError(
                    f"checkpoints differ: key {key} ({spec}, not floating point) has other "
                    f"values in {path} than in {self.first}; only floating-point tensors are "
                    "averaged, others must be equal: average checkpoints of one training run"
                )

    def _accumulate(self, model):
        for rep, keys in list(self.members.items()):
            if len(keys) == 1:
                continue
            parts = OrderedDict()  # split names that are separate tensors in this input
            for key in keys:
                parts.setdefault(_view(model[key]) or key, []).append(key)
            if len(parts) > 1:
                first, *rest = parts.values()
                self.members[rep] = first
                for part in rest:
                    self.members[part[0]] = part
                    self.sums[part[0]] = self.sums[rep].clone()
        for rep, total in self.sums.items():
            total.add_(model[rep])  # the input is upcast to float64 (exact), then added

    def result(self) -> OrderedDict:
        """The averaged state dict: means in each key's dtype, other values from the first."""
        means = {}
        for rep, keys in self.members.items():
            mean = torch.div(self.sums[rep], self.count).to(self.dtypes[rep])
            means.update(dict.fromkeys(keys, mean))  # names of one tensor stay one tensor
        return OrderedDict((k, self.fixed[k] if k in self.fixed else means[k]) for k in self.keys)


def average(paths, prefer_newest=False):
    """The averaged checkpoint of ``paths`` and whether an optimizer state was dropped.

    Fields other than ``model`` come from the first path, or with ``prefer_newest`` from
    the one with the most updates (the first of those tied).
    """
    model = ModelAverage()
    template, newest, dropped = None, -1, False
    for path in paths:
        state = load_checkpoint(path)
        model.add(path, state["model"])
        dropped = dropped or state.get("last_optimizer_state") is not None
        updates = num_updates(state)
        if template is None or (prefer_newest and updates > newest):
            template = {
                k: v for k, v in state.items() if k not in ("model", "last_optimizer_state")
            }
            newest = updates
        del state
    out = {}
    for key in template:  # keep the checkpoint's own field order, model in its place
        out[key] = template[key]
    out["model"] = model.result()
    return out, dropped


def save_atomically(state, output) -> None:
    """``torch.save`` to ``OUTPUT.tmp``, flushed to disk, then renamed onto ``output``."""
    tmp = output + ".tmp"
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, output)
    except OSError as exc:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise CMLMPluginError(f"cannot write {output}: {exc.strerror or exc}") from exc
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def check_output(output, paths) -> None:
    if os.path.isdir(output):
        example = os.path.join(output, "checkpoint_avg.pt")
        raise CMLMPluginError(f"--output {output} is a folder: give a file name, e.g. {example}")
    real = os.path.realpath(output)
    for path in paths:
        if os.path.realpath(path) == real or (
            os.path.exists(output) and os.path.samefile(path, output)
        ):
            raise CMLMPluginError(
                f"--output {output} is one of the inputs ({path}): write the average to "
                "another file, e.g. checkpoint_avg.pt"
            )


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cmlm-average-checkpoints",
        description="Average the model weights of fairseq checkpoints (float64 sums; the "
        "output keeps the first/newest input's other fields, without optimizer state).",
    )
    p.add_argument(
        "--inputs",
        nargs="+",
        required=True,
        metavar="DIR_OR_FILE",
        help="checkpoint files, or one folder with --num-last, --num-best or "
        "--num-update-checkpoints",
    )
    p.add_argument("--output", required=True, metavar="OUT.pt", help="the averaged checkpoint")
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--num-last",
        type=positive,
        metavar="N",
        help="the last N epoch checkpoints checkpoint<EPOCH>.pt",
    )
    which.add_argument(
        "--num-best",
        type=positive,
        metavar="N",
        help="the N best by --best-metric (checkpoint.best_<METRIC>_<VALUE>.pt, else the "
        "validation value stored in each epoch/update checkpoint)",
    )
    which.add_argument(
        "--num-update-checkpoints",
        type=positive,
        metavar="N",
        help="the last N update checkpoints checkpoint_<EPOCH>_<UPDATE>.pt",
    )
    p.add_argument(
        "--best-metric",
        default=None,
        metavar="METRIC",
        help="fairseq's --best-checkpoint-metric of the run (default: loss)",
    )
    p.add_argument(
        "--maximize", action="store_true", help="higher --best-metric is better (e.g. bleu)"
    )
    return p


def main(argv=None) -> None:
    install_excepthook()  # the plugin's errors print as one line (cmlm_plugin/errors.py)
    args = parser().parse_args(argv)
    selected = select_inputs(args)
    paths = [path for path, _ in selected]
    output = args.output
    check_output(output, paths)
    print(f"averaging {len(paths)} checkpoint(s):")
    for path, note in selected:
        print(f"  {path}" + (f"  ({note})" if note else ""), flush=True)
    state, dropped = average(paths, prefer_newest=bool(args.num_best))
    parent = os.path.dirname(os.path.abspath(output))
    os.makedirs(parent, exist_ok=True)
    save_atomically(state, output)
    if dropped:
        print(
            "dropped last_optimizer_state (optimizer state is not averaged; training "
            "restarted from the output builds a fresh optimizer)"
        )
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
