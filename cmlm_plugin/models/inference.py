"""How a ``CMLMPluginModel`` computes its decoding passes: one object per ``--decoder-impl``.

The generator asks an ``InferencePath`` for three things and nothing else:
``encode(src_tokens, src_lengths)`` (fairseq's encoder output), ``start(encoder_out,
order)`` (the per-batch decoder state of the ``N`` candidates, ``order[i]`` the sentence
of candidate ``i``) and ``logits(state, tokens, rows, where)`` (one decoder pass:
``n x L x V`` logits of the candidates ``rows``, or ``M x V`` at the ``M`` positions of
the bool ``where``; see ``cmlm_decoding.contract``). The network and its outputs are
the same on every path, up to float rounding (``int8``: up to quantization):

* ``modules``: fairseq's module forward, the reference (encoder states expanded to
  the ``N`` candidates, the decoder recomputed over them every pass);
* ``fast``: ``fast_encoder``/``fast_decoder`` (cross-attention keys/values once per
  sentence, packed projections); falls back to ``modules`` for layer options it does
  not implement;
* ``int8``: ``fast`` with dynamically quantized int8 linear layers, CPU and float32
  only, quantized once per model and cached on it;
* ``compiled``: ``fast`` with the decoder trunk through ``torch.compile`` on bucketed
  shapes (``compiled_decoder``; CUDA graphs on CUDA), built once per model and cached on
  it; it refuses, naming the fix, what it cannot compile instead of falling back.

A new path is one class here (``name``, ``cached``, ``check``, ``encode``, ``start``,
``logits``), registered in ``INFERENCE_PATHS``; ``--decoder-impl`` offers the registry's
names.
"""

from typing import Dict, Optional

import torch
from torch import Tensor

from ..errors import CMLMPluginError
from .compiled_decoder import CompiledDecoder, compile_problem
from .fast_decoder import FastDecoder, unsupported
from .fast_encoder import FastEncoder


class ModulePath:
    """fairseq's module forward on encoder states expanded to the candidates."""

    name = "modules"
    cached = False  # built once per model and kept on it (see ``inference_path``)

    def __init__(self, model):
        self.model = model

    @classmethod
    def check(cls, model, device: torch.device) -> Optional[str]:
        """Why this path cannot run ``model`` on ``device`` (None: it can, always)."""
        return None

    def encode(self, src_tokens: Tensor, src_lengths: Tensor) -> Dict:
        return self.model.encoder(src_tokens, src_lengths=src_lengths)

    def start(self, encoder_out: Dict, order: Tensor):
        return self.model.encoder.reorder_encoder_out(encoder_out, order)  # N rows

    def logits(self, state, tokens: Tensor, rows: Optional[Tensor], where=None) -> Tensor:
        if rows is not None:
            state = self.model.encoder.reorder_encoder_out(state, rows)  # n rows
        return self.model.decoder_logits(tokens, state, where)


class FastPath:
    """Cross-attention keys/values once per sentence, reused by every pass and candidate."""

    name = "fast"
    int8 = False
    cached = False

    def __init__(self, model):
        self.encoder = FastEncoder.build(model.encoder, int8=self.int8) or model.encoder
        self.decoder = FastDecoder(model, int8=self.int8)

    @classmethod
    def check(cls, model, device: torch.device) -> Optional[str]:
        """Why this path cannot run ``model`` on ``device`` (None: it can)."""
        return unsupported(model.decoder)

    def encode(self, src_tokens: Tensor, src_lengths: Tensor) -> Dict:
        return self.encoder(src_tokens, src_lengths=src_lengths)

    def start(self, encoder_out: Dict, order: Tensor):
        return self.decoder.prepare(encoder_out), order  # B-row cache, sentence of each row

    def logits(self, state, tokens: Tensor, rows: Optional[Tensor], where=None) -> Tensor:
        cache, order = state
        sentences = order if rows is None else order[rows]  # n
        return self.decoder.logits(tokens, cache, sentences, where)


