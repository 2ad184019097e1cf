"""Task tags: one CMLM serving several tasks, chosen by a symbol in front of the source.

The first design source's closing tip, done as multilingual NMT does it (Johnson et
al., 2017, "Google's Multilingual Neural Machine Translation System": a target-language
token such as ``<2de>`` prepended to the source). A tag is an ordinary symbol of the
joined dictionary that reads ``<2NAME>``; ``examples/translation/prepare-multi30k-tagged.sh``
writes it in front of every binarized source, so ``fairseq-preprocess`` counts it and
the dictionary holds one tag per task. Nothing in the model knows about tags.

Decoding takes a sentence's tag from the sentence itself (its first token), or from
``--target-tag`` for sentences that have none; a sentence's own tag wins. Raw text is
encoded with its leading tag split off first (``split_tag``), so sentencepiece never
cuts ``<2de>`` into pieces. A tag the dictionary lacks, or a sentence without a tag for
a model that has tags, is a one-line ``CMLMPluginError`` naming the known tags.
"""

import re
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from .errors import CMLMPluginError

TAG = re.compile(r"<2[^<>\s]+>")  # <2de>, <2fr>, <2summary>, ...
LEADING_TAG = re.compile(r"\s*(<2[^<>\s]+>)\s*")
TAGGING_SCRIPT = "examples/translation/prepare-multi30k-tagged.sh"


def is_tag(symbol: str) -> bool:
    return TAG.fullmatch(symbol) is not None


class TaskTags:
    """The task tags of a dictionary, ``{tag: id}`` in dictionary order, read once.

    The task builds one per source dictionary, so a decoded buffer or an encoded line
    costs no scan of the dictionary. False when the model has no tags (single-task).
    """

    def __init__(self, dictionary):
        self.ids = {s: dictionary.index(s) for s in dictionary.symbols if is_tag(s)}
        self.id_array = np.fromiter(self.ids.values(), dtype=np.int64, count=len(self.ids))

    def __bool__(self) -> bool:
        return bool(self.ids)

    @property
    def names(self) -> List[str]:
        return list(self.ids)

    def index(self, tag: str) -> int:
        """The id of ``tag``; a clear error when the dictionary does not hold it."""
        if not self.ids:
            raise CMLMPluginError(
                f"task tag {tag}: this model's dictionary has no task tags (it was trained "
                f"on untagged data): drop the tag and --target-tag"
            )
        if tag not in self.ids:
            raise CMLMPluginError(
                f"unknown task tag {tag!r}: this model knows {', '.join(self.ids)} "
                "(tags are written <2NAME>, e.g. --target-tag <2de>)"
            )
        return self.ids[tag]

    def untagged(self, first_tokens: Sequence[int]) -> np.ndarray:
        """Boolean mask of the sentences whose first token is not a tag."""
        return ~np.isin(np.asarray(first_tokens, dtype=np.int64), self.id_array)

    def missing_error(self, subject: str) -> CMLMPluginError:
        """The error for sources without a tag; ``subject`` says which ("input line 3 starts")."""
        return CMLMPluginError(
            f"{subject} with no task tag, but this model serves the tasks "
            f"{', '.join(self.ids)}: start each line with its tag, pass "
            f"--target-tag TAG for all of them, or tag the data with {TAGGING_SCRIPT}"
        )

    def fill_in(
        self,
        missing: np.ndarray,
        target_tag: Optional[str],
        describe: Callable[[np.ndarray], str],
    ) -> Optional[int]:
        """The id to put in front of the ``missing`` sources, or None when none is missing.

        Without ``target_tag`` a missing tag is the error whose subject
        ``describe(missing)`` writes (a multi-task model would guess the task).
        """
        if not missing.any():
            return None
        if target_tag is None:
            raise self.missing_error(describe(missing))
        return self.index(target_tag)


def split_tag(text: str) -> Tuple[Optional[str], str]:
    """``(tag, rest)`` of a raw input line; ``(None, text)`` when it starts with no tag."""
    match = LEADING_TAG.match(text)
    if match is None:
        return None, text
    return match.group(1), text[match.end() :]


def tag_raw_sources(
    sources: List[Tensor], tags: TaskTags, target_tag: Optional[str], first_line: int
) -> List[Tensor]:
    """Raw-text sources (each ending with EOS) with ``target_tag`` in front of untagged ones.

    Empty sources (EOS alone) stay as they are: they get the empty output. Without
    ``target_tag``, an untagged source is an error naming its input line.
    """
    if not tags:
        return sources
    firsts = [int(s[0]) if s.numel() else -1 for s in sources]  # once per input buffer
    missing = tags.untagged(firsts) & np.array([s.numel() > 1 for s in sources], bool)
    tag_id = tags.fill_in(
        missing, target_tag, lambda m: f"input line {first_line + int(np.flatnonzero(m)[0])} starts"
    )
    if tag_id is None:
        return sources
    tag = torch.tensor([tag_id], dtype=torch.long)
    return [torch.cat([tag, s]) if m else s for s, m in zip(sources, missing)]


class TaggedSources(torch.utils.data.Dataset):
    """A source dataset with one tag id in front of the sentences marked ``missing``.

    ``sizes`` are the sources' lengths before tagging (a ``LanguagePairDataset``'s
    ``src_sizes``); ``self.sizes`` counts the tags.
    """

    def __init__(self, sources, sizes, tag_id: int, missing: np.ndarray):
        self.sources, self.tag_id, self.missing = sources, tag_id, missing
        self.sizes = np.asarray(sizes) + missing.astype(np.int64)

    def __getitem__(self, index):
        item = self.sources[index]
        if not self.missing[index]:
            return item
        return torch.cat([item.new_tensor([self.tag_id]), item])

    def __len__(self):
        return len(self.sources)

    @property
    def supports_prefetch(self):
        return getattr(self.sources, "supports_prefetch", False)

    def prefetch(self, indices):
        self.sources.prefetch(indices)


def tag_language_pair(dataset, split: str, tags: TaskTags, target_tag: Optional[str]) -> None:
    """Give every source of a ``LanguagePairDataset`` a tag, in place (evaluation splits).

    Sentences that start with a tag keep it; the others get ``target_tag``, or, without
    it, the split is refused (a multi-task model would guess the task).
    """
    if not tags or len(dataset) == 0:
        return
    if getattr(dataset, "buckets", None) is not None:
        raise CMLMPluginError(
            "a multi-task model's evaluation data cannot be bucketed: drop --num-batch-buckets"
        )
    firsts = [int(dataset.src[i][0]) for i in range(len(dataset.src))]  # once per load
    missing = tags.untagged(firsts)
    tag_id = tags.fill_in(
        missing,
        target_tag,
        lambda m: f"split {split}: {int(m.sum())} of {len(m)} source sentences start",
    )
    if tag_id is None:
        return
    dataset.src = TaggedSources(dataset.src, dataset.src_sizes, tag_id, missing)
    dataset.src_sizes = dataset.src.sizes
    tgt_sizes = dataset.tgt_sizes
    dataset.sizes = (
        dataset.src_sizes if tgt_sizes is None else np.vstack((dataset.src_sizes, tgt_sizes)).T
    )  # N x 2
