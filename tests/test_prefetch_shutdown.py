"""fairseq's prefetch thread at exit (``cmlm_plugin.training.prefetch_shutdown``).

A daemon thread still collating batches when the interpreter exits aborts the process
(``terminate called without an active exception``): this made a finished
``fairseq-train`` of the learning test exit -6 once. The component tests stop live
consumers, busy or blocked on a full queue; the subprocess test shows the abort
without the plugin and a clean exit with it.
"""

import subprocess
import sys
import threading

import pytest
import torch
from conftest import ROOT
from fairseq.data.iterators import BackgroundConsumer, BufferedIterator

from cmlm_plugin.training.prefetch_shutdown import stop_prefetch_threads


class Batches:
    """An endless stream of batches, each a few torch operations."""

    def __init__(self, rows=20):
        self.rows = rows

    def __len__(self):
        return 10**9

    def __iter__(self):
        while True:
            yield torch.cat([torch.ones(self.rows, 30, dtype=torch.long)] * 10)


def live_consumers():
    return [t for t in threading.enumerate() if isinstance(t, BackgroundConsumer) and t.is_alive()]


@pytest.mark.parametrize("buffer", [2, 1000], ids=["full-queue", "collating"])
def test_live_consumers_are_stopped(buffer):
    batches = BufferedIterator(buffer, Batches())
    assert next(batches).shape == (200, 30)
    assert len(live_consumers()) == 1
    assert stop_prefetch_threads() == 1
    assert live_consumers() == []


def test_no_consumer_is_a_no_op():
    assert live_consumers() == []
    assert stop_prefetch_threads() == 0


SCRIPT = """
import sys, torch
from fairseq.data.iterators import BufferedIterator
if sys.argv[1] == "plugin":
    import cmlm_plugin  # noqa: F401  (installs the exit hook)
class Batches:
    def __len__(self):
        return 10**9
    def __iter__(self):
        while True:  # B x T: every batch keeps the thread inside torch for a while
            yield torch.cat([torch.ones(200, 300, dtype=torch.long)] * 50).sum()
batches = BufferedIterator(1000, Batches())
next(batches)
print("exiting")
"""


def exit_with(mode: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_exit_with_a_collating_prefetch_thread_aborts_without_the_plugin_only():
    fixed = exit_with("plugin")
    assert fixed.returncode == 0, fixed.stderr[-2000:]
    assert "exiting" in fixed.stdout
    assert "terminate called" not in fixed.stderr
    if sys.version_info < (3, 14):  # 3.14 hangs such threads instead of ending them
        control = exit_with("fairseq-only")
        assert control.returncode != 0, "the scenario no longer reproduces the abort"
        assert "terminate called without an active exception" in control.stderr