class Int8Path(FastPath):
    """``fast`` with fbgemm dynamic int8 linear layers (CPU, float32 models)."""

    name = "int8"
    int8 = True
    cached = True  # quantizing costs about 0.1 s at d=256

    @classmethod
    def check(cls, model, device: torch.device) -> Optional[str]:
        if device.type != "cpu":
            raise CMLMPluginError(
                "--decoder-impl int8 runs on CPU only: decode with --cpu, or use "
                "--decoder-impl fast (with --fp16 on a GPU)"
            )
        dtype = model.decoder.embed_tokens.weight.dtype
        if dtype != torch.float32:
            raise CMLMPluginError(
                f"--decoder-impl int8 quantizes a float32 model, this one is {dtype}: "
                "drop --fp16/--bf16, or use --decoder-impl fast"
            )
        reason = unsupported(model.decoder)
        if reason is not None:
            raise CMLMPluginError(
                f"--decoder-impl int8 cannot evaluate this decoder ({reason}): use "
                "--decoder-impl modules"
            )
        return None


class CompiledPath(FastPath):
    """``fast`` with the decoder trunk compiled on bucketed shapes (CUDA graphs on CUDA)."""

    name = "compiled"
    cached = True  # the compiled graphs live as long as the model's weights

    def __init__(self, model):
        device = model.decoder.embed_tokens.weight.device
        self.encoder = FastEncoder.build(model.encoder) or model.encoder  # once per batch
        self.decoder = CompiledDecoder(model, device)

    @classmethod
    def check(cls, model, device: torch.device) -> Optional[str]:
        problem = compile_problem(device)
        if problem is not None:
            raise CMLMPluginError(
                f"--decoder-impl compiled cannot run: {problem}; or use --decoder-impl fast"
            )
        reason = unsupported(model.decoder)
        if reason is not None:
            raise CMLMPluginError(
                f"--decoder-impl compiled cannot evaluate this decoder ({reason}): use "
                "--decoder-impl modules"
            )
        return None


INFERENCE_PATHS = {path.name: path for path in (FastPath, Int8Path, CompiledPath, ModulePath)}


def _weights_version(params):
    """Changes when a parameter's storage is replaced or it is updated in place through
    autograd-visible ops (its ``_version``); updates through ``.data`` are not seen."""
    return [(p.data_ptr(), p._version) for p in params]


def inference_path(model, impl: str, device: torch.device):
    """The path ``--decoder-impl impl`` decodes ``model`` with on ``device``.

    ``fast`` packs its weights anew for every batch (well under a millisecond), so it
    always reads the current parameters; ``int8`` quantizes once (about 0.1 s at
    d=256), ``compiled`` packs once and compiles on its first passes; both cache the
    result on the model and rebuild it when a weight changes (``_weights_version``):
    decode a model whose weights change through ``.data`` between calls (validation
    during training) with ``fast``. ``fast`` falls back to ``modules`` for a decoder it
    cannot evaluate; ``int8`` and ``compiled`` refuse it.
    """
    if impl not in INFERENCE_PATHS:
        raise CMLMPluginError(
            f"--decoder-impl {impl!r} is not an inference path: use one of "
            + ", ".join(INFERENCE_PATHS)
        )
    path = INFERENCE_PATHS[impl]
    if path.check(model, device) is not None:
        return ModulePath(model)  # fairseq's module forward handles every layer option
    if not path.cached:
        return path(model)
    key = f"_cmlm_{path.name}_path"
    kept = model.__dict__.get(key)  # (parameters, their version, path)
    params = kept[0] if kept else list(model.parameters())  # walked once, not per batch
    version = _weights_version(params)
    if kept is None or kept[1] != version:
        kept = (params, version, path(model))
        model.__dict__[key] = kept
    return kept[2]
