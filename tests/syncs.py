"""Counting the host synchronisations a piece of torch code would make on CUDA, on a CPU.

A CPU never waits for itself, so ``torch.cuda.set_sync_debug_mode`` has nothing to
report there. What makes CUDA code wait is a small set of aten operators whose result
the host must read: a tensor read as a Python number (``item``, ``int``, ``bool``: one
``_local_scalar_dense``), an output whose size depends on the data (``nonzero``,
``masked_select``, indexing with a bool mask, ``unique``, ``repeat_interleave`` without
``output_size``) and ``equal``. ``SyncCounter`` is a ``TorchDispatchMode`` that sees every
aten call below Python and counts those, so the count is the one CUDA would make for
the same calls. Blind spots: reads that bypass the dispatcher (``tolist``, ``numpy``,
printing) and kernels inside a compiled graph (which cannot hold such an op: the
compiled trunk is one graph without data-dependent shapes, ``fullgraph=True``).
``.to("cpu")`` of a CUDA tensor also syncs; on a CPU there is no such copy to see.
"""

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
_ALWAYS = {
    aten._local_scalar_dense.default: "read as a number (item/int/bool)",
    aten.nonzero.default: "nonzero",
    aten.masked_select.default: "masked_select",
    aten.equal.default: "equal",
    aten.repeat_interleave.Tensor: "repeat_interleave without output_size",
    aten._unique2.default: "unique",
    aten.unique_consecutive.default: "unique",
    aten.is_nonzero.default: "read as a number (item/int/bool)",
}


def _bool_index(indices) -> bool:
    return any(i is not None and i.dtype == torch.bool for i in indices)


class SyncCounter(TorchDispatchMode):
    """``with SyncCounter() as syncs: ...`` then ``syncs.total`` and ``syncs.kinds``."""

    def __init__(self):
        super().__init__()
        self.kinds = Counter()

    @property
    def total(self) -> int:
        return sum(self.kinds.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        packet = func.overloadpacket
        if func in _ALWAYS:
            self.kinds[_ALWAYS[func]] += 1
        elif packet is aten.index and _bool_index(args[1]):
            self.kinds["bool-mask index"] += 1
        elif packet in (aten.index_put, aten.index_put_) and _bool_index(args[1]):
            self.kinds["bool-mask index_put"] += 1
        return func(*args, **kwargs)
