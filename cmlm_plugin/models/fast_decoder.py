"""Inference-only evaluation of the bidirectional decoder, for the decoding passes.

The network and weights are those of ``BidirectionalDecoder`` (fairseq's Transformer
decoder layers, full self-attention, Ghazvininejad et al. 2019 §2); only the way one
pass is computed changes, for speed (issue: decoding speed):

* the keys and values of every cross-attention layer are computed once per sentence
  (``B`` rows) by ``prepare`` and reused by all T passes and all l length candidates,
  where the module forward recomputes them for every pass and candidate (``B·l`` rows);
* the self-attention's query, key and value projections are one packed matrix product;
* attention is ``scaled_dot_product_attention`` and no attention weights are kept
  (fairseq's decoder averages the last layer's cross-attention weights every pass);
* the output projection, and the last layer's feed-forward block before it, run only
  at the positions asked for (``where``); attention still sees every position.

Outputs equal the module forward up to float rounding (``tests/test_fast_decoder.py``).
With ``int8=True`` (CPU only) every linear layer, the output projection included, is a
dynamically quantized int8 matrix product (fbgemm; per-output-channel symmetric weight
scales, activations quantized per call): faster on CPU, logits change slightly (a
deviation from the trained float model, off by default; BLEU measured in docs/speed.md).
torch 2.13 marks its quantized-tensor constructors deprecated; where a torch lacks
them, ``int8`` stops with an error naming ``fast``.
"""

import warnings
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import CMLMPluginError
from .frames import add_frame


def _int8_kernel():
    try:  # the overload itself: skips the Python dispatch of the op packet per call
        return torch.ops.quantized.linear_dynamic.default
    except (AttributeError, RuntimeError):  # checked again, with the fix, at build time
        return None


_LINEAR_INT8 = _int8_kernel()


class Linear:
    """``x @ W.T + b``, in float or as an int8 dynamically quantized product."""

    def __init__(self, weight: Tensor, bias: Optional[Tensor], int8: bool = False):
        self.int8 = int8
        if not int8:
            self.weight, self.bias = weight, bias
            return
        weight = weight.detach().float()  # out x in
        scales = weight.abs().amax(dim=1).clamp(min=1e-8) / 127.0  # out
        zeros = torch.zeros_like(scales, dtype=torch.long)
        bias = None if bias is None else bias.detach().float()
        try:
            if _LINEAR_INT8 is None:
                raise AttributeError("torch.ops.quantized.linear_dynamic")
            with warnings.catch_warnings():  # torch 2.13 marks these ops deprecated
                warnings.simplefilter("ignore", UserWarning)
                quantized = torch.quantize_per_channel(
                    weight, scales.double(), zeros, 0, torch.qint8
                )
                self.packed = torch.ops.quantized.linear_prepack(quantized, bias)
        except (AttributeError, RuntimeError) as error:
            raise CMLMPluginError(
                f"--decoder-impl int8 needs torch's quantized CPU kernels, which this "
                f"torch {torch.__version__} lacks ({error}): use --decoder-impl fast"
            ) from error

    def __call__(self, x: Tensor) -> Tensor:
        if not self.int8:
            return F.linear(x, self.weight, self.bias)
        # fbgemm's activations use 7 bits (reduce_range), as torch's default qconfig on x86
        return _LINEAR_INT8(x.float().contiguous(), self.packed, True)


def _linear(module, int8: bool) -> Linear:
    return Linear(module.weight, module.bias, int8)


def plain_attention(attn) -> bool:
    """Whether ``attn`` (fairseq's MultiheadAttention) is the plain form this path computes."""
    extras = attn.bias_k is not None or attn.add_zero_attn
    return not extras and not getattr(attn, "use_xformers", False)


def unsupported(decoder) -> Optional[str]:
    """Why the fast path cannot evaluate ``decoder`` exactly (None: it can)."""
    if decoder.quant_noise is not None or decoder.cross_self_attention:
        return "quant-noise or cross-self-attention"
    if decoder.project_in_dim is not None or decoder.project_out_dim is not None:
        return "input/output projections of the embeddings"
    if decoder.output_projection is None or decoder.output_projection.bias is not None:
        return "an adaptive or biased output projection"
    for layer in decoder.layers:
        extras = ("c_attn", "attn_ln", "ffn_layernorm", "w_resid")
        if any(getattr(layer, name, None) is not None for name in extras):
            return "NormFormer-style layer extras"
        if layer.encoder_attn is None:
            return "a decoder without cross-attention"
        attentions = [layer.self_attn, layer.encoder_attn, getattr(layer, "causal_attn", None)]
        if not all(plain_attention(a) for a in attentions if a is not None):
            return "attention with bias_kv, zero attention or xformers"
    return None


