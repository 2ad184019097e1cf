"""``cmlm-diagnose``: Mask-Predict troubleshooting of fairseq-generate output.

    cmlm-diagnose [LABEL=]GENERATE_OUT [[LABEL=]GENERATE_OUT ...] [--ar LABEL]
        [--words] [--bpe auto|sentencepiece|subword_nmt|none] [--tokenize 13a]
        [--confidence 0.5] [--repeat-margin 0.005] [--mean-length-error 1.0]
        [--far-share 0.05] [--oscillation 0.02] [--low-confidence-share 0.25]
        [--few-passes-share 0.5] [--rising-bleu 0.5] [--ar-gap 5.0] [--min-speedup 2.0]
        [--json OUT.json] [--plot OUT.png]

It measures the Mask-Predict troubleshooting table on ``fairseq-generate`` output.
Each input is the saved output of one ``fairseq-generate`` run (one decoding
configuration; best with ``--print-step --retain-iter-history``, and ``2>&1`` to keep its
timing line), optionally named ``LABEL=PATH``. Per configuration it prints:

* consecutive repeats: tokens equal to the token before them, over all tokens, in the
  outputs (``D-`` lines, ``H-`` without them) and in the references (``T-`` lines);
* the length error, output minus reference: mean, shares with ``|error| <= 2``, more
  than 5 short and more than 5 long, and sacreBLEU of the sentences in each error bucket
  (< -5, -5..-3, -2..+2, +3..+5, > +5); where the lines are printed as pieces (no
  ``--remove-bpe``), the ``--length-shift K`` that cancels the mean error in words at the
  output's pieces per word (run it on the validation set's output to fit K);
* oscillation, from the ``E-<id>_<pass>`` lines of ``--retain-iter-history`` (the output
  after each pass, as dictionary pieces): token changes between passes, and the
  changes back to a value the position held at an earlier pass (not the one just before;
  ``<mask>`` is no value), per output piece; sacreBLEU after each pass;
* the share of output pieces whose probability is below ``--confidence``; ``P-`` lines
  hold base-2 log-probabilities (fairseq divides by ln 2), so p = 2 ** value; our generator
  prints one per output piece, fairseq's own generators one more for EOS;
* passes per sentence (``I-`` lines of ``--print-step``; model calls for the diffusion
  sampler) and the share of sentences given fewer than ceil(log2 n) passes, the low end of
  the source's recommended T for an n-token output;
* against an autoregressive run named by ``--ar LABEL``: the BLEU gap and the speed-up
  (sentences/s of the ``Translated ...`` lines, when both files hold one).

Lengths and repeats are counted in the units of the ``D-``/``T-`` lines: words when
fairseq-generate ran with ``--remove-bpe`` (or ``--bpe``), otherwise pieces; ``--words``
joins sentencepiece or subword-nmt pieces into words first. The report names the unit.
sacreBLEU is always computed on words (pieces joined).

Each symptom above its threshold (``SYMPTOMS``; the defaults are this project's choice,
the source gives no numbers except the length error: within 2 costs little BLEU, beyond 5
the quality drops steeply) is printed with the source's cause and remedy and the plugin
flags that implement the remedy.
"""

import argparse
import json

from ...errors import CMLMPluginError
from .measures import (
    BUCKETS,
    MASK,
    bleu,
    bucket_of,
    diagnose,
    fitted_length_shift,
    histogram,
    history_report,
    length_stats,
    oscillation,
    output_pieces_error,
    repeat_rate,
)
from .reading import SCHEMES, Generated, detect_scheme, inputs, read_generate, to_words
from .report import (
    bucket_cell,
    confidence_cell,
    oscillation_cell,
    passes_cell,
    percent,
    plot,
    symptom_text,
    text_table,
)
from .symptom_table import SYMPTOMS, THRESHOLDS, Symptom, symptoms

__all__ = [
    "BUCKETS",
    "MASK",
    "SCHEMES",
    "SYMPTOMS",
    "THRESHOLDS",
    "Generated",
    "Symptom",
    "bleu",
    "bucket_cell",
    "bucket_of",
    "build_parser",
    "confidence_cell",
    "detect_scheme",
    "diagnose",
    "fitted_length_shift",
    "histogram",
    "history_report",
    "inputs",
    "length_stats",
    "main",
    "oscillation",
    "oscillation_cell",
    "output_pieces_error",
    "passes_cell",
    "percent",
    "plot",
    "read_generate",
    "repeat_rate",
    "symptom_text",
    "symptoms",
    "text_table",
    "to_words",
]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cmlm-diagnose",
        description=__doc__.split("\n\n")[0].split(": ", 1)[1].replace("``", ""),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("inputs", nargs="+", metavar="[LABEL=]GENERATE_OUT",
                   help="saved fairseq-generate output, one per configuration")  # fmt: skip
    p.add_argument(
        "--ar",
        metavar="LABEL",
        help="the input that is the autoregressive baseline (BLEU gap, speed-up)",
    )
    p.add_argument("--words", action="store_true",
                   help="join sentencepiece/subword-nmt pieces into words before counting "
                   "lengths and repeats")  # fmt: skip
    p.add_argument("--bpe", choices=SCHEMES, default="auto",
                   help="the pieces of the D-/T- lines (auto: ▁ -> sentencepiece, @@ -> "
                   "subword_nmt)")  # fmt: skip
    p.add_argument("--tokenize", default="13a", choices=("13a", "intl", "zh", "char", "none"),
                   help="sacreBLEU tokenizer")  # fmt: skip
    p.add_argument(
        "--confidence",
        type=float,
        default=0.5,
        help="a piece is low-confidence when its probability is below this",
    )
    t = p.add_argument_group("symptom thresholds (a symptom is reported above its threshold)")
    for flag, default, help in THRESHOLDS:
        t.add_argument(flag, type=float, default=default, help=help)
    p.add_argument("--json", metavar="OUT", help="write every number and symptom here")
    p.add_argument(
        "--plot",
        metavar="OUT.png",
        help="length-error histogram and BLEU after each pass (needs matplotlib)",
    )
    return p


def main(argv=None) -> None:
    from ...errors import install_excepthook

    install_excepthook()
    args = build_parser().parse_args(argv)
    if not 0 < args.confidence <= 1:
        raise CMLMPluginError(f"--confidence is a probability in (0, 1], got {args.confidence}")
    reports = []
    for label, path in inputs(args.inputs):
        with open(path, encoding="utf-8", errors="replace") as f:
            reports.append(diagnose(read_generate(f.read(), label, path), args))
    ar = None
    if args.ar is not None:
        ar = next((r for r in reports if r["label"] == args.ar), None)
        if ar is None:
            labels = ", ".join(r["label"] for r in reports)
            raise CMLMPluginError(f"--ar {args.ar} names no input: the labels are {labels}")
    for r in reports:
        r["symptoms"] = symptoms(r, args, ar)
    units = sorted({r["unit"] for r in reports})
    print(f"cmlm-diagnose: {len(reports)} configuration(s); lengths and repeats in "
          + "; ".join(units) + "; confidence and oscillation per dictionary piece")  # fmt: skip
    print(text_table(reports))
    print()
    print(symptom_text(reports))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(reports, f, indent=1)
    if args.plot:
        plot(reports, args.plot)
