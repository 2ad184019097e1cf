"""Checkpoint converters into cmlm_plugin models (pure state-dict mappings).

Two other codebases train the CMLM of Ghazvininejad et al. (2019):

* fairseq's ``cmlm_transformer`` (task ``translation_lev``): the same encoder and
  decoder modules as ours; the decoder input is framed as ``<s> y </s>``, ``<unk>``
  serves as the mask, and ``decoder.embed_length`` (256 classes, no bias, mean-pooled
  encoder states) predicts the length *including* BOS and EOS;
* the original Mask-Predict code (``bert_transformer_seq2seq``, fairseq 0.7.2): packed
  q/k/v projections, BERT layer norms named ``gamma``/``beta`` (eps 1e-12; fairseq's
  are 1e-5), no embedding scale, a LENGTH token prepended to the encoder input whose
  final state scores ``encoder.embed_lengths`` (class k = k tokens including EOS),
  decoder input ``y </s>``, and the dictionary order ``<s> <pad> </s> <unk> <mask>``
  followed by the words (ours appends ``<mask>`` after the words).

Each converter returns our state dict and the model options that keep the source's
framing (``decoder_frame``, ``length_source``; see ``models/frames.py``). Our length
class c always means c target words; classes with no counterpart get bias
``DISABLED`` so they are never proposed.
"""

import re
from typing import Dict, Tuple

import torch
from torch import Tensor

from ..errors import CMLMPluginError

DISABLED = -1.0e4  # length-class bias for classes the source model cannot predict


def _with_mask_row(table: Tensor, unk: int, mask: int, size: int) -> Tensor:
    """``V x C`` table -> ``size x C`` with row ``mask`` (our ``<mask>``) a copy of row ``unk``.

    The task appends ``<mask>`` when the dictionary lacks it (then ``V = size - 1``); a
    dictionary that already holds it (e.g. a sentencepiece user symbol) keeps its index.
    """
    if table.size(0) == size - 1:
        table = torch.cat([table, table[unk][None]])  # size x C
    out = table.clone()
    out[mask] = table[unk]
    return out


def _shifted_length_head(weight: Tensor, shift: int) -> Dict[str, Tensor]:
    """Our length head from a bias-free ``K x C`` one whose class k means k - shift words."""
    classes, dim = weight.shape
    proj = weight.new_zeros(classes, dim)  # K x C
    proj[: classes - shift] = weight[shift:]
    bias = weight.new_zeros(classes)
    bias[classes - shift :] = DISABLED
    return {"length_head.proj.weight": proj, "length_head.proj.bias": bias}


_VOCAB_TABLES = (
    "encoder.embed_tokens.weight",
    "decoder.embed_tokens.weight",
    "decoder.output_projection.weight",
)


def from_fairseq_cmlm(
    state: Dict[str, Tensor], vocab_size: int, unk: int, mask: int
) -> Tuple[Dict, Dict]:
    """fairseq ``cmlm_transformer`` weights -> ours (``vocab_size`` counts our ``<mask>``).

    ``unk`` is the index of ``<unk>``, fairseq's mask symbol: its embedding becomes
    the embedding of our ``<mask>`` (index ``mask`` in the data's dictionary).
    """
    if "decoder.embed_length.weight" not in state:
        raise CMLMPluginError(
            "the checkpoint has no decoder.embed_length: it is not a fairseq "
            "cmlm_transformer (use 'cmlm-convert mask-predict' for the original code's models)"
        )
    words = state["encoder.embed_tokens.weight"].size(0)
    if words not in (vocab_size - 1, vocab_size):
        raise CMLMPluginError(
            f"the checkpoint has {words} embedding rows but the data's dictionary has "
            f"{vocab_size} symbols with <mask>: give --data the binarized data the model "
            "was trained on"
        )
    out = {}
    for key, value in state.items():
        if key == "decoder.embed_length.weight":
            continue
        if key in _VOCAB_TABLES:
            value = _with_mask_row(value, unk, mask, vocab_size)  # vocab_size x C
        out[key] = value
    out.update(_shifted_length_head(state["decoder.embed_length.weight"], shift=2))
    return out, {"decoder_frame": "bos-eos", "length_source": "mean-pool"}


_ENCODER_NORMS = {"layer_norms.0": "self_attn_layer_norm", "layer_norms.1": "final_layer_norm"}
_MP_SPECIALS = 5  # <s> <pad> </s> <unk> <mask>


def _reorder_vocab(table: Tensor) -> Tensor:
    """Original order (4 specials, <mask>, words) -> ours (4 specials, words, <mask>)."""
    return torch.cat([table[:4], table[_MP_SPECIALS:], table[4:5]])  # V x C