class AttentionWeights:
    """One self-attention's weights, its query, key and value projections packed."""

    def __init__(self, attn, normalize_before: bool, int8: bool):
        self.heads, self.head_dim = attn.num_heads, attn.head_dim
        self.normalize_before = normalize_before
        qkv = [attn.q_proj, attn.k_proj, attn.v_proj]
        bias = None
        if all(p.bias is not None for p in qkv):
            bias = torch.cat([p.bias for p in qkv])  # 3C
        self.qkv = Linear(torch.cat([p.weight for p in qkv]), bias, int8)  # 3C x C
        self.out = _linear(attn.out_proj, int8)

    def split_heads(self, x: Tensor) -> Tensor:
        n, length, _ = x.shape
        return x.view(n, length, self.heads, self.head_dim).transpose(1, 2)  # n x H x L x d

    @staticmethod
    def merge_heads(x: Tensor) -> Tensor:
        n, heads, length, dim = x.shape
        return x.transpose(1, 2).reshape(n, length, heads * dim)  # n x L x C


class LayerWeights(AttentionWeights):
    """One decoder layer's weights, packed for inference; ``causal``: the weights of its
    causal self-attention (``--insert-causal-attn``, ``causal_sublayer.py``) or None."""

    def __init__(self, layer, int8: bool):
        super().__init__(layer.self_attn, layer.normalize_before, int8)
        cross = getattr(layer, "encoder_attn", None)
        causal = getattr(layer, "causal_attn", None)
        self.causal = None
        if causal is not None:
            self.causal = AttentionWeights(causal, layer.normalize_before, int8)
            self.causal_norm = layer.causal_attn_layer_norm
        self.norms = (layer.self_attn_layer_norm, getattr(layer, "encoder_attn_layer_norm", None))
        if cross is not None:  # decoder layers; encoder layers have none
            self.cross_q = _linear(cross.q_proj, int8)
            self.cross_out = _linear(cross.out_proj, int8)
            self.cross_k, self.cross_v = _linear(cross.k_proj, int8), _linear(cross.v_proj, int8)
        self.final_norm = layer.final_layer_norm
        self.fc1, self.fc2 = _linear(layer.fc1, int8), _linear(layer.fc2, int8)
        self.activation = layer.activation_fn


def block(x: Tensor, w: AttentionWeights, extra, norm, body) -> Tensor:
    """Residual sub-layer, post-norm (the paper's) or pre-norm as the layer says."""
    if w.normalize_before:
        return x + body(norm(x), w, extra)
    return norm(x + body(x, w, extra))


def self_attention(x: Tensor, w: AttentionWeights, keep: Tensor) -> Tensor:
    """``n x L x C`` -> ``n x L x C``; ``keep`` (``n x 1 x 1 x L``, or ``n x 1 x L x L``
    for a causal one) marks the keys each query may see."""
    q, k, v = w.qkv(x).chunk(3, dim=-1)  # n x L x C each
    heads = [w.split_heads(t) for t in (q, k, v)]  # n x H x L x d each
    return w.out(w.merge_heads(F.scaled_dot_product_attention(*heads, attn_mask=keep)))


def cross_attention(x: Tensor, w: LayerWeights, cross) -> Tensor:
    """Queries ``n x L x C`` against cached keys/values ``n x H x S x d``."""
    keys, values, keep = cross
    q = w.split_heads(w.cross_q(x))  # n x H x L x d
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=keep)  # n x H x L x d
    return w.cross_out(w.merge_heads(out))  # n x L x C


def feed_forward(x: Tensor, w: LayerWeights, _) -> Tensor:
    return w.fc2(w.activation(w.fc1(x)))


