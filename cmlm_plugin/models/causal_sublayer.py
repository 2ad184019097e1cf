"""A decoder layer with a causal self-attention after its bidirectional one
(``--insert-causal-attn``).

CMLMC (Huang, Pérez and Volkovs, "Improving Non-Autoregressive Translation Models Without
Distillation", ICLR 2022) traces part of a CMLM's errors to the indistinguishability of
its decoder inputs: every ``<mask>`` position reads the same embedding, told apart only
by its position, so neighbouring masked positions tend to predict the same token ("Hund
Hund"). Their released model (``--insertCausalSelfAttn``) gives every decoder layer a
second self-attention: first a bidirectional one, then a causal (left-to-right) one,
each with its own residual connection and layer norm, then the cross-attention and the
feed-forward block. The causal sublayer makes each position's state depend on a different
set of inputs, which separates positions whose inputs are alike.

Here ``self_attn`` stays the bidirectional sublayer (the CMLM's, same parameter names)
and ``causal_attn`` is the added one, in CMLMC's order. Their model also concatenates the
position embedding to the token embedding (``--concatPE``) and drops the embedding scale;
neither is done here. With ``--init-from-ar`` both self-attentions start from the
autoregressive model's (causal) self-attention (``training/ar_init.py``).

Layer forward, post-norm (``--decoder-normalize-before``: pre-norm), ``T x B x C``::

    x = norm1(x + bidirectional_attention(x))
    x = norm2(x + causal_attention(x))          # query i sees keys 0..i
    x = norm3(x + cross_attention(x, encoder))
    x = norm4(x + feed_forward(x))
"""

from typing import Optional

import torch
from fairseq.modules import LayerNorm
from fairseq.modules.transformer_layer import TransformerDecoderLayer
from torch import Tensor

from ..errors import CMLMPluginError


def causal_mask(length: int, like: Tensor) -> Tensor:
    """``L x L`` additive mask: 0 where key j <= query i, -inf above the diagonal."""
    full = torch.full((length, length), float("-inf"), dtype=like.dtype, device=like.device)
    return torch.triu(full, diagonal=1)  # L x L


class CausalSublayerDecoderLayer(TransformerDecoderLayer):
    """fairseq's decoder layer plus ``causal_attn`` between self- and cross-attention."""

    def __init__(self, args, no_encoder_attn=False):
        super().__init__(args, no_encoder_attn=no_encoder_attn)
        extras = (self.c_attn, self.attn_ln, self.ffn_layernorm, self.w_resid)
        if self.cross_self_attention or any(extra is not None for extra in extras):
            raise CMLMPluginError(
                "--insert-causal-attn supports fairseq's plain decoder layer: drop "
                "--cross-self-attention and the NormFormer options"
            )
        self.causal_attn = self.build_self_attention(self.embed_dim, args)
        self.causal_attn_layer_norm = LayerNorm(self.embed_dim)

    def _sublayer(self, x: Tensor, norm, attend) -> Tensor:
        """Residual block around ``attend`` (``T x B x C`` -> ``T x B x C``)."""
        residual = x
        if self.normalize_before:
            x = norm(x)
        x = self.dropout_module(attend(x))
        x = self.residual_connection(x, residual)
        return x if self.normalize_before else norm(x)

    def forward(
        self,
        x,
        encoder_out: Optional[Tensor] = None,
        encoder_padding_mask: Optional[Tensor] = None,
        incremental_state=None,
        prev_self_attn_state=None,
        prev_attn_state=None,
        self_attn_mask: Optional[Tensor] = None,
        self_attn_padding_mask: Optional[Tensor] = None,
        need_attn: bool = False,
        need_head_weights: bool = False,
    ):
        if incremental_state is not None or prev_self_attn_state is not None:
            raise CMLMPluginError(
                "--insert-causal-attn: this decoder predicts all positions at once and has "
                "no incremental (step-by-step) decoding"
            )
        need_attn = need_attn or need_head_weights
        keys = self_attn_padding_mask  # B x T, True at padding (or None)

        def attention(module, mask):
            return lambda y: module(
                query=y, key=y, value=y, key_padding_mask=keys, attn_mask=mask, need_weights=False
            )[0]

        x = self._sublayer(x, self.self_attn_layer_norm, attention(self.self_attn, self_attn_mask))
        causal = causal_mask(x.size(0), x)  # T x T
        x = self._sublayer(x, self.causal_attn_layer_norm, attention(self.causal_attn, causal))
        attn = None
        if self.encoder_attn is not None and encoder_out is not None:
            weights = {}

            def cross(y):
                out, weights["attn"] = self.encoder_attn(
                    query=y,
                    key=encoder_out,
                    value=encoder_out,
                    key_padding_mask=encoder_padding_mask,
                    static_kv=True,
                    need_weights=need_attn or (not self.training and self.need_attn),
                    need_head_weights=need_head_weights,
                )
                return out

            x = self._sublayer(x, self.encoder_attn_layer_norm, cross)
            attn = weights["attn"]
        x = self._sublayer(x, self.final_layer_norm, self._feed_forward)
        return x, attn, None

    def _feed_forward(self, x: Tensor) -> Tensor:
        x = self.activation_fn(self.fc1(x))
        x = self.activation_dropout_module(x)
        return self.fc2(x)
