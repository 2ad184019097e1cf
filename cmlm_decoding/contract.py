"""What both decoding loops share: the step function, the start tokens, the result, and
the error a bad option raises.

The step (``Step``) is the model seen from a decoding loop. ``step(tokens, rows)`` gets
the ``n x L`` current tokens of the rows ``rows`` of the batch (all ``N`` rows when
``rows`` is None) and returns ``n x L x V`` scores over the vocabulary. Called as
``step(tokens, rows, where)`` with an ``n x L`` bool ``where`` (a loop's ``sparse_step``
option), it returns ``M x V`` scores for the ``M`` positions where ``where`` is True,
in row-major order, so that the output projection skips the others. Mask-Predict reads
the scores as log-probabilities (the caller normalises), the diffusion sampler as
logits (it normalises itself); either way symbols a position may never take (pad,
mask) must score -inf.
"""

from typing import List, NamedTuple, Optional, Protocol

import torch
from torch import Tensor


class Step(Protocol):
    def __call__(
        self, tokens: Tensor, rows: Optional[Tensor], where: Optional[Tensor] = None
    ) -> Tensor: ...


class DecodeResult(NamedTuple):
    """The output of either loop, one row per decoded candidate."""

    tokens: Tensor  # N x L, pad after each row's length
    token_logprobs: Tensor  # N x L, log-probability of each generated token, 0 elsewhere
    scores: Tensor  # N, mean log-probability over the generated tokens
    steps: Tensor  # N, model calls spent on the row (Mask-Predict passes, diffusion NFE)
    history: List[Tensor]  # N x L tokens after every call, if asked for


def initial_tokens(lengths: Tensor, mask_idx: int, pad_idx: int) -> Tensor:
    """``N x L``: ``<mask>`` at the first ``lengths[i]`` positions, pad after."""
    width = int(lengths.max()) if lengths.numel() else 0
    real = torch.arange(width, device=lengths.device)[None, :] < lengths[:, None]  # N x L
    pad = torch.full(real.shape, pad_idx, dtype=torch.long, device=lengths.device)
    return pad.masked_fill(real, mask_idx)


class _Names(dict):
    def __missing__(self, key: str) -> str:
        return key


def literal(value) -> str:
    """``repr(value)`` safe to embed in an ``OptionError`` template."""
    return repr(value).replace("{", "{{").replace("}", "}}")


class OptionError(ValueError):
    """A decoding option out of range, raised when the options record is built.

    The message is a template whose ``{field}`` names are filled with the record's
    field names (``str(error)``) or with the caller's own names for them, e.g. the
    command-line flags (``error.render({"num_passes": "--iter-decode-max-iter"})``).
    """

    def __init__(self, template: str):
        self.template = template
        super().__init__(self.render({}))

    def render(self, names) -> str:
        return self.template.format_map(_Names(names))


def check_choice(field: str, value, allowed) -> None:
    """Raise an ``OptionError`` unless the option ``field`` holds one of ``allowed``."""
    if value not in allowed:
        raise OptionError(
            "{" + field + "} must be one of " + ", ".join(allowed) + ", got " + literal(value)
        )
