"""The fast decoder's pass through ``torch.compile``, on bucketed shapes (``--decoder-impl compiled``).

Same network, weights and kernels as ``fast_decoder.FastDecoder``; what changes is how a
pass is launched. The decoder trunk (embeddings, every layer's self- and
cross-attention, every feed-forward block but the last) is one ``torch.compile``d graph,
so the per-op overhead of the eager path (Python dispatch on CPU, one kernel launch per
op on CUDA) is paid once per pass. On CUDA it runs with ``mode="reduce-overhead"``: the
graph is captured in CUDA graphs and replayed. The last feed-forward block and the output
projection run eagerly at the re-predicted positions only, as on the fast path.

On CUDA shapes are bucketed so that a few CUDA graphs serve every batch: the candidate
rows ``n`` are padded up to a power of two (up to 8) or a multiple of 8, the target length
``L`` and the source length ``S`` up to a multiple of 8, and the sentences ``B`` of the
cache like the rows (``bucket``). Padded target positions hold pad (masked out as keys by
self-attention and cut from the output), padded rows repeat the first row (their outputs
are cut), padded source positions are masked out of cross-attention. The real positions'
values are those of the fast path up to float rounding (tested: same tokens at fp32).
torch's automatic dynamic shapes compile the first shape statically and the next one
with symbolic sizes, so a run compiles about two or three times; CUDA graphs are recorded
once per distinct bucket. On a CPU the step is 1 (no padding) and the graph is compiled
with symbolic sizes from the start (``dynamic=True``): a CPU pass is bound by its matrix
products, so padded rows and positions cost their full share (measured: padding 5 x 13
to 8 x 16 made the trunk 1.5x slower), while there are no CUDA graphs to reuse.
"""

import contextlib
import os
import shutil
import types
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from ..errors import CMLMPluginError
from .fast_decoder import FastDecoder

LENGTH_STEP = 8  # target and source lengths are padded to a multiple of this
ROW_STEP = 8  # rows above this many are padded to a multiple of it, below to a power of two