class FastDecoder:
    """Evaluates decoder passes of one model (``CMLMPluginModel``) with cached cross K/V.

    Build with ``FastDecoder(model, int8)``; per batch call ``prepare(encoder_out)``
    once and ``logits(tokens, cache, sentences, where)`` per pass.
    """

    def __init__(self, model, int8: bool = False):
        decoder = model.decoder
        self.decoder = decoder
        self.int8 = int8
        self.layers = [LayerWeights(layer, int8) for layer in decoder.layers]
        self.projection = _linear(decoder.output_projection, int8)
        d = decoder.dictionary
        self.symbols = (d.pad(), d.bos(), d.eos())

    def prepare(self, encoder_out) -> Tuple[List[Tuple[Tensor, Tensor]], Tensor]:
        """Per-layer cross-attention keys/values (``B x H x S x d``) and the key mask."""
        states = encoder_out["encoder_out"][0].transpose(0, 1)  # B x S x C
        masks = encoder_out["encoder_padding_mask"]
        if masks:
            keep = ~masks[0]  # B x S, True at real source tokens
        else:
            keep = torch.ones(states.shape[:2], dtype=torch.bool, device=states.device)
        kv = [
            (w.split_heads(w.cross_k(states)), w.split_heads(w.cross_v(states)))
            for w in self.layers
        ]  # B x H x S x d each
        return kv, keep

    def trunk(self, tokens: Tensor, kv, keep: Tensor, sentences: Tensor) -> Tensor:
        """``n x L`` tokens of the candidates of ``sentences`` (``n``) -> ``n x L x C``:
        the states at the real positions before the last layer's feed-forward block
        (``tail``). ``kv``, ``keep``: the two parts of ``prepare``'s cache."""
        dec = self.decoder
        pad, bos, eos = self.symbols
        framed, real = add_frame(tokens, dec.frame, pad, bos, eos)  # n x L'
        x = dec.embed_scale * dec.embed_tokens(framed)  # n x L' x C
        if dec.embed_positions is not None:
            x = x + dec.embed_positions(framed)
        if dec.layernorm_embedding is not None:
            x = dec.layernorm_embedding(x)
        if self.int8:
            x = x.float()
        self_keep = framed.ne(pad)[:, None, None, :]  # n x 1 x 1 x L'
        cross_keep = keep[sentences][:, None, None, :]  # n x 1 x 1 x S
        causal_keep = None
        if self.layers[0].causal is not None:  # --insert-causal-attn: every layer has one
            length = framed.size(1)
            past = torch.ones(length, length, dtype=torch.bool, device=x.device).tril()  # L' x L'
            causal_keep = self_keep & past  # n x 1 x L' x L': key j <= query i
        last = len(self.layers) - 1
        for i, (w, (keys, values)) in enumerate(zip(self.layers, kv)):
            x = block(x, w, self_keep, w.norms[0], self_attention)
            if w.causal is not None:
                x = block(x, w.causal, causal_keep, w.causal_norm, self_attention)
            cross = (keys[sentences], values[sentences], cross_keep)  # n x H x S x d
            x = block(x, w, cross, w.norms[1], cross_attention)
            if i < last:
                x = block(x, w, None, w.final_norm, feed_forward)
        return x[:, real]  # n x L x C

    def tail(self, x: Tensor) -> Tensor:
        """The last layer's feed-forward block and the final norm, on independent rows
        (``... x C`` -> ``... x C``)."""
        w = self.layers[-1]
        x = block(x, w, None, w.final_norm, feed_forward)
        if self.decoder.layer_norm is not None:
            x = self.decoder.layer_norm(x)
        return x

    def features(self, tokens: Tensor, cache, sentences: Tensor, where=None) -> Tensor:
        """``n x L`` tokens of the candidates of ``sentences`` (``n``) -> ``n x L x C``.

        With ``where`` (``n x L`` bool): ``M x C`` at its ``M`` positions only; the
        last layer's feed-forward block then runs on those rows alone (the other
        positions' final states are never read).
        """
        kv, keep = cache
        x = self.trunk(tokens, kv, keep, sentences)  # n x L x C
        if where is not None:
            x = x[where]  # M x C, rows are independent from here on
        return self.tail(x)  # n x L x C, or M x C

    def logits(self, tokens: Tensor, cache, sentences: Tensor, where=None) -> Tensor:
        """``n x L x V`` logits, or ``M x V`` at the ``M`` positions ``where`` marks."""
        return self.projection(self.features(tokens, cache, sentences, where))  # (n x L | M) x V
