"""Reranking the length candidates with an autoregressive model (``--rerank-with``).

Mask-Predict (Ghazvininejad et al., 2019, Section 3.3) decodes the top-l lengths in
parallel and keeps the candidate with the highest mean log-probability under the CMLM
itself. fairseq's ``IterativeRefinementGenerator`` can instead rescore the finished
candidates with an autoregressive model (``--iter-decode-with-external-reranker``,
``fairseq/iterative_refinement_generator.py: rerank``): one teacher-forced decoder pass
over ``EOS y_1 .. y_n`` that predicts ``y_1 .. y_n EOS``, the score being the mean
log-probability of those n + 1 tokens, which replaces the NAT score. This module offers
the same for our l candidates:

- ``load_reranker`` reads a fairseq autoregressive encoder-decoder checkpoint (e.g.
  ``fairseq-train --task translation --arch transformer``) through
  ``checkpoints.autoregressive``: weights-only, its dictionaries checked against ours
  (our ``<mask>``, which ``--task cmlm`` appends, aside), the model in eval mode;
- ``Reranker.score`` scores all ``N = B * l`` candidates of a batch in one batched pass:
  the encoder once per sentence, the decoder once for every candidate;
- ``combine`` mixes the two scores, ``W * AR + (1 - W) * CMLM`` (``--rerank-weight W``;
  W = 1, the default, is fairseq's rule: the AR score alone).

The AR score is normalised like fairseq's: the mean over the n tokens plus EOS (natural
log). A sum would favour the shorter candidates, which is the bias the length beam is
there to correct. The hypothesis keeps the CMLM's own score (``H-`` lines); only the
choice among the candidates changes.
"""

import os
import sys
from typing import Optional

import torch
from fairseq.data import Dictionary
from torch import Tensor

from ..checkpoints.autoregressive import load_autoregressive
from ..errors import CMLMPluginError

FLAG = "--rerank-with"
WEIGHT_FLAG = "--rerank-weight"
_LOADED = {}  # the last reranker loaded, by (path, mtime, dictionaries)


def combine(cmlm_scores: Tensor, ar_scores: Tensor, weight: float) -> Tensor:
    """``weight * ar_scores + (1 - weight) * cmlm_scores``, both ``(N,)``; weight 1: AR alone.

    A candidate the CMLM scored ``-inf`` (dropped by ``--length-prune-after``) stays out.
    """
    cmlm_scores = cmlm_scores.to(ar_scores.dtype)
    mixed = ar_scores if weight == 1.0 else weight * ar_scores + (1.0 - weight) * cmlm_scores
    return mixed.masked_fill(cmlm_scores == float("-inf"), float("-inf"))


def check_weight(weight: float) -> None:
    if not 0.0 < weight <= 1.0:
        raise CMLMPluginError(
            f"{WEIGHT_FLAG} is the AR score's share of the candidate score and must be in "
            f"(0, 1] (1: the AR score alone, fairseq's rule), got {weight}"
        )


