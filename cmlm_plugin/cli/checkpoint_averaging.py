"""Loading fairseq checkpoints weights-only, and the float64 average of their model weights.

Every floating-point tensor of ``model`` is summed in float64 and divided by the count,
then stored in its own dtype: for float32, float16 and bfloat16 weights the float64 sum is
exact, so averaging copies of one checkpoint gives it back bit for bit. Other tensors
(integer buffers) must be equal in all inputs, and every input must hold the same keys with
the same shapes and dtypes. Weights stored once under several names (fairseq's shared
embeddings) are stored once in the output too. The output keeps every other field of one
input (the first, or the one with the most updates) without ``last_optimizer_state``.
Used by ``cmlm-average-checkpoints`` (``cli/average.py``).
"""

from collections import OrderedDict
from collections.abc import Mapping

import torch

from ..checkpoints import safety  # noqa: F401  (allow-lists argparse.Namespace, nothing else)
from ..checkpoints.errors import read_error
from ..errors import CMLMPluginError


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


def num_updates(state) -> int:
    history = state.get("optimizer_history")
    if isinstance(history, list) and history and isinstance(history[-1], Mapping):
        return int(history[-1].get("num_updates") or 0)
    return 0


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
