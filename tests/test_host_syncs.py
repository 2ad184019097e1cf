"""Component tests: the host synchronisations of one Mask-Predict batch, per mode.

Counted on a CPU with ``syncs.SyncCounter`` (the aten calls that make CUDA wait; on a
GPU ``tests/test_cuda.py`` counts the same with ``torch.cuda.set_sync_debug_mode``).
Inside ``mask_predict`` with T passes and a sparse step (the generator's default):

* before the loop, 2 (the lengths' minimum is checked and their maximum sizes the batch);
* every pass, 1 in the step (the bool mask that picks the re-predicted positions for
  the output projection: its size is the data's);
* every pass after the first, 1 more unless ``--iter-decode-force-max-iter`` (the rows
  still active, which size the next pass); with force and no pruning the loop itself
  reads nothing from the device.

The same counts hold for ``fast`` and ``compiled`` (the compiled trunk is one graph with
no data-dependent shape).
"""

import argparse

import pytest
import torch
from syncs import SyncCounter
from tinymodel import sample_for, setup, write_dictionaries
from torch.utils._python_dispatch import _disable_current_modes

from cmlm_plugin.models.inference import inference_path

SOURCES = ["w1 w2 w3", "w4", "w5 w6 w7 w8 w9", "w10 w11"]
TARGETS = ["w1", "w2", "w3", "w4"]
PASSES = 4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    torch.manual_seed(0)
    task, model, _ = setup(write_dictionaries(tmp_path_factory.mktemp("syncs")))
    return task, model.eval()


def loop_syncs(task, model, impl, **flags):
    """The syncs inside the generator's ``decode`` (the Mask-Predict loop and its step)."""
    args = argparse.Namespace(iter_decode_max_iter=PASSES, iter_decode_with_beam=3, **flags)
    generator = task.build_generator([model], args)
    generator.decoder_impl = impl
    decode, seen = generator.decode, []

    def counted(step, lengths, template=None):
        with SyncCounter() as syncs:
            result = decode(step, lengths, template)
        seen.append(syncs)
        return result

    generator.decode = counted
    task.inference_step(generator, [model], sample_for(task, SOURCES, TARGETS))
    (syncs,) = seen
    return syncs


def test_the_counter_sees_what_would_sync():
    x = torch.arange(6.0)
    with SyncCounter() as syncs:
        int(x.sum()), bool(x.max() > 2), x[x > 2], x.nonzero(), x.sum() + 1
    assert syncs.kinds == {"read as a number (item/int/bool)": 2, "bool-mask index": 1,
                           "nonzero": 1}  # fmt: skip


@pytest.mark.parametrize("impl", ["fast", "compiled"])
def test_syncs_per_batch_with_fixed_passes(tiny, impl, monkeypatch):
    task, model = tiny
    if impl == "compiled":  # torch.compile refuses to run under a dispatch mode: the
        # counter steps aside for the compiled graph (fullgraph, no data-dependent op)
        decoder = inference_path(model, "compiled", torch.device("cpu")).decoder  # cached
        trunk = decoder.trunk

        def outside_the_counter(*args):
            with _disable_current_modes():
                return trunk(*args)

        monkeypatch.setattr(decoder, "trunk", outside_the_counter)
    syncs = loop_syncs(task, model, impl, iter_decode_force_max_iter=True)
    assert syncs.kinds == {"read as a number (item/int/bool)": 2, "bool-mask index": PASSES}


def test_syncs_per_batch_with_the_early_exit(tiny):
    syncs = loop_syncs(*tiny, "fast")
    assert syncs.kinds == {
        "read as a number (item/int/bool)": 2,
        "bool-mask index": PASSES,
        "nonzero": PASSES - 1,
    }
