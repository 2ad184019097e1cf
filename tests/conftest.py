"""Shared test settings: the repository root on sys.path, hypothesis without deadlines, the
shared tiny trained model."""

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# no per-example time limit: a loaded machine is not a failing test (timing is for benchmarks/)
settings.register_profile("cmlm_plugin", deadline=None)
settings.load_profile("cmlm_plugin")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("OMP_NUM_THREADS", "2")

N_TEST = 20  # test sentences of the shared tiny run


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """Toy data binarized and a tiny CMLM trained 12 updates (shared by e2e modules).

    Returns the folder holding ``raw/``, ``bin/`` and ``ckpt/checkpoint_last.pt``.
    """
    from cli import preprocess, run
    from toydata import write_transduction

    root = tmp_path_factory.mktemp("e2e")
    write_transduction(root / "raw", {"train": 300, "valid": 20, "test": N_TEST}, seed=3)
    preprocess(root / "raw", root / "bin")
    run(
        "fairseq-train", root / "bin",
        "--user-dir", "cmlm_plugin",  # relative: as written from the repository root
        "--task", "cmlm", "--arch", "cmlm_plugin_tiny", "--criterion", "cmlm_plugin_loss",
        "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000", "--max-update", "12",
        "--save-dir", root / "ckpt", "--cpu", "--no-epoch-checkpoints", "--seed", "2",
        cwd=ROOT,
    )  # fmt: skip
    assert (root / "ckpt" / "checkpoint_last.pt").exists()
    return root