class Reranker:
    """An autoregressive model that scores finished candidates, teacher-forced."""

    def __init__(self, model, pad: int, eos: int, unk: int):
        self.model = model.eval()
        self.pad, self.eos, self.unk = pad, eos, unk
        self.source_vocab = model.encoder.embed_tokens.num_embeddings

    def follow(self, model) -> None:
        """Put the reranker on ``model``'s device and floating-point type (once)."""
        theirs = next(self.model.parameters())
        ours = next(model.parameters())
        if theirs.device != ours.device or theirs.dtype != ours.dtype:
            self.model.to(device=ours.device, dtype=ours.dtype)

    @torch.no_grad()
    def score(self, src_tokens: Tensor, src_lengths: Tensor, tokens: Tensor, order: Tensor):
        """Mean log-probability of ``y_1 .. y_n EOS`` for each candidate, ``(N,)`` float32.

        Args:
            src_tokens: ``B x S`` the batch's sources, ``src_lengths`` ``(B,)``.
            tokens: ``N x L`` the candidates, pad after each row's length (no EOS).
            order: ``(N,)`` the sentence of each candidate.
        """
        model = self.model
        # our <mask> (typed into a source line) is outside the reranker's vocabulary
        sources = src_tokens.masked_fill(src_tokens >= self.source_vocab, self.unk)  # B x S
        encoder_out = model.encoder(sources, src_lengths=src_lengths)  # once per sentence
        encoder_out = model.encoder.reorder_encoder_out(encoder_out, order)  # N candidates
        num = tokens.size(0)
        lengths = tokens.ne(self.pad).sum(dim=1)  # N
        pads = tokens.new_full((num, 1), self.pad)
        target = torch.cat([tokens, pads], dim=1)  # N x (L+1)
        target.scatter_(1, lengths[:, None], self.eos)  # y_1 .. y_n EOS pad ..
        previous = torch.cat([pads.fill_(self.eos), tokens], dim=1)  # N x (L+1): EOS y_1 .. y_n
        real = target.ne(self.pad)  # N x (L+1): the n + 1 scored positions
        decoder = model.decoder
        if getattr(decoder, "adaptive_softmax", None) is None and hasattr(decoder, "output_layer"):
            features, _ = decoder(previous, encoder_out=encoder_out, features_only=True)
            # only the M scored positions are projected (one host sync per batch: M's size)
            logits = decoder.output_layer(features[real]).float()  # M x V
            picked = logits.gather(1, target[real][:, None]).squeeze(1)  # M
            token_logprobs = picked - logits.logsumexp(dim=1)  # M
        else:  # adaptive softmax: fairseq's normalisation over the whole batch
            output = decoder(previous, encoder_out=encoder_out)
            logprobs = model.get_normalized_probs(output, log_probs=True).float()  # N x L+1 x V
            token_logprobs = logprobs.gather(2, target[:, :, None]).squeeze(2)[real]  # M
        per_token = token_logprobs.new_zeros(real.shape).masked_scatter_(real, token_logprobs)
        return per_token.sum(dim=1) / (lengths + 1).to(per_token.dtype)  # N


def load_reranker(path: str, src_dict: Dictionary, tgt_dict: Dictionary, languages=None):
    """The reranker of checkpoint ``path`` (``checkpoints.autoregressive``), checked."""
    model = load_autoregressive(path, src_dict, tgt_dict, languages, flag=FLAG, who="the reranker")
    return Reranker(model, tgt_dict.pad(), tgt_dict.eos(), tgt_dict.unk())


def build_reranker(task_cfg, src_dict, tgt_dict, beam: int) -> Optional[Reranker]:
    """The reranker ``--rerank-with`` names, or None (flag unset, or l = 1: a warning)."""
    path = getattr(task_cfg, "rerank_with", None)
    check_weight(getattr(task_cfg, "rerank_weight", 1.0))
    if not path:
        return None
    if beam < 2:  # one candidate: nothing to choose, so the AR model is not even loaded
        print(
            f"cmlm_plugin warning: {FLAG} has one candidate to choose from at "
            f"--iter-decode-with-beam {beam}: the reranker is not loaded and outputs are "
            "unchanged; rerank with --iter-decode-with-beam 2 or more",
            file=sys.stderr,
            flush=True,
        )
        return None
    # the hub builds a generator per translate call: load each checkpoint once per task
    key = (os.path.abspath(path), os.path.getmtime(path) if os.path.exists(path) else None)
    key += (id(src_dict), id(tgt_dict))
    if key not in _LOADED:
        _LOADED.clear()
        languages = (getattr(task_cfg, "source_lang", None), getattr(task_cfg, "target_lang", None))
        _LOADED[key] = load_reranker(path, src_dict, tgt_dict, languages)
    return _LOADED[key]
