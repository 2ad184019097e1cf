"""Length candidates and candidate selection (Mask-Predict's length beam).

Ghazvininejad et al. (2019), Section 3.3: the top-l lengths of the predicted length
distribution are decoded in parallel and the candidate with the highest average
log-probability is kept. Lengths outside ``[1, max_length]`` are never proposed.
"""

from typing import Tuple

import torch
from torch import Tensor


def length_candidates(
    length_logprobs: Tensor, class_lengths: Tensor, beam: int, max_length: int
) -> Tuple[Tensor, Tensor]:
    """Top-``beam`` target lengths per sentence.

    Args:
        length_logprobs: ``B x C`` log-probabilities of the C length classes.
        class_lengths: ``B x C`` the target length each class stands for (the
            class index itself, or source length + offset).
        beam: l, the number of candidates per sentence (``1 <= beam <= C``).
        max_length: the largest length the decoder can hold.

    Returns:
        ``(lengths, logprobs)``, each ``B x beam``, best first. Classes whose
        length lies outside ``[1, max_length]`` are ranked last; if a row has fewer
        than ``beam`` valid classes its extra candidates are clamped into range.
    """
    num_classes = length_logprobs.size(1)
    if not 1 <= beam <= num_classes:
        raise ValueError(
            f"length beam must be in [1, {num_classes}] (the number of length "
            f"classes), got {beam}"
        )
    invalid = (class_lengths < 1) | (class_lengths > max_length)  # B x C
    ranked = length_logprobs.masked_fill(invalid, float("-inf"))  # B x C
    top_logprobs, top_classes = ranked.topk(beam, dim=1)  # B x beam
    lengths = class_lengths.gather(1, top_classes).clamp(1, max_length)  # B x beam
    return lengths, top_logprobs


def select_best(scores: Tensor, beam: int) -> Tensor:
    """Index of the best candidate of each sentence.

    Args:
        scores: ``(B * beam,)`` candidate scores, candidates of one sentence
            contiguous.
        beam: candidates per sentence.

    Returns:
        ``(B,)`` flat indices into ``scores`` of each sentence's best candidate
        (the first one on ties).
    """
    per_sentence = scores.view(-1, beam)  # B x beam
    best = per_sentence.argmax(dim=1)  # B
    offsets = torch.arange(per_sentence.size(0), device=scores.device) * beam
    return offsets + best
