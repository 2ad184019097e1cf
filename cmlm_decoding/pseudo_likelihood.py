"""Masked pseudo-log-likelihood of finished candidates, for choosing among length candidates.

Mask-Predict (Ghazvininejad et al., 2019, Section 3.3) keeps the length candidate with the
highest mean log-probability, each token scored at the pass that last predicted it: a
token fixed in the first pass was scored with the whole target masked, one re-predicted
in the last pass with most of it observed. Salazar et al. (ACL 2020, "Masked Language
Model Scoring", Eq. 2) score a sentence instead by its pseudo-log-likelihood: the sum over
positions of log P(y_i | y without y_i). Exact, that takes n model calls per candidate;
``pseudo_log_likelihood`` approximates it with G calls: call g masks the positions i with
i mod G == g and reads the log-probabilities of the candidate's tokens there, so every
token is scored once, with 1 - 1/G of the others observed. Not in either paper: the G-way
split, and its use for the length beam of a conditional model.
"""

import torch
from torch import Tensor

from .contract import Step


def pseudo_log_likelihood(step: Step, tokens: Tensor, mask_idx: int, pad_idx: int, groups: int):
    """Mean over each candidate's tokens of log P(y_i | the other tokens of group split).

    Args:
        step: the decoder (``contract.Step``); its scores at the hidden positions
            (logits or log-probabilities, banned symbols at -inf) are log-softmaxed.
        tokens: ``N x L`` finished candidates, pad after each row's length.
        mask_idx, pad_idx: the mask and pad symbols.
        groups: G >= 1 model calls; call g masks positions ``i % G == g``.

    Returns:
        ``(N,)`` float mean log-probabilities (0 for an empty row).
    """
    if groups < 1:
        raise ValueError(f"groups must be >= 1, got {groups}")
    real = tokens.ne(pad_idx)  # N x L
    group = torch.arange(tokens.size(1), device=tokens.device) % groups  # L
    total = torch.zeros(tokens.shape, dtype=torch.float, device=tokens.device)  # N x L
    for g in range(min(groups, tokens.size(1))):  # G calls over all candidates at once
        hidden = real & group.eq(g)[None, :]  # N x L
        scores = step(tokens.masked_fill(hidden, mask_idx), None, hidden)  # M x V
        logprobs = torch.log_softmax(scores.float(), dim=-1)  # M x V, logits or log-probs
        picked = logprobs.gather(1, tokens[hidden][:, None]).squeeze(1)  # M
        total = total.masked_scatter(hidden, picked)  # N x L
    count = real.sum(dim=1).clamp(min=1)  # N
    return total.sum(dim=1) / count
