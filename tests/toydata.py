"""Tiny generated parallel data for the tests (no download).

``write_transduction`` makes a deterministic token mapping with local reordering
(adjacent pairs swapped). With ``styles=2`` every target sentence is written in one
of two randomly chosen "styles" (all its tokens carry the prefix ``x`` or ``y``):
the source does not tell which, so a single non-autoregressive pass mixes them
(the multimodality problem) and refinement passes should make them consistent.
"""

import random
from pathlib import Path
from typing import Dict


def transduce(source, style: str):
    target = [f"{style}{token[1:]}" for token in source]
    for i in range(0, len(target) - 1, 2):
        target[i], target[i + 1] = target[i + 1], target[i]
    return target


def write_transduction(
    folder: Path,
    sizes: Dict[str, int],
    seed: int = 0,
    vocab: int = 20,
    min_len: int = 3,
    max_len: int = 8,
    styles: int = 1,
) -> None:
    """Write ``{split}.src`` / ``{split}.tgt`` for each split in ``sizes``."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for split, count in sizes.items():
        sources, targets = [], []
        for _ in range(count):
            length = rng.randint(min_len, max_len)
            source = [f"a{rng.randrange(vocab)}" for _ in range(length)]
            style = "xy"[rng.randrange(styles)] if styles > 1 else "b"
            sources.append(" ".join(source))
            targets.append(" ".join(transduce(source, style)))
        (folder / f"{split}.src").write_text("\n".join(sources) + "\n")
        (folder / f"{split}.tgt").write_text("\n".join(targets) + "\n")
