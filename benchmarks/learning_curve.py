"""Learning curves: test BLEU against training updates, one line per training run.

    python benchmarks/learning_curve.py DATA_BIN --cmlm LABEL=SAVE_DIR [--cmlm ...]
        [--ar LABEL=SAVE_DIR] [--config T=10,l=1] [--beam 5] [--every N] [--max-updates U]
        [--remove-bpe sentencepiece] [--cpu] [--reuse OLD.json] [--json OUT.json]
        [--plot OUT.png]

Every ``checkpoint_E_U.pt`` of a save directory (fairseq's ``--save-interval-updates``
checkpoints; U is the update count; with ``--every N`` only those where N divides U, with
``--max-updates M`` only those with U <= M, so that runs still training stop at one budget) is
decoded on the test set by the real
``fairseq-generate``, through ``cmlm-table``'s runner (``cmlm_plugin/cli/table.py``):
our models at ``--config`` (the decoding-configuration language of ``cmlm-table``),
autoregressive fairseq ``transformer`` runs at ``--beam``. Prints one line per point and
writes the points (JSON) and the plot (PNG). ``--reuse OLD.json`` takes the points of an
earlier run's JSON that have the same label, checkpoint file and decoding instead of
decoding them again (the earlier run must have used the same data, subset and BLEU
settings; a point whose checkpoint file is newer than OLD.json is decoded again).
"""

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Dict, List

from cmlm_plugin.cli import table
from cmlm_plugin.cli.decode_config import argument
from cmlm_plugin.cli.plotting import pyplot
from cmlm_plugin.errors import CMLMPluginError

_INTERVAL = re.compile(r"checkpoint_\d+_(\d+)\.pt")


def interval_checkpoints(save_dir: Path) -> Dict[int, Path]:
    """``{updates: path}`` of the update-interval checkpoints in ``save_dir``."""
    found = {}
    for path in save_dir.glob("checkpoint_*_*.pt"):
        match = _INTERVAL.fullmatch(path.name)
        if match:
            found[int(match.group(1))] = path
    if not found:
        raise CMLMPluginError(
            f"no checkpoint_E_U.pt in {save_dir}: train with --save-interval-updates N "
            "--keep-interval-updates -1"
        )
    return dict(sorted(found.items()))


def reusable(path) -> Dict[tuple, Dict]:
    """``{(label, checkpoint, decoding): point}`` of an earlier run's JSON, or ``{}``."""
    if path is None:
        return {}
    path = Path(path)
    if not path.is_file():
        raise CMLMPluginError(f"--reuse {path}: no such file (give an earlier run's --json)")
    written = path.stat().st_mtime
    points = json.loads(path.read_text())
    return {
        (p["label"], p["path"], p["decoding"]): p
        for p in points
        if Path(p["path"]).is_file() and Path(p["path"]).stat().st_mtime <= written
    }


def plot(points: List[Dict], path: str) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 5.2))
    for label in dict.fromkeys(p["label"] for p in points):
        mine = [p for p in points if p["label"] == label]
        style = "s--" if mine[0]["kind"] == "ar" else "o-"
        ax.plot([p["updates"] for p in mine], [p["sacrebleu"] for p in mine], style,
                label=f"{label} ({mine[0]['decoding']})")  # fmt: skip
    ax.set(xlabel="training updates", ylabel="test sacreBLEU", title="BLEU vs updates")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2)  # under the axes
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data")
    p.add_argument("--cmlm", action="append", default=[], metavar="LABEL=SAVE_DIR")
    p.add_argument("--ar", action="append", default=[], metavar="LABEL=SAVE_DIR")
    p.add_argument("--config", type=argument, default=argument("T=10,l=1"))
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--every", type=int, default=1, help="only checkpoints of U divisible by N")
    p.add_argument("--max-updates", type=int, default=0, help="only checkpoints of U <= M (0: all)")
    p.add_argument("--subset", default="test")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--remove-bpe", default=None)
    p.add_argument("--tokenize", default="13a")
    p.add_argument("--cpu", action="store_true")
    p.add_argument("--user-dir", default=str(Path(table.__file__).resolve().parents[1]))
    p.add_argument("--reuse", metavar="OLD.json", help="points of an earlier --json to keep")
    p.add_argument("--json")
    p.add_argument("--plot")
    args = p.parse_args(argv)
    args.tokenized_bleu = args.compound_split = False
    earlier = reusable(args.reuse)
    points = []
    for kind, values in (("cmlm", args.cmlm), ("ar", args.ar)):
        for value in values:
            label, _, save_dir = value.rpartition("=")
            for updates, path in interval_checkpoints(Path(save_dir)).items():
                if updates % args.every or 0 < args.max_updates < updates:
                    continue
                cell = dict(kind=kind, label=label or kind, path=str(path), updates=updates)
                if kind == "ar":
                    cell.update(beam=args.beam, decoding=f"beam {args.beam}")
                else:
                    cell.update(config=str(args.config), decoding=str(args.config))
                kept = earlier.get((cell["label"], cell["path"], cell["decoding"]))
                row = kept if kept is not None else table.run_cell(cell, args)
                points.append({k: row[k] for k in ("kind", "label", "updates", "decoding",
                               "sacrebleu", "brevity_penalty", "distinct_outputs", "sentences",
                               "path")})  # fmt: skip
                how = " (reused)" if kept is not None else ""
                print(
                    f"{label} {updates}: {row['sacrebleu']:.2f}{how}", file=sys.stderr, flush=True
                )
    if args.json:
        Path(args.json).write_text(json.dumps(points, indent=1))
    if args.plot:
        plot(points, args.plot)


if __name__ == "__main__":
    from cmlm_plugin.errors import install_excepthook

    install_excepthook()
    main()
