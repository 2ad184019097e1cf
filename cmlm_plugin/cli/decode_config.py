"""One language for decoding configurations: ``cmlm-table``, the benchmark, the sampler table.

A configuration is comma-separated ``key=value`` items (order free, each key once)::

    T=10,l=5                 Mask-Predict, T decoder passes, l length candidates
    T=10,l=5,prune=1,stop    ... pruned to 1 candidate after 1 pass, --stop-unchanged
    S=10,b=4,c=0.9           the masked-diffusion sampler, S steps, blocks of 4, threshold
    T=4,impl=int8            any of them with our --decoder-impl

Exactly one of ``T=N`` (Mask-Predict, ``--iter-decode-max-iter N``) or ``S=N`` (``--decoding
diffusion --diffusion-steps N``). ``l=N`` (``--iter-decode-with-beam``, default 1) and
``impl=fast|int8|compiled|modules`` (``--decoder-impl``, default fast), ``lp=W``
(``--length-prior-weight``, W >= 0, default 0), ``shift=K`` (``--length-shift``, a whole
number, may be negative, default 0), ``pll=G`` (``--pll-rerank G``, G >= 1) and
``collapse`` (``--collapse-repeats``) apply to both; ``blank=P`` (``--ctc-blank-penalty P``,
P >= 0, for CTC models, whose configuration is ``T=1,l=1``, or ``T=N,l=1`` for one trained
with ``--ctc-cmlm-weight``), ``prune=K``
(``--length-prune-after K --length-prune-keep 1``), ``stop`` (``--stop-unchanged``),
``ap=C`` (``--adaptive-passes C``), ``regions=K`` (``--remask-regions K``) and
``observed`` (``--update-observed``) to Mask-Predict only; ``b=N`` (``--block-length``)
and ``c=X`` (``--confidence-threshold``, 0 < X <= 1) to diffusion only. ``str(config)``
is the canonical form (T or S, l, b, c, prune, stop, ap, regions, observed, lp, shift,
pll, collapse, blank, impl; defaults left out except l) and ``parse(str(config)) ==
config``. A bad configuration raises a one-line ``CMLMPluginError``
naming the bad key and the allowed ones.
"""

import argparse
import math
import re
from dataclasses import dataclass
from typing import List, Optional

from ..errors import CMLMPluginError

IMPLS = ("fast", "int8", "compiled", "modules")  # --decoder-impl choices; fast is the default
KEYS = (
    "T",
    "S",
    "l",
    "b",
    "c",
    "prune",
    "stop",
    "ap",
    "regions",
    "observed",
    "lp",
    "shift",
    "pll",
    "collapse",
    "blank",
    "impl",
)  # the canonical order
MASK_PREDICT_ONLY = ("prune", "stop", "ap", "regions", "observed", "blank")
DIFFUSION_ONLY = ("b", "c")
SWITCHES = ("stop", "observed", "collapse")  # keys without a value
_COUNT = re.compile(r"\d+")
_SIGNED = re.compile(r"[+-]?\d+")
_COMPACT = re.compile(r"\d+x\d+.*")


