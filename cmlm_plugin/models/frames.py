"""Decoder-input framings and the LENGTH-token encoder of converted checkpoints.

Our CMLM (Ghazvininejad et al., 2019, §2) feeds the decoder the target tokens only
and predicts the length from mean-pooled encoder states. Two other codebases of the
same model frame things differently, and their checkpoints keep their framing after
conversion (``cmlm-convert``):

* fairseq's ``cmlm_transformer``: decoder input ``<s> y1..yn </s>`` (``bos-eos``),
  and the source also starts with ``<s>`` (``translation_lev`` prepends it);
* the original Mask-Predict code (``bert_transformer_seq2seq``): decoder input
  ``y1..yn </s>`` (``eos``), and the length is read from a LENGTH token prepended to
  the encoder input (its own embedding, no positional embedding), whose final state
  scores the length classes; the other encoder states exclude it.

The model still sees and returns ``N x L`` for the ``L`` real positions: the frame
symbols are added before the decoder and their outputs dropped after it.
"""

from typing import Tuple

import torch
from fairseq.models.transformer import TransformerEncoder
from torch import Tensor, nn

FRAMES = ("none", "bos-eos", "eos")
LENGTH_SOURCES = ("mean-pool", "length-token")


def add_frame(tokens: Tensor, frame: str, pad: int, bos: int, eos: int) -> Tuple[Tensor, slice]:
    """``N x L`` right-padded tokens -> framed ``N x L'`` tokens and the slice of the real ones."""
    if frame == "none":
        return tokens, slice(None)
    lengths = tokens.ne(pad).sum(dim=1, keepdim=True)  # N x 1
    lead = 1 if frame == "bos-eos" else 0
    framed = tokens.new_full((tokens.size(0), tokens.size(1) + lead + 1), pad)  # N x L'
    framed[:, lead : lead + tokens.size(1)] = tokens
    if lead:
        framed[:, 0] = bos
    framed.scatter_(1, lengths + lead, eos)
    return framed, slice(lead, lead + tokens.size(1))


def prepend_bos(tokens: Tensor, pad: int, bos: int) -> Tensor:
    """``B x S`` tokens (left- or right-padded) -> ``B x (S+1)`` with BOS before the first real one."""
    out = torch.cat([tokens.new_full((tokens.size(0), 1), pad), tokens], dim=1)  # B x (S+1)
    first = tokens.ne(pad).int().argmax(dim=1, keepdim=True)  # B x 1, index in tokens
    return out.scatter_(1, first, bos)  # out[first] held pad: the slot before the token


class SourceBosEncoder(TransformerEncoder):
    """fairseq's encoder reading ``<s>`` before each source (fairseq's ``translation_lev``)."""

    def forward(self, src_tokens, src_lengths=None, return_all_hiddens=False, **unused):
        d = self.dictionary
        framed = prepend_bos(src_tokens, d.pad(), d.bos())  # B x (S+1)
        lengths = None if src_lengths is None else src_lengths + 1
        return super().forward(framed, src_lengths=lengths, return_all_hiddens=return_all_hiddens)


class LengthTokenEncoder(TransformerEncoder):
    """fairseq's encoder with a LENGTH token in front (original Mask-Predict code).

    The token's final state is returned as ``encoder_out["length_state"]`` (``B x C``)
    for the length head; ``encoder_out["encoder_out"]`` holds the source positions only.
    """

    def __init__(self, args, dictionary, embed_tokens):
        super().__init__(args, dictionary, embed_tokens)
        self.length_token = nn.Parameter(torch.zeros(args.encoder_embed_dim))  # C

    def forward_scriptable(
        self, src_tokens, src_lengths=None, return_all_hiddens=False, token_embeddings=None
    ):  # fairseq's forward passes all four positionally
        padding = src_tokens.eq(self.padding_idx)  # B x S
        x, embedding = self.forward_embedding(src_tokens, token_embeddings)  # B x S x C
        x = x * (1 - padding.unsqueeze(-1).type_as(x))
        token = self.length_token.to(x).expand(x.size(0), 1, -1)  # B x 1 x C
        x = torch.cat([token, x], dim=1).transpose(0, 1)  # (S+1) x B x C
        mask = torch.cat([padding.new_zeros(padding.size(0), 1), padding], dim=1)  # B x (S+1)
        states = [x] if return_all_hiddens else []
        for layer in self.layers:
            x = layer(x, encoder_padding_mask=mask)
            x = x[0] if isinstance(x, tuple) else x
            if return_all_hiddens:
                states.append(x)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        return {
            "encoder_out": [x[1:]],  # S x B x C
            "encoder_padding_mask": [padding],  # B x S
            "encoder_embedding": [embedding],  # B x S x C
            "encoder_states": [s[1:] for s in states],  # List[S x B x C]
            "fc_results": [],
            "src_tokens": [],
            "src_lengths": [(~padding).sum(dim=1, dtype=torch.int32).reshape(-1, 1)],  # B x 1
            "length_state": [x[0]],  # B x C
        }