_MP_REQUIRED = (  # read before the weights are mapped (sizes, vocabulary, tied output)
    "encoder.embed_tokens.weight",
    "encoder.embed_positions.weight",
    "encoder.layers.0.fc1.weight",
    "decoder.embed_tokens.weight",
    "decoder.embed_positions.weight",
    "decoder.layers.0.fc1.weight",
)


def _check_mask_predict(state: Dict[str, Tensor]) -> None:
    """A one-line error unless ``state`` has the weights the mapping reads by name."""
    if "encoder.embed_lengths.weight" not in state:
        raise CMLMPluginError(
            "the checkpoint has no encoder.embed_lengths: it is not an original "
            "Mask-Predict model (use 'cmlm-convert fairseq-cmlm' for fairseq's cmlm_transformer)"
        )
    missing = [key for key in _MP_REQUIRED if key not in state]
    if missing:
        raise CMLMPluginError(
            f"the Mask-Predict checkpoint has no {', '.join(missing)}: it is truncated or "
            "not a bert_transformer_seq2seq model"
        )


def from_mask_predict(state: Dict[str, Tensor], vocab_size: int) -> Tuple[Dict, Dict]:
    """Original Mask-Predict ``bert_transformer_seq2seq`` weights -> ours."""
    _check_mask_predict(state)
    words = state["encoder.embed_tokens.weight"].size(0)
    if words != vocab_size:
        raise CMLMPluginError(
            f"the checkpoint has {words} embedding rows but the data's dictionary has "
            f"{vocab_size} symbols with <mask>: binarize with the dict.*.txt released "
            "with the model (fairseq-preprocess --srcdict DICT --joined-dictionary)"
        )
    out = {}
    for key, value in state.items():
        value = value.float()
        if key.endswith(".version") or key == "encoder.embed_lengths.weight":
            continue
        key = re.sub(r"\.gamma$", ".weight", re.sub(r"\.beta$", ".bias", key))
        for old, new in _ENCODER_NORMS.items():
            key = key.replace(old, new)
        if key.endswith("in_proj_weight") or key.endswith("in_proj_bias"):
            base, kind = key.rsplit(".in_proj_", 1)
            for name, part in zip(("q_proj", "k_proj", "v_proj"), value.chunk(3)):
                out[f"{base}.{name}.{kind}"] = part
            continue
        if key in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"):
            value = _reorder_vocab(value)
        if key == "decoder.embed_out":
            key, value = "decoder.output_projection.weight", _reorder_vocab(value)
        out[key] = value
    if "decoder.output_projection.weight" not in out:  # tied to the embeddings
        out["decoder.output_projection.weight"] = out["decoder.embed_tokens.weight"]
    lengths = state["encoder.embed_lengths.weight"].float()  # Pt x C
    out["encoder.length_token"] = lengths[0]
    out.update(_shifted_length_head(lengths, shift=1))
    return out, {"decoder_frame": "eos", "length_source": "length-token"}


def mask_predict_sizes(state: Dict[str, Tensor]) -> Dict:
    """Model sizes of an original Mask-Predict checkpoint, read from its tensor shapes.

    Without ``decoder.embed_out`` the decoder's output is tied to its input table;
    all embeddings are shared only if the encoder's table is also the same
    (``--share-all-embeddings``; the original saves the one table under both names).
    """
    _check_mask_predict(state)

    def count(prefix):
        found = {int(m.group(1)) for k in state for m in [re.match(prefix + r"(\d+)\.", k)] if m}
        return len(found)

    embed = state["encoder.embed_tokens.weight"]
    decoder_embed = state["decoder.embed_tokens.weight"]
    tied = "decoder.embed_out" not in state
    shared = embed.shape == decoder_embed.shape and torch.equal(embed, decoder_embed)
    return {
        "encoder_embed_dim": embed.size(1),
        "decoder_embed_dim": embed.size(1),
        "encoder_ffn_embed_dim": state["encoder.layers.0.fc1.weight"].size(0),
        "decoder_ffn_embed_dim": state["decoder.layers.0.fc1.weight"].size(0),
        "encoder_layers": count(r"encoder\.layers\."),
        "decoder_layers": count(r"decoder\.layers\."),
        "max_source_positions": state["encoder.embed_positions.weight"].size(0) - 2,
        "max_target_positions": state["decoder.embed_positions.weight"].size(0) - 2,
        "length_classes": state["encoder.embed_lengths.weight"].size(0),
        "share_all_embeddings": tied and shared,
        "share_decoder_input_output_embed": tied,
    }