@dataclass(frozen=True)
class DecodeConfig:
    """One decoding configuration; build it with ``parse`` (which validates it)."""

    passes: Optional[int] = None  # T: Mask-Predict decoder passes
    steps: Optional[int] = None  # S: masked-diffusion sampling steps
    length_beams: int = 1  # l
    block_length: Optional[int] = None  # b (diffusion)
    threshold: Optional[float] = None  # c (diffusion)
    prune_after: Optional[int] = None  # prune (Mask-Predict; keeps 1 candidate)
    stop_unchanged: bool = False  # stop (Mask-Predict)
    adaptive_passes: Optional[int] = None  # ap (Mask-Predict): T_i = ceil(log2 n) + C
    regions: int = 1  # regions (Mask-Predict): --remask-regions
    update_observed: bool = False  # observed (Mask-Predict): --update-observed
    length_prior: float = 0.0  # lp: --length-prior-weight
    length_shift: int = 0  # shift: --length-shift
    pll_groups: int = 0  # pll: --pll-rerank (0: off)
    collapse_repeats: bool = False  # collapse: --collapse-repeats
    blank_penalty: float = 0.0  # blank: --ctc-blank-penalty (CTC models)
    impl: str = "fast"

    @property
    def diffusion(self) -> bool:
        return self.steps is not None

    @property
    def calls(self) -> int:
        """T passes or S steps (the table's T column; with c=, calls may exceed S)."""
        return self.steps if self.diffusion else self.passes

    @property
    def fairseq_comparable(self) -> bool:
        """fairseq's ``IterativeRefinementGenerator`` runs this T and l (impl is ours only)."""
        return (
            not self.diffusion
            and self.prune_after is None
            and not self.stop_unchanged
            and not self.length_prior
            and not self.length_shift
            and not self.pll_groups
            and not self.collapse_repeats
            and not self.blank_penalty
            and self.adaptive_passes is None
            and self.regions == 1
            and not self.update_observed
        )

    def baseline(self) -> "DecodeConfig":
        """Plain Mask-Predict at the same call budget and l: the fairseq cell to compare with."""
        return DecodeConfig(passes=self.calls, length_beams=self.length_beams)

    def items(self) -> List[str]:
        out = [f"S={self.steps}" if self.diffusion else f"T={self.passes}"]
        out.append(f"l={self.length_beams}")
        if self.block_length is not None:
            out.append(f"b={self.block_length}")
        if self.threshold is not None:
            out.append(f"c={self.threshold!r}")
        if self.prune_after is not None:
            out.append(f"prune={self.prune_after}")
        if self.stop_unchanged:
            out.append("stop")
        if self.adaptive_passes is not None:
            out.append(f"ap={self.adaptive_passes}")
        if self.regions != 1:
            out.append(f"regions={self.regions}")
        if self.update_observed:
            out.append("observed")
        if self.length_prior:
            out.append(f"lp={self.length_prior!r}")
        if self.length_shift:
            out.append(f"shift={self.length_shift}")
        if self.pll_groups:
            out.append(f"pll={self.pll_groups}")
        if self.collapse_repeats:
            out.append("collapse")
        if self.blank_penalty:
            out.append(f"blank={self.blank_penalty!r}")
        if self.impl != "fast":
            out.append(f"impl={self.impl}")
        return out

    def __str__(self) -> str:
        return ",".join(self.items())

    @property
    def plain(self) -> bool:
        """Mask-Predict at T and l and nothing else: a cell of the paper's table."""
        return self.fairseq_comparable and self.impl == "fast"

    def flags(self) -> List[str]:
        """The ``fairseq-generate --task cmlm`` flags of this configuration."""
        if self.diffusion:
            out = ["--decoding", "diffusion", "--diffusion-steps", str(self.steps)]
        else:
            out = ["--iter-decode-max-iter", str(self.passes)]
        out += ["--iter-decode-with-beam", str(self.length_beams)]
        if self.block_length is not None:
            out += ["--block-length", str(self.block_length)]
        if self.threshold is not None:
            out += ["--confidence-threshold", repr(self.threshold)]
        if self.prune_after is not None:
            out += ["--length-prune-after", str(self.prune_after), "--length-prune-keep", "1"]
        if self.stop_unchanged:
            out.append("--stop-unchanged")
        if self.adaptive_passes is not None:
            out += ["--adaptive-passes", str(self.adaptive_passes)]
        if self.regions != 1:
            out += ["--remask-regions", str(self.regions)]
        if self.update_observed:
            out.append("--update-observed")
        if self.length_prior:
            out += ["--length-prior-weight", repr(self.length_prior)]
        if self.length_shift:
            out += ["--length-shift", str(self.length_shift)]
        if self.pll_groups:
            out += ["--pll-rerank", str(self.pll_groups)]
        if self.collapse_repeats:
            out.append("--collapse-repeats")
        if self.blank_penalty:
            out += ["--ctc-blank-penalty", repr(self.blank_penalty)]
        if self.impl != "fast":
            out += ["--decoder-impl", self.impl]
        return out

    def fairseq_flags(self) -> List[str]:
        """The ``--task translation_lev`` flags of the same T and l (fairseq: T-1 more passes)."""
        if not self.fairseq_comparable:
            raise CMLMPluginError(
                f"decoding config {self}: fairseq's generator runs only T= and l= "
                "(no S, prune, stop, ap, regions, observed, lp, shift, pll, collapse or blank)"
            )
        return [
            "--iter-decode-max-iter",
            str(self.passes - 1),
            "--iter-decode-with-beam",
            str(self.length_beams),
        ]


