"""Reading ``fairseq-generate`` output: the ``S-``/``T-``/``H-``/``D-``/``P-``/``I-``/``E-``
lines and the ``Translated ...`` timing line of one saved run (``Generated``,
``read_generate``), the piece scheme of its texts (``detect_scheme``), pieces joined into
words as ``--remove-bpe`` does (``to_words``), and the ``[LABEL=]PATH`` inputs of the
command line (``inputs``).
"""

import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ...errors import CMLMPluginError

_LINE = re.compile(r"^([STHDPIE])-(\d+)(?:_(\d+))?\t(.*)$")
_TRANSLATED = re.compile(r"Translated ([\d,]+) sentences .*?\(([\d.]+) sentences/s")
SCHEMES = ("auto", "sentencepiece", "subword_nmt", "none")


@dataclass
class Generated:
    """What one fairseq-generate output file holds, by sentence id."""

    label: str
    path: str
    refs: Dict[int, str] = field(default_factory=dict)
    hyps: Dict[int, str] = field(default_factory=dict)  # D- lines (H- where no D-)
    logprobs: Dict[int, List[float]] = field(default_factory=dict)  # P- lines, base 2
    passes: Dict[int, int] = field(default_factory=dict)  # I- lines
    history: Dict[int, Dict[int, str]] = field(default_factory=dict)  # E-<id>_<pass>
    sentences_per_s: Optional[float] = None


def read_generate(text: str, label: str, path: str) -> Generated:
    """Parse fairseq-generate output (log lines and other tags are skipped)."""
    out = Generated(label, path)
    h_lines: Dict[int, str] = {}
    for line in text.splitlines():
        match = _LINE.match(line)
        if match is None:
            timing = _TRANSLATED.search(line)
            if timing:
                out.sentences_per_s = float(timing.group(2))
            continue
        kind, index, step, rest = match.groups()
        i = int(index)
        if kind == "E" and step is not None:
            out.history.setdefault(i, {}).setdefault(int(step), rest)  # the best of --nbest
        elif step is not None:
            continue
        elif kind == "T":
            out.refs[i] = rest
        elif kind in "HD":  # H-<id> \t score \t text; the first (best) of --nbest
            parts = rest.split("\t", 1)
            target = out.hyps if kind == "D" else h_lines
            target.setdefault(i, parts[1] if len(parts) > 1 else "")
        elif kind == "P":
            if i not in out.logprobs:
                out.logprobs[i] = [float(v) for v in rest.split()]
        elif kind == "I" and rest.strip().lstrip("-").isdigit():
            out.passes[i] = int(rest)
    for i, text_ in h_lines.items():
        out.hyps.setdefault(i, text_)
    if not out.hyps:
        raise CMLMPluginError(
            f"{path} holds no H-/D- lines: give the stdout of fairseq-generate run without "
            "--quiet (e.g. fairseq-generate ... --print-step --retain-iter-history > gen.out)"
        )
    if not set(out.hyps) & set(out.refs):
        raise CMLMPluginError(
            f"{path} holds no T- lines for its outputs: decode a split that has targets "
            "(fairseq-generate prints T-<id> lines only when the test set has a target side)"
        )
    return out


def detect_scheme(texts) -> str:
    """``sentencepiece`` if a piece holds ▁, ``subword_nmt`` if one ends with @@, else ``none``."""
    for text in texts:
        if "\u2581" in text:
            return "sentencepiece"
    for text in texts:
        if any(token.endswith("@@") for token in text.split()):
            return "subword_nmt"
    return "none"


def to_words(text: str, scheme: str) -> str:
    """Pieces joined into words as fairseq's ``--remove-bpe`` does."""
    if scheme == "sentencepiece":
        return text.replace(" ", "").replace("\u2581", " ").strip()
    if scheme == "subword_nmt":
        return (text + " ").replace("@@ ", "").rstrip()
    return text


def inputs(values: List[str]) -> List[Tuple[str, str]]:
    """``[LABEL=]PATH`` values as (label, path); the label defaults to the file name."""
    out = []
    for value in values:
        label, path = "", value
        if "=" in value and not os.path.exists(value):
            label, path = value.split("=", 1)
        if not os.path.isfile(path):
            raise CMLMPluginError(
                f"{path}: no such file: give the file fairseq-generate's output was saved to "
                "(fairseq-generate ... > gen.out), as PATH or LABEL=PATH"
            )
        label = label or os.path.basename(path)
        if label in [lbl for lbl, _ in out]:
            raise CMLMPluginError(f"two inputs are labelled {label!r}: name them LABEL=PATH")
        out.append((label, path))
    return out
