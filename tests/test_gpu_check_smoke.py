"""End-to-end test: ``benchmarks/gpu_check.sh --smoke`` runs every phase on a CPU.

The GPU check (issue 14) is one script meant for a CUDA machine; its ``--smoke`` mode runs
the same phases with tiny sizes on generated data (tests/toydata.py) so that the script
cannot rot between GPU runs: the CUDA tests (skipped here), the three trainings, the
conversion, ``decode_speed.py`` for ours, fairseq's generator and AR, and
``fairseq-generate`` with our trained model. Each phase must report ``ok``.
"""

import json
import re
import subprocess

from cli import environment
from conftest import ROOT

PHASES = ("data", "preprocess", "tests", "train-ours", "train-fairseq-cmlm", "train-ar",
          "convert", "decode-b1-b4", "generate")  # fmt: skip


def test_gpu_check_smoke_runs_every_phase(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--smoke"],
        cwd=ROOT,
        env=environment(OUT=str(out), OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=400,
    )
    summary = (out / "summary.txt").read_text()
    assert proc.returncode == 0, summary + proc.stderr[-2000:]
    for phase in PHASES:
        assert f"] {phase}: ok in" in summary, (phase, summary)
    report = json.loads((out / "decode-b1-b4" / "decode_speed.json").read_text())
    systems = {(row["system"], row["batch"]) for row in report["rows"]}
    for batch in (1, 4):
        assert {("ours T=2,l=2", batch), ("fairseq T=2,l=2", batch)} <= systems
        assert ("AR beam 1", batch) in systems
    for name in ("ours", "fairseq-cmlm", "ar"):  # the last logged loss is a finite number
        assert re.search(rf"train-{name}: last loss \d+\.\d+, num_updates 3", summary), summary
    assert "BLEU" in summary  # fairseq-generate with our own trained model
    assert not (out / "work").exists()  # data and weights are removed
