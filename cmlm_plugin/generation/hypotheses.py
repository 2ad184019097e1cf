"""The decoding core's result in fairseq's hypothesis format.

fairseq's commands expect, per sentence, a list of hypothesis dicts (``tokens`` ending in
EOS, ``score``, ``positional_scores``, ``attention``, ``alignment``); the plugin adds
``steps`` (passes, or model calls of the diffusion sampler) and, with
``--retain-iter-history``, ``history`` (the output after every pass).
"""

from typing import Dict, List

import torch
from torch import Tensor


def hypotheses(
    result, best: Tensor, empty: Tensor, pad: int, eos: int, retain_history: bool
) -> List[List[Dict]]:
    """One list holding one hypothesis per sentence.

    Args:
        result: a ``cmlm_decoding.DecodeResult`` over the ``N`` candidates.
        best: ``(B,)`` the candidate kept for each sentence.
        empty: ``(B,)`` bool, sentences whose source is empty: they get the empty
            hypothesis (no token, score 0).
    """
    # the loop below only slices finished tensors into per-sentence outputs
    tokens = result.tokens[best].cpu()  # B x L
    logprobs = result.token_logprobs[best].cpu()  # B x L
    scores = result.scores[best].cpu()
    steps = result.steps[best].cpu()
    kept = result.tokens[best].ne(pad).sum(dim=1).masked_fill(empty, 0).cpu()  # B
    empty = empty.cpu()
    history = [h[best].cpu() for h in result.history]
    eos = torch.tensor([eos])
    hypos = []
    for i in range(best.numel()):
        n = int(kept[i])
        hypo = {
            "tokens": torch.cat([tokens[i, :n], eos]),
            "score": 0.0 if empty[i] else float(scores[i]),
            "positional_scores": logprobs[i, :n],
            "attention": None,
            "alignment": None,
            "steps": 0 if empty[i] else int(steps[i]),
        }
        if retain_history:
            hypo["history"] = [
                {
                    "tokens": torch.cat([h[i, :n], eos]),
                    "score": 0.0,
                    "attention": None,
                    "alignment": None,
                }
                for h in history[: int(steps[i])]
            ]
        hypos.append([hypo])
    return hypos
