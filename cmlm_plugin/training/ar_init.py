"""Starting a CMLM from the weights of an autoregressive Transformer (``--init-from-ar``).

A non-autoregressive model spends its first updates as a target-side language model
before it learns to use the source (docs/reproducing.md, the Multi30k quality study);
an autoregressive model of the same sizes, e.g. the distillation teacher, already
encodes the source and attends to it. Guo et al. (2020, "Fine-Tuning by Curriculum
Learning for Non-Autoregressive Neural Machine Translation", AAAI) transfer a trained
autoregressive model to a NAT of the same configuration by fine-tuning; they report that
fine-tuning it directly "does not work well" and move from the autoregressive to the
non-autoregressive form over a curriculum (decoder inputs, attention masks). Gong et al.
(2025, "Scaling Diffusion Language Models via Adaptation from Autoregressive Models",
ICLR) adapt autoregressive language models to masked diffusion, removing the causal mask
gradually and shifting the logits by one position. Here only the weight copy is done,
once, before the first update (the direct fine-tuning): no curriculum, no mask annealing,
no shift; the decoder is bidirectional and reads ``<mask>`` from the first update. How
much it helps is measured in docs/training.md.

What is copied (``copy_autoregressive``): every tensor of the CMLM that the
autoregressive model has under the same name and shape (embeddings, encoder and decoder
layers, output projection); the embedding matrices row by row for the symbols both
dictionaries hold, so our appended ``<mask>`` row keeps its initialisation; learned
position embeddings from the autoregressive model's sinusoidal table (the same values
at the same positions) when it has no learned ones. The length head keeps its
initialisation. With ``--insert-causal-attn`` each decoder layer's added causal
self-attention (and its layer norm) also takes the autoregressive layer's self-attention,
the one that was causal there. Anything else (another number of layers, other sizes) is
an error naming the tensor, never a partial copy.
"""

import os
import sys
from typing import Dict, List, Tuple

import torch
from fairseq.modules import SinusoidalPositionalEmbedding
from torch import Tensor

from ..checkpoints.autoregressive import load_autoregressive
from ..errors import CMLMPluginError

FLAG = "--init-from-ar"
OWN_PREFIXES = ("length_head.",)  # the CMLM's own parts, which no AR model has
IGNORED_SUFFIXES = ("version", "_float_tensor")  # fairseq's bookkeeping buffers
ROW_COPIED_SUFFIXES = ("embed_tokens.weight", "output_projection.weight", "embed_positions.weight")
# architecture options that change what a copied weight computes (fairseq's defaults)
COMPARED_OPTIONS = {
    "activation_fn": "relu",
    "encoder_normalize_before": False,
    "decoder_normalize_before": False,
    "no_scale_embedding": False,
    "layernorm_embedding": False,
}


def copy_autoregressive(
    ours: Dict[str, Tensor], theirs: Dict[str, Tensor]
) -> Tuple[Dict[str, Tensor], List[str]]:
    """Our state dict with every tensor ``theirs`` (the AR model's) has; and the keys kept.

    A tensor of ``ROW_COPIED_SUFFIXES`` takes its first rows from theirs when only the
    row count differs (``V_ar x C`` into ``V x C``); every other tensor must match in
    shape. Keys of ours missing from theirs are allowed under ``OWN_PREFIXES`` only;
    keys of theirs missing from ours under ``IGNORED_SUFFIXES`` only.
    """
    missing = [k for k in ours if k not in theirs and not k.startswith(OWN_PREFIXES)]
    extra = [k for k in theirs if k not in ours and not k.endswith(IGNORED_SUFFIXES)]
    if missing or extra:
        lacks = f"it lacks {', '.join(missing[:3])}" if missing else ""
        has = f"it has {', '.join(extra[:3])}, which this model lacks" if extra else ""
        raise CMLMPluginError(
            f"{FLAG}: the autoregressive model is not of this model's shape "
            f"({'; '.join(x for x in (lacks, has) if x)}): train it with the same "
            "--encoder-layers/--decoder-layers and sizes, --share-all-embeddings as here"
        )
    state, kept = {}, [k for k in ours if k not in theirs]
    for key, mine in ours.items():
        if key not in theirs:
            state[key] = mine
            continue
        source = theirs[key].to(mine.dtype)
        if source.shape == mine.shape:
            state[key] = source.clone()
        elif key.endswith(ROW_COPIED_SUFFIXES) and source.shape[1:] == mine.shape[1:]:
            rows = min(source.size(0), mine.size(0))
            state[key] = mine.clone()
            state[key][:rows] = source[:rows]  # rows x C: the symbols (positions) both have
        else:
            raise CMLMPluginError(
                f"{FLAG}: the autoregressive model's {key} is {tuple(source.shape)}, this "
                f"model's {tuple(mine.shape)}: train it with the same sizes as here"
            )
    return state, kept