def bucket(size: int, step: int = ROW_STEP) -> int:
    """The padded size of a dimension of ``size``: a power of two up to ``step``, else the
    next multiple of ``step`` (``bucket(5) == 8``, ``bucket(9) == 16``, ``bucket(17) == 24``;
    ``step`` 1: ``size`` itself)."""
    if step == 1:
        return size
    if size <= step:
        return 1 << max(size - 1, 0).bit_length()
    return -(-size // step) * step


def length_bucket(size: int, step: int = LENGTH_STEP) -> int:
    """The padded size of a target or source length: the next multiple of ``step``."""
    return max(-(-size // step), 1) * step


def _dynamo():
    """``torch._dynamo``, imported at first use: the import takes about 2 s, which every
    fairseq command that loads the plugin would otherwise pay (measured 2026-12-03 on the
    2-core CPU with ``python -X importtime``: 1.9 s of a 7.2 s start)."""
    import torch._dynamo.exc

    return torch._dynamo


def compile_problem(device: torch.device) -> Optional[str]:
    """Why ``torch.compile`` cannot run on ``device`` here, with the fix (None: it can)."""
    if not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile: install torch >= 2.1"
    if not _dynamo().is_dynamo_supported():
        return (
            f"torch {torch.__version__} cannot compile on this Python: use a Python that "
            "torch.compile supports"
        )
    if device.type == "cuda":
        from torch.utils._triton import has_triton

        if not has_triton():
            return "torch.compile on CUDA needs triton: pip install triton"
        return None
    if device.type != "cpu":
        return f"it runs on cpu and cuda, not {device.type}"
    compilers = [os.environ.get("CXX"), "g++", "c++", "clang++"]
    if not any(name and shutil.which(name) for name in compilers):
        return "torch.compile on CPU needs a C++ compiler: install g++ (or set CXX)"
    return None


def _trunk(fast: FastDecoder, tokens: Tensor, kv, keep: Tensor, sentences: Tensor) -> Tensor:
    return fast.trunk(tokens, kv, keep, sentences)  # n x L x C


def _own_trunk():
    """``_trunk`` with a code object of its own: torch.compile keeps its graphs and its
    recompile limit per code object, so each model's graphs neither crowd out another's
    nor, past the limit, fall back to eager without saying so."""
    return types.FunctionType(_trunk.__code__.replace(), _trunk.__globals__, "_trunk")


def _loud_recompile_limit():
    """Past torch's recompile limit, an error instead of a silent eager fallback (where
    this torch has the setting)."""
    if hasattr(_dynamo().config, "fail_on_recompile_limit_hit"):
        return _dynamo().config.patch(fail_on_recompile_limit_hit=True)
    return contextlib.nullcontext()


def _compile_errors() -> Tuple[type, ...]:
    """The exception types a failing ``torch.compile`` raises (at the first call)."""
    kinds: List[type] = [_dynamo().exc.TorchDynamoException]
    if hasattr(_dynamo().exc, "FailOnRecompileLimitHit"):
        kinds.append(_dynamo().exc.FailOnRecompileLimitHit)
    try:
        from torch._inductor.exc import InductorError

        kinds.append(InductorError)
    except ImportError:
        pass
    return tuple(kinds)


class CompiledDecoder:
    """``FastDecoder``'s passes with the trunk compiled on bucketed shapes.

    Build with ``CompiledDecoder(model, device)``; per batch call ``prepare(encoder_out)``
    once (the bucketed cache) and ``logits(tokens, cache, sentences, where)`` per pass.
    ``shapes`` collects the bucketed ``(rows, length, sentences, source length)`` seen.
    ``step``: the bucket step of rows and lengths (default: 8 on CUDA, 1 on a CPU).
    """

    def __init__(self, model, device: torch.device, step: Optional[int] = None):
        self.fast = FastDecoder(model)
        self.cuda = device.type == "cuda"
        self.step = step or (ROW_STEP if self.cuda else 1)
        self.shapes = set()
        if self.cuda:  # the weights keep their addresses: CUDA graphs need not copy them
            for tensor in self.weights():
                _dynamo().mark_static_address(tensor)
        mode = "reduce-overhead" if self.cuda else None  # CUDA graphs; CPU: inductor's default
        # fullgraph: a graph break is an error, never a silent split into eager pieces
        dynamic = None if self.cuda else True  # CUDA: static first, symbolic on a new shape
        self.trunk = torch.compile(_own_trunk(), mode=mode, fullgraph=True, dynamic=dynamic)

    def weights(self) -> List[Tensor]:
        """The packed tensors the trunk reads (fixed for the life of this object)."""
        out = []
        for w in self.fast.layers:
            for linear in (w.qkv, w.out, w.cross_q, w.cross_out, w.fc1, w.fc2):
                out += [t for t in (linear.weight, linear.bias) if t is not None]
        return out

    def prepare(self, encoder_out):
        """``FastDecoder.prepare``'s cache with sentences and source positions bucketed:
        per layer ``B' x H x S' x d`` keys/values and the ``B' x S'`` key mask."""
        kv, keep = self.fast.prepare(encoder_out)  # B x H x S x d, B x S
        sentences, length = keep.shape
        rows, width = bucket(sentences, self.step), length_bucket(length, self.step)
        if (rows, width) == (sentences, length):
            return kv, keep
        grow = (0, 0, 0, width - length, 0, rows - sentences)  # pad S, then B
        kv = [(torch.nn.functional.pad(k, grow), torch.nn.functional.pad(v, grow)) for k, v in kv]
        keep = torch.nn.functional.pad(keep, grow[2:], value=False)  # B' x S'
        return kv, keep

    def logits(self, tokens: Tensor, cache, sentences: Tensor, where=None) -> Tensor:
        """``n x L x V`` logits, or ``M x V`` at the ``M`` positions ``where`` marks."""
        rows, length = tokens.shape
        padded_rows, width = bucket(rows, self.step), length_bucket(length, self.step)
        padded, chosen = tokens, sentences
        if (padded_rows, width) != (rows, length):
            padded = tokens.new_full((padded_rows, width), self.fast.symbols[0])  # n' x L', pad
            padded[:rows, :length] = tokens
            padded[rows:, :length] = tokens[:1]  # spare rows repeat row 0 (no all-pad row)
            chosen = torch.cat([sentences, sentences[:1].expand(padded_rows - rows)])  # n'
        kv, keep = cache
        self.shapes.add((padded_rows, width, keep.size(0), keep.size(1)))
        if self.cuda:  # the previous replay's output is no longer read
            torch.compiler.cudagraph_mark_step_begin()
        try:
            with _loud_recompile_limit():
                x = self.trunk(self.fast, padded, kv, keep, chosen)  # n' x L' x C
        except _compile_errors() as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            raise CMLMPluginError(
                f"--decoder-impl compiled: torch.compile failed ({type(error).__name__}: "
                f"{first[:200]}): use --decoder-impl fast"
            ) from error
        x = x[:rows, :length]  # n x L x C
        if where is not None:
            x = x[where]  # M x C
        return self.fast.projection(self.fast.tail(x))  # n x L x V, or M x V
