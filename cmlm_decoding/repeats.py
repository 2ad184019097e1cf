"""Collapsing immediate repeats in a finished output ("Hund Hund" -> "Hund").

Parallel decoders predict neighbouring positions independently, so two positions often
settle on the same token: the repetitions of non-autoregressive translation (Gu et al.,
ICLR 2018, §3.2; Wang et al., AAAI 2019). Lee et al. (EMNLP 2018) remove consecutive
repeated tokens from their outputs as a post-processing step in their released code;
Mask-Predict does not, and neither does this package unless asked
(``--collapse-repeats``). Each run of one token at adjacent positions is kept once, at
its first position, and the row is compacted to the left. Positions marked ``protected``
(the given tokens of an infilling template) are always kept.
"""

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor


def repeat_positions(tokens: Tensor, pad: int, protected: Optional[Tensor] = None) -> Tensor:
    """``N x L`` bool: True where a token equals the one before it (not at pad or protected).

    Args:
        tokens: ``N x L`` with ``pad`` after each row's length.
        protected: ``N x L`` bool or None, positions never dropped.
    """
    previous = F.pad(tokens[:, :-1], (1, 0), value=pad)  # N x L, pad before the first
    repeated = tokens.eq(previous) & tokens.ne(pad)  # N x L
    if protected is not None:
        repeated = repeated & ~protected
    return repeated


def collapse_repeats(
    tokens: Tensor, token_logprobs: Tensor, pad: int, protected: Optional[Tensor] = None
) -> Tuple[Tensor, Tensor]:
    """Drop the ``repeat_positions`` of each row and move the rest left, in order.

    Returns ``(tokens, token_logprobs)``, ``N x L`` each as given: pad (and log-probability
    0) fill the freed positions at the end of each row. A kept token keeps its
    log-probability. No loop over rows: a stable sort puts each row's kept positions first.
    """
    dropped = repeat_positions(tokens, pad, protected) | tokens.eq(pad)  # N x L
    order = torch.sort(dropped.to(torch.uint8), dim=1, stable=True).indices  # N x L
    moved = dropped.gather(1, order)  # N x L, False then True in every row
    out_tokens = tokens.gather(1, order).masked_fill(moved, pad)  # N x L
    out_logprobs = token_logprobs.gather(1, order).masked_fill(moved, 0.0)  # N x L
    return out_tokens, out_logprobs
