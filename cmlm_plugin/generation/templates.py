"""Infilling templates: target tokens given by the user, ``<mask>`` where to generate.

A template arrives as the first of fairseq's packed constraints
(``fairseq.token_generation_constraints``: ``[count, c1..., 0, c2..., 0, ...]``), as
``fairseq-interactive --constraints`` builds them from ``source<TAB>template`` lines or
``generation.infill`` from Python. It fixes the candidate's length and its given
tokens; the decoding loops fill only its ``<mask>`` positions.
"""

from typing import List, Optional, Tuple

import torch
from torch import Tensor

from ..errors import CMLMPluginError


def parse_templates(constraints: Tensor, max_length: int, special) -> List[Optional[List[int]]]:
    """Per sentence, the template in the ``B x K`` packed ``constraints``, or None.

    ``special`` holds the symbols a template may not contain (pad, BOS, EOS).
    """
    special = set(special)
    found = []
    for row in constraints.tolist():  # input preparation, once per batch
        if row[0] == 0:
            found.append(None)
            continue
        body = row[1:]
        template = body[: body.index(0)] if 0 in body else body
        if not template:
            raise CMLMPluginError("an infilling template is empty: give its tokens and <mask>s")
        if set(template) & special:
            raise CMLMPluginError("an infilling template holds pad/BOS/EOS: give words and <mask>s")
        if len(template) > max_length:
            raise CMLMPluginError(
                f"an infilling template has {len(template)} tokens, more than the "
                f"model's {max_length} target positions"
            )
        found.append(template)
    return found


def apply_templates(
    templates: List, lengths: Tensor, mask_idx: int, pad_idx: int
) -> Tuple[Tensor, Tensor]:
    """Template rows get the template's length for every candidate.

    Returns the new ``B x beam`` lengths and the ``B x L`` start tokens (templates,
    or all ``<mask>`` up to the longest candidate).
    """
    device = lengths.device
    for i, template in enumerate(templates):
        if template is not None:
            lengths[i] = len(template)
    width = int(lengths.max())
    start = torch.full((lengths.size(0), width), mask_idx, dtype=torch.long, device=device)
    for i, template in enumerate(templates):
        if template is not None:
            start[i, : len(template)] = torch.tensor(template, device=device)
            start[i, len(template) :] = pad_idx
    return lengths, start


def start_tokens(initial: Tensor, template: Optional[Tensor], mask_idx: int) -> Tensor:
    """``N x L``: the ``initial`` all-``<mask>`` rows, with a template's given tokens."""
    if template is None:
        return initial
    return torch.where(initial.eq(mask_idx), template[:, : initial.size(1)], initial)
