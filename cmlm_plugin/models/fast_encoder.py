"""Inference-only evaluation of the encoder, with the fast decoder's kernels.

fairseq's Transformer encoder (Vaswani et al. 2017; the CMLM's encoder, Ghazvininejad
et al. 2019 §2), run once per sentence before the decoding passes: packed
query/key/value projection, ``scaled_dot_product_attention``, and with ``int8`` the
dynamically quantized linear layers of ``fast_decoder.Linear``. Returns fairseq's
encoder-output dict; states at source padding are not computed the module's way
(nothing reads them: the length head and cross-attention mask padding out).
Encoders it does not cover (the LENGTH-token encoder of converted Mask-Predict
checkpoints, NormFormer extras) run as fairseq modules (``FastEncoder.build``: None).
"""

from typing import Dict, List, Optional

import torch
from torch import Tensor

from .fast_decoder import LayerWeights, block, feed_forward, plain_attention, self_attention
from .frames import LengthTokenEncoder, SourceBosEncoder, prepend_bos


class FastEncoder:
    def __init__(self, encoder, int8: bool = False):
        self.encoder = encoder
        self.int8 = int8
        self.layers = [LayerWeights(layer, int8) for layer in encoder.layers]
        self.source_bos = isinstance(encoder, SourceBosEncoder)

    @staticmethod
    def build(encoder, int8: bool = False) -> Optional["FastEncoder"]:
        """A ``FastEncoder`` for ``encoder``, or None where the module path must run."""
        if isinstance(encoder, LengthTokenEncoder) or encoder.quant_noise is not None:
            return None
        for layer in encoder.layers:
            if getattr(layer, "return_fc", False) or not plain_attention(layer.self_attn):
                return None
        return FastEncoder(encoder, int8)

    def __call__(self, src_tokens: Tensor, src_lengths=None) -> Dict[str, List[Tensor]]:
        """``B x S`` source tokens -> fairseq's encoder output (``src_lengths`` unused)."""
        enc = self.encoder
        if self.source_bos:  # fairseq's translation_lev: <s> before every source
            src_tokens = prepend_bos(src_tokens, enc.padding_idx, enc.dictionary.bos())
        padding = src_tokens.eq(enc.padding_idx)  # B x S
        x, embedding = enc.forward_embedding(src_tokens)  # B x S x C
        x = x.masked_fill(padding.unsqueeze(-1), 0.0)  # as fairseq: padding zeroed
        if self.int8:
            x = x.float()
        keep = (~padding)[:, None, None, :]  # B x 1 x 1 x S
        for w in self.layers:
            x = block(x, w, keep, w.norms[0], self_attention)
            x = block(x, w, None, w.final_norm, feed_forward)
        if enc.layer_norm is not None:
            x = enc.layer_norm(x)
        lengths = (~padding).sum(dim=1, dtype=torch.int32).reshape(-1, 1)  # B x 1
        return {
            "encoder_out": [x.transpose(0, 1)],  # S x B x C
            "encoder_padding_mask": [padding],  # B x S
            "encoder_embedding": [embedding],  # B x S x C
            "encoder_states": [],
            "fc_results": [],
            "src_tokens": [],
            "src_lengths": [lengths],
        }
