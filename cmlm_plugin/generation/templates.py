"""Infilling templates: target tokens given by the user, ``<mask>`` where to generate.

Text to pieces (``encode_template``, used by ``TemplateBPE`` for ``fairseq-interactive``
and by ``generation.infill`` for the hub): a ``<mask>`` stands for one target piece
(one subword unit) and ``<mask:N>`` for N of them. The text between masks is encoded by
the tokenizer and BPE on its own, so the space in front of a mask is never a piece of
its own: under sentencepiece, ``Ein Mann <mask> Fahrrad .`` is ``▁Ein ▁Mann <mask>
▁Fahrrad ▁.``, not ``▁Ein ▁Mann ▁ <mask> ...``, and the masked position is free to
start a word (``▁eine``) or to continue one. Text glued to the end of a mask
(``<mask>.``) continues the mask's word: its first piece loses the word-start mark
``▁`` when the vocabulary has that piece.

Pieces to decoding: a template arrives as the first of fairseq's packed constraints
(``fairseq.token_generation_constraints``: ``[count, c1..., 0, c2..., 0, ...]``), as
``fairseq-interactive --constraints`` builds them from ``source<TAB>template`` lines or
``generation.infill`` from Python. It fixes the candidate's length and its given
tokens; the decoding loops fill only its ``<mask>`` positions. A template without any
``<mask>`` generates nothing (``unmasked_templates`` finds them, the task warns).
"""

import re
from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor

from ..errors import CMLMPluginError
from ..symbols import MASK_SYMBOL
from ..task_tags import TaskTags, split_tag

MASK_MARKUP = re.compile(r"<mask(?::(\d+))?>")  # <mask> or <mask:N>
MAX_SPAN = 4096  # the largest N of <mask:N>: far beyond any model's target positions
WORD_START = "\u2581"  # sentencepiece's word-start mark


def is_sentencepiece(bpe) -> bool:
    """Whether ``bpe`` (a fairseq BPE object or None) is fairseq's sentencepiece."""
    from fairseq.data.encoders.sentencepiece_bpe import SentencepieceBPE

    return isinstance(getattr(bpe, "bpe", bpe), SentencepieceBPE)


def continue_word(pieces: List[str], dictionary, sentencepiece: bool) -> List[str]:
    """``pieces`` of text glued to the end of a mask, as the continuation of its word."""
    if not (sentencepiece and pieces and pieces[0].startswith(WORD_START)):
        return pieces
    if pieces[0] == WORD_START:  # "▁ ." : the mark alone
        return pieces[1:]
    inner = pieces[0][len(WORD_START) :]
    if dictionary is not None and dictionary.index(inner) != dictionary.unk():
        return [inner] + pieces[1:]
    return pieces  # the vocabulary has no continuation piece: the text starts a word


def encode_template(
    text: str, encode: Callable[[str], str], dictionary=None, sentencepiece: bool = False
) -> str:
    """The space-separated pieces of a template, one ``<mask>`` per piece to generate.

    ``encode`` is the tokenizer and BPE (text to pieces); ``dictionary`` the target
    dictionary (for glued continuations). Text without ``<mask>`` markup is ``encode(text)``.
    """
    if not MASK_MARKUP.search(text):
        return encode(text)
    pieces, end = [], 0
    for match in list(MASK_MARKUP.finditer(text)) + [None]:
        segment = text[end : match.start() if match else len(text)]
        if segment.strip():
            encoded = encode(segment.strip()).split()
            if end > 0 and not segment[0].isspace():
                encoded = continue_word(encoded, dictionary, sentencepiece)
            pieces += encoded
        if match is None:
            break
        count = int(match.group(1) or 1)
        if not 1 <= count <= MAX_SPAN:
            raise CMLMPluginError(
                f"an infilling template has {match.group(0)}: write <mask:N> with "
                f"1 <= N <= {MAX_SPAN} (N pieces to generate)"
            )
        pieces += [MASK_SYMBOL] * count
        end = match.end()
    return " ".join(pieces)


class TemplateBPE:
    """fairseq's BPE (or none), with text holding ``<mask>`` encoded by ``encode_template``.

    ``fairseq-interactive`` encodes sources and ``--constraints`` templates with the
    task's BPE (the hub interface gets it from ``CMLMPluginModel.from_pretrained``);
    this wrapper changes only text that holds ``<mask>`` markup or starts with a task
    tag (``task_tags``): the tag is checked against ``tags`` (the source dictionary's
    ``TaskTags``; default: those of ``dictionary``) and kept whole.
    """

    def __init__(self, bpe, dictionary, tags: Optional[TaskTags] = None):
        self.bpe = bpe
        self.dictionary = dictionary
        self.tags = TaskTags(dictionary) if tags is None else tags
        self.sentencepiece = is_sentencepiece(bpe)

    def piece(self, text: str) -> str:
        return text if self.bpe is None else self.bpe.encode(text)

    def encode(self, text: str) -> str:
        tag, rest = split_tag(text)
        pieces = encode_template(rest, self.piece, self.dictionary, self.sentencepiece)
        if tag is None:
            return pieces
        self.tags.index(tag)  # a clear error for an unknown tag
        return f"{tag} {pieces}".rstrip()

    def decode(self, text: str) -> str:
        return text if self.bpe is None else self.bpe.decode(text)

    def __getattr__(self, name):  # is_beginning_of_word, ... of the wrapped BPE
        bpe = self.__dict__.get("bpe")
        if bpe is None:
            raise AttributeError(name)
        return getattr(bpe, name)


def unmasked_templates(constraints: Tensor, mask_idx: int) -> List[Tuple[int, List[int]]]:
    """``(row, template)`` of the ``B x K`` packed ``constraints`` with no ``<mask>``.

    Empty templates are left to ``parse_templates``, which refuses them.
    """
    found = []
    for i, row in enumerate(constraints.tolist()):  # input preparation, once per batch
        body = row[1:]
        template = body[: body.index(0)] if 0 in body else body
        if row[0] > 0 and template and mask_idx not in template:
            found.append((i, template))
    return found


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