def _sinusoidal_positions(ar_model, ours: Dict[str, Tensor]) -> Dict[str, Tensor]:
    """``rows x C`` sinusoidal tables for our learned position embeddings it has not."""
    tables = {}
    for side in ("encoder", "decoder"):
        key = f"{side}.embed_positions.weight"
        module = getattr(getattr(ar_model, side), "embed_positions", None)
        if key in ours and isinstance(module, SinusoidalPositionalEmbedding):
            rows, dim = ours[key].shape
            tables[key] = SinusoidalPositionalEmbedding.get_embedding(
                rows, dim, module.padding_idx
            )  # rows x C, row p + padding_idx + 1 for position p as in both modules
    return tables


def _causal_sublayers(ours: Dict[str, Tensor], theirs: Dict[str, Tensor]) -> Dict[str, Tensor]:
    """Our causal decoder sublayers (``--insert-causal-attn``) from the autoregressive
    decoder's self-attention, which is causal: it also starts our bidirectional one."""
    copies = {}
    for key in ours:
        if key.startswith("decoder.layers.") and ".causal_attn" in key:
            source = key.replace(".causal_attn_layer_norm.", ".self_attn_layer_norm.")
            source = source.replace(".causal_attn.", ".self_attn.")
            if source in theirs:
                copies[key] = theirs[source]
    return copies


def _option_differences(ar_model, model) -> List[str]:
    differences = []
    for name, default in COMPARED_OPTIONS.items():
        theirs = getattr(getattr(ar_model, "args", None), name, default)
        mine = getattr(getattr(model, "args", None), name, default)
        if theirs != mine:
            flag = "--" + name.replace("_", "-")
            differences.append(f"{flag} {theirs} there, {mine} here")
    return differences


def init_from_autoregressive(model, path: str, src_dict, tgt_dict, languages=None) -> str:
    """Copy the AR checkpoint ``path`` into ``model`` in place; a one-line report."""
    if not os.path.isfile(path):
        raise CMLMPluginError(
            f"{FLAG} {path}: no such checkpoint file: give the autoregressive model to start "
            "from (a resumed training needs it too, since fairseq builds the model before "
            "it loads checkpoint_last.pt: drop --init-from-ar to resume without it)"
        )
    ar_model = load_autoregressive(
        path, src_dict, tgt_dict, languages, flag=FLAG, who="the autoregressive model"
    )
    ours = model.state_dict()
    theirs = dict(ar_model.state_dict())
    positions = _sinusoidal_positions(ar_model, ours)
    theirs.update(positions)
    theirs.update(_causal_sublayers(ours, theirs))
    state, kept = copy_autoregressive(ours, theirs)
    with torch.no_grad():
        for key, tensor in state.items():
            ours[key].copy_(tensor)  # state_dict() tensors share the parameters' storage
    for difference in _option_differences(ar_model, model):
        print(
            f"cmlm_plugin warning: {FLAG} {path}: the autoregressive model differs in "
            f"{difference}; its copied weights compute something else here (set the "
            "option as there to start from the same function)",
            file=sys.stderr,
            flush=True,
        )
    unique = {t.data_ptr(): k for k, t in ours.items()}  # shared embeddings counted once
    copied = sum(ours[k].numel() for k in unique.values() if k not in kept)
    total = sum(ours[k].numel() for k in unique.values())
    return (
        f"{FLAG} {path}: copied {len(state) - len(kept)} tensors ({copied:,} of {total:,} "
        f"values{', positions from its sinusoidal table' if positions else ''}); kept at "
        f"initialisation: {', '.join(kept) or 'nothing'} and the embedding rows of the "
        f"symbols it lacks ({len(tgt_dict) - ar_model.decoder.embed_tokens.num_embeddings})"
    )
