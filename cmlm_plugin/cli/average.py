"""``cmlm-average-checkpoints``: average the weights of several fairseq checkpoints.

    cmlm-average-checkpoints --inputs DIR_OR_FILES... --output OUT.pt
        [--num-last N | --num-best N | --num-update-checkpoints N] [--best-metric loss] [--maximize]

Checkpoint averaging as in Vaswani et al. (2017, *Attention Is All You Need*: the last 5
or 20 checkpoints) and in the Mask-Predict paper (Ghazvininejad et al., 2019), which
averages the 5 best checkpoints by validation loss. fairseq's own
``scripts/average_checkpoints.py`` is not part of its wheel; this is the plugin's version.

Inputs: explicit checkpoint files (averaged in the given order), or one folder with a
selection flag:

* ``--num-last N``: the N epoch checkpoints ``checkpoint<EPOCH>.pt`` of the highest epochs;
* ``--num-update-checkpoints N``: the N update checkpoints ``checkpoint_<EPOCH>_<UPDATE>.pt``
  of the highest update numbers (written with ``--save-interval-updates``);
* ``--num-best N``: the N best by ``--best-metric`` (default ``loss``; ``--maximize`` when
  higher is better), read from the names ``checkpoint.best_<METRIC>_<VALUE>.pt`` that
  ``fairseq-train --keep-best-checkpoints`` writes. fairseq writes the value with three
  decimals followed by random tie-breaking digits; the number as written is ranked, as
  fairseq ranks it. Without such files, the epoch and update checkpoints are ranked by the
  validation value each stores in ``extra_state["val_loss"]`` (fairseq stores there the
  value of its ``--best-checkpoint-metric``, whatever the metric; ``checkpoint_last.pt``
  and ``checkpoint_best.pt`` are left out: they are copies of those).

Every floating-point tensor of ``model`` is summed in float64 and divided by the count,
then stored in its own dtype: for float32, float16 and bfloat16 weights the float64 sum is
exact, so averaging copies of one checkpoint gives it back bit for bit. Other tensors
(integer buffers) must be equal in all inputs, and every input must hold the same keys with
the same shapes and dtypes. Weights stored once under several names (fairseq's shared
embeddings) are stored once in the output too.

The output keeps every other field (``cfg``, ``args``, ``extra_state``, ...) of the first
input -- the newest checkpoint for a folder selection (for ``--num-best``, the one with the
most updates) -- without ``last_optimizer_state``, which cannot be averaged: the file is
smaller, and training restarted from it builds a fresh optimizer. The output is written to
``OUT.pt.tmp`` and renamed, so a crash never leaves half a file, and is never one of the
inputs. Checkpoints load weights-only (``cmlm_plugin.checkpoints.safety``).

This module holds the command line and the safe writing of the output; which checkpoints
are averaged is ``checkpoint_selection.py``, the averaging itself ``checkpoint_averaging.py``.
"""

import argparse
import os

import torch

from ..errors import CMLMPluginError, install_excepthook
from .checkpoint_averaging import (  # noqa: F401  (ModelAverage: kept importable here)
    ModelAverage,
    average,
)
from .checkpoint_selection import select_inputs


def save_atomically(state, output) -> None:
    """``torch.save`` to ``OUTPUT.tmp``, flushed to disk, then renamed onto ``output``."""
    tmp = output + ".tmp"
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, output)
    except OSError as exc:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise CMLMPluginError(f"cannot write {output}: {exc.strerror or exc}") from exc
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def check_output(output, paths) -> None:
    if os.path.isdir(output):
        example = os.path.join(output, "checkpoint_avg.pt")
        raise CMLMPluginError(f"--output {output} is a folder: give a file name, e.g. {example}")
    real = os.path.realpath(output)
    for path in paths:
        if os.path.realpath(path) == real or (
            os.path.exists(output) and os.path.samefile(path, output)
        ):
            raise CMLMPluginError(
                f"--output {output} is one of the inputs ({path}): write the average to "
                "another file, e.g. checkpoint_avg.pt"
            )


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cmlm-average-checkpoints",
        description="Average the model weights of fairseq checkpoints (float64 sums; the "
        "output keeps the first/newest input's other fields, without optimizer state).",
    )
    p.add_argument(
        "--inputs",
        nargs="+",
        required=True,
        metavar="DIR_OR_FILE",
        help="checkpoint files, or one folder with --num-last, --num-best or "
        "--num-update-checkpoints",
    )
    p.add_argument("--output", required=True, metavar="OUT.pt", help="the averaged checkpoint")
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--num-last",
        type=positive,
        metavar="N",
        help="the last N epoch checkpoints checkpoint<EPOCH>.pt",
    )
    which.add_argument(
        "--num-best",
        type=positive,
        metavar="N",
        help="the N best by --best-metric (checkpoint.best_<METRIC>_<VALUE>.pt, else the "
        "validation value stored in each epoch/update checkpoint)",
    )
    which.add_argument(
        "--num-update-checkpoints",
        type=positive,
        metavar="N",
        help="the last N update checkpoints checkpoint_<EPOCH>_<UPDATE>.pt",
    )
    p.add_argument(
        "--best-metric",
        default=None,
        metavar="METRIC",
        help="fairseq's --best-checkpoint-metric of the run (default: loss)",
    )
    p.add_argument(
        "--maximize", action="store_true", help="higher --best-metric is better (e.g. bleu)"
    )
    return p


def main(argv=None) -> None:
    install_excepthook()  # the plugin's errors print as one line (cmlm_plugin/errors.py)
    args = parser().parse_args(argv)
    selected = select_inputs(args)
    paths = [path for path, _ in selected]
    output = args.output
    check_output(output, paths)
    print(f"averaging {len(paths)} checkpoint(s):")
    for path, note in selected:
        print(f"  {path}" + (f"  ({note})" if note else ""), flush=True)
    state, dropped = average(paths, prefer_newest=bool(args.num_best))
    parent = os.path.dirname(os.path.abspath(output))
    os.makedirs(parent, exist_ok=True)
    save_atomically(state, output)
    if dropped:
        print(
            "dropped last_optimizer_state (optimizer state is not averaged; training "
            "restarted from the output builds a fresh optimizer)"
        )
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