def _error(text: str, problem: str) -> CMLMPluginError:
    return CMLMPluginError(
        f"bad decoding config {text!r}: {problem} (allowed: T=N or S=N, l=N, b=N, c=X, "
        "prune=N, stop, ap=C, regions=K, observed, lp=W, shift=K, pll=G, collapse, blank=P, "
        f"impl={'|'.join(IMPLS)}; "
        "e.g. T=10,l=5 or S=10,b=4)"
    )


def _count(text: str, key: str, value: str) -> int:
    if not _COUNT.fullmatch(value) or int(value) < 1:
        raise _error(text, f"{key}={value} needs a whole number >= 1")
    return int(value)


def _non_negative(text: str, key: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not 0 <= number < math.inf:
        raise _error(text, f"{key}={value} needs a number >= 0")
    return number


def parse(text: str) -> DecodeConfig:
    """The configuration ``text`` names, e.g. ``"T=10,l=5"``; a ``CMLMPluginError`` if bad."""
    values = {}
    for item in text.split(","):
        key, eq, value = (part.strip() for part in item.partition("="))
        if key not in KEYS:
            shown = f"unknown key {key!r}" if key else "an empty item"
            if _COMPACT.fullmatch(key):  # e.g. 10x5p1:int8, the benchmark's old form
                shown += " (the compact TxL form is gone: write e.g. T=10,l=5,prune=1,impl=int8)"
            raise _error(text, shown)
        if key in values:
            raise _error(text, f"key {key!r} given twice")
        if (key in SWITCHES) == bool(eq):
            raise _error(text, f"{key} takes no value" if eq else f"key {key!r} needs a value")
        values[key] = value
    if ("T" in values) == ("S" in values):
        raise _error(text, "give exactly one of T= (Mask-Predict) or S= (diffusion)")
    wrong = MASK_PREDICT_ONLY if "S" in values else DIFFUSION_ONLY
    for key in wrong:
        if key in values:
            where = "T= (Mask-Predict)" if key in MASK_PREDICT_ONLY else "S= (diffusion)"
            raise _error(text, f"key {key!r} applies only to {where}")
    config = {}
    for key, name in (("T", "passes"), ("S", "steps"), ("l", "length_beams")):
        if key in values:
            config[name] = _count(text, key, values[key])
    for key, name in (
        ("b", "block_length"),
        ("prune", "prune_after"),
        ("regions", "regions"),
        ("pll", "pll_groups"),
    ):
        if key in values:
            config[name] = _count(text, key, values[key])
    if "ap" in values:
        if not _COUNT.fullmatch(values["ap"]):
            raise _error(text, f"ap={values['ap']} needs a whole number >= 0")
        config["adaptive_passes"] = int(values["ap"])
    if "c" in values:
        try:
            threshold = float(values["c"])
        except ValueError:
            threshold = math.nan
        if not 0 < threshold <= 1:
            raise _error(text, f"c={values['c']} needs a number in (0, 1]")
        config["threshold"] = threshold
    for key, name in (("lp", "length_prior"), ("blank", "blank_penalty")):
        if key in values:
            config[name] = _non_negative(text, key, values[key])
    if "shift" in values:
        if not _SIGNED.fullmatch(values["shift"]):
            raise _error(text, f"shift={values['shift']} needs a whole number (may be negative)")
        config["length_shift"] = int(values["shift"])
    if "impl" in values:
        if values["impl"] not in IMPLS:
            raise _error(text, f"impl={values['impl']} is not one of {', '.join(IMPLS)}")
        config["impl"] = values["impl"]
    return DecodeConfig(
        stop_unchanged="stop" in values,
        update_observed="observed" in values,
        collapse_repeats="collapse" in values,
        **config,
    )


def grid(passes: List[int], length_beams: List[int]) -> List[DecodeConfig]:
    """Plain Mask-Predict at every T and l, T-major (``cmlm-table --iters/--length-beams``)."""
    return [DecodeConfig(passes=t, length_beams=n) for t in passes for n in length_beams]


def argument(text: str) -> DecodeConfig:
    """``parse`` as an argparse ``type``: a bad configuration is a usage error."""
    try:
        return parse(text)
    except CMLMPluginError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
