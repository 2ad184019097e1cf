"""Shared test settings: the repository root on sys.path, hypothesis without deadlines,
one thread per process, the longest files first, the shared tiny trained model."""

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
# One thread for the test process and for every command it runs (cli.environment): the
# README runs two test processes at once (pytest -n 2) on a 2-core machine, and OpenMP
# threads that outnumber the cores busy-wait on each other. Measured 2026-12-02 with two
# threads per command while two one-thread trainings ran: the self-correction learning
# test took 802 s, against 77 s alone on 2026-12-01.
THREADS = "1"
os.environ["OMP_NUM_THREADS"] = THREADS

# The longest files (minutes each) run first: under the README's parallel command
# (pytest -n 2 --dist loadfile --no-loadscope-reorder --durations 15) one worker takes each
# of the first two at the start, so that the workers end together instead of one waiting
# on the learning tests (about 280 s in each of the two learning files). The CTC learning
# file comes next: run last on 2026-12-04, beside the compiled-decoder tests, its one-pass
# test took 408 s instead of 65 s and the suite 1336 s.
LONGEST_FIRST = (
    "test_learning.py",
    "test_learning_objectives.py",
    "test_learning_ctc.py",
    "test_paper_tools_e2e.py",
)


def pytest_collection_modifyitems(items):
    def rank(item):
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the order within a file is kept


N_TEST = 20  # test sentences of the shared tiny run


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """The tiny model's 30-word dictionaries (``tinymodel.write_dictionaries``), one folder
    per test module: the component tests build their task and model on it."""
    from tinymodel import write_dictionaries

    return write_dictionaries(tmp_path_factory.mktemp("dict"))


@pytest.fixture(scope="module")
def tiny_eval(data_dir):
    """``(task, model)``: the tiny model (``tinymodel.setup``) built with seed 0, in eval
    mode, for the component tests that decode with it."""
    import torch
    from tinymodel import setup

    torch.manual_seed(0)
    task, model, _ = setup(data_dir)
    model.eval()
    return task, model


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
