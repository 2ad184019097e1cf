"""``cmlm-average-checkpoints``: the float64 mean, selection of inputs, refusals, atomic output.

Unit tests run ``main`` in this process on tiny synthetic checkpoints written with
``torch.save``; the end-to-end test runs the console command on the shared tiny run's
checkpoint and decodes with the average through ``fairseq-generate``.
"""

import argparse
import copy
import os
import shutil
from collections import OrderedDict

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cmlm_plugin.cli import average as avg
from cmlm_plugin.errors import CMLMPluginError

SHARED = (
    "encoder.embed_tokens.weight",
    "decoder.embed_tokens.weight",
    "decoder.output_projection.weight",
)


def model(seed=0, fill=None):
    """A state dict like fairseq's: shared embeddings, float32/16/bf16 weights, buffers."""
    g = torch.Generator().manual_seed(seed)

    def rand(*shape, dtype=torch.float32):
        if fill is not None:  # every weight the same value: the mean shows which were averaged
            return torch.full(shape, float(fill), dtype=dtype)
        return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)

    emb = rand(6, 4)
    state = OrderedDict((name, emb) for name in SHARED)  # one tensor under three names
    state["layer.weight"] = rand(4, 4)
    state["layer.bias"] = rand(4)
    state["half.weight"] = rand(3, 2, dtype=torch.float16)
    state["bf16.weight"] = rand(5, dtype=torch.bfloat16)
    state["encoder.version"] = torch.tensor([3.0])  # fairseq's float version buffer
    state["steps"] = torch.tensor([7, 8], dtype=torch.int64)  # an integer buffer
    return state


def checkpoint(state, updates=100, val_loss=None, metric="loss", maximize=False, tag=""):
    return {
        "args": None,
        "cfg": {
            "model": {"_name": "cmlm_plugin_tiny"},
            "checkpoint": {
                "best_checkpoint_metric": metric,
                "maximize_best_checkpoint_metric": maximize,
            },
        },
        "model": state,
        "criterion": None,
        "optimizer_history": [
            {
                "criterion_name": "CMLMPluginLoss",
                "optimizer_name": "FairseqAdam",
                "lr_scheduler_state": {},
                "num_updates": updates,
            }
        ],
        "task_state": {},
        "extra_state": {"val_loss": val_loss, "train_iterator": {"epoch": 1}, "tag": tag},
        "last_optimizer_state": {"state": {0: {"exp_avg": torch.ones(4096)}}, "param_groups": []},
    }


def write(path, state=None, **kwargs):
    torch.save(checkpoint(model() if state is None else state, **kwargs), path)
    return path


def load(path):
    return torch.load(path, map_location="cpu", weights_only=True)


def average(*args):
    avg.main([str(a) for a in args])


def refused(*args, match):
    with pytest.raises(CMLMPluginError, match=match) as info:
        average(*args)
    assert "\n" not in str(info.value)  # printed as one line
    return str(info.value)


# -- the mean ----------------------------------------------------------------------------


def test_average_is_the_float64_mean_stored_in_each_dtype(tmp_path, capsys):
    paths = [
        write(tmp_path / f"c{i}.pt", model(seed=i), updates=10 * i, tag=f"c{i}") for i in range(3)
    ]
    out = tmp_path / "avg.pt"
    average("--inputs", *paths, "--output", out)
    result = load(out)
    inputs = [load(p)["model"] for p in paths]
    for key, value in result["model"].items():
        assert value.dtype == inputs[0][key].dtype, key
        if value.is_floating_point():
            reference = sum(m[key].to(torch.float64) for m in inputs) / len(inputs)
            assert torch.equal(value, reference.to(value.dtype)), key
        else:
            assert torch.equal(value, inputs[0][key])
    assert not torch.equal(result["model"]["layer.weight"], inputs[0]["layer.weight"])
    # the three names of the shared embedding are still one tensor: stored once
    ptrs = {result["model"][k].untyped_storage().data_ptr() for k in SHARED}
    assert len(ptrs) == 1
    # other fields from the first input, without the optimizer state
    assert "last_optimizer_state" not in result
    assert result["extra_state"]["tag"] == "c0"
    assert result["cfg"] == load(paths[0])["cfg"]
    assert result["optimizer_history"][-1]["num_updates"] == 0
    assert os.path.getsize(out) < os.path.getsize(paths[0])
    lines = capsys.readouterr().out.splitlines()
    for p in paths:
        assert sum(line.strip() == str(p) for line in lines) == 1
    assert "dropped last_optimizer_state" in "\n".join(lines)
    assert lines[-1] == f"wrote {out}"
    assert not os.path.exists(str(out) + ".tmp")


def test_averaging_sums_in_float64_not_in_the_weights_dtype(tmp_path):
    # float16 values whose float16 running sum rounds (2048 + 1 = 2048): the float64 one does not
    values = [2048.0, 1.0, 1.0]
    paths = []
    for i, v in enumerate(values):
        state = OrderedDict(w=torch.tensor([v], dtype=torch.float16))
        paths.append(write(tmp_path / f"c{i}.pt", state))
    average("--inputs", *paths, "--output", tmp_path / "avg.pt")
    w = load(tmp_path / "avg.pt")["model"]["w"]
    assert w.dtype == torch.float16 and w.item() == 683.5  # 2050 / 3 = 683.33 in float16
    naive = (torch.tensor([2048.0], dtype=torch.float16) + 1 + 1) / 3  # 2048 / 3 in float16
    assert naive.item() == 682.5


def test_names_shared_in_one_input_but_not_another_are_averaged_separately(tmp_path):
    shared = model(seed=1)
    split = model(seed=2)
    split["decoder.output_projection.weight"] = (
        split["decoder.output_projection.weight"].clone() + 1
    )
    a, b = write(tmp_path / "a.pt", shared), write(tmp_path / "b.pt", split)
    average("--inputs", a, b, "--output", tmp_path / "avg.pt")
    out = load(tmp_path / "avg.pt")["model"]
    emb = (shared[SHARED[0]].double() + split[SHARED[0]].double()) / 2
    proj = (shared[SHARED[0]].double() + split[SHARED[2]].double()) / 2
    assert torch.equal(out[SHARED[0]], emb.float()) and torch.equal(out[SHARED[1]], emb.float())
    assert torch.equal(out[SHARED[2]], proj.float())


@settings(max_examples=40, deadline=None)
@given(
    copies=st.integers(1, 7),
    dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
    values=st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=12),
    ints=st.lists(st.integers(-(2**62), 2**62), min_size=0, max_size=4),
)
def test_averaging_copies_of_one_checkpoint_returns_it_unchanged(copies, dtype, values, ints):
    state = OrderedDict()
    state["w"] = torch.tensor(values, dtype=torch.float32).to(dtype)
    state["tied"] = state["w"]
    state["scale"] = torch.tensor(values[::-1], dtype=torch.float32)
    state["count"] = torch.tensor(ints, dtype=torch.int64)
    average_ = avg.ModelAverage()
    for _ in range(copies):
        average_.add("ckpt.pt", copy.deepcopy(state))
    result = average_.result()
    assert list(result) == list(state)
    for key, value in state.items():
        assert result[key].dtype == value.dtype
        assert torch.equal(result[key], value), (key, result[key], value)
    assert result["w"] is result["tied"]


# -- refusals ----------------------------------------------------------------------------


def test_unequal_integer_buffers_are_refused(tmp_path):
    other = model(seed=1)
    other["steps"] = torch.tensor([7, 9])
    a, b = write(tmp_path / "a.pt", model()), write(tmp_path / "b.pt", other)
    message = refused("--inputs", a, b, "--output", tmp_path / "o.pt", match="key steps")
    assert "not floating point" in message and str(a) in message and str(b) in message
    assert not os.path.exists(tmp_path / "o.pt")


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda m: m.pop("layer.bias"), r"key layer\.bias is in .*a\.pt but not in .*b\.pt"),
        (lambda m: m.update(extra=torch.ones(1)), r"key extra is in .*b\.pt but not in .*a\.pt"),
        (
            lambda m: m.update({"layer.bias": torch.ones(5)}),
            r"key layer\.bias is float32 \(4,\) in .*a\.pt but float32 \(5,\) in .*b\.pt",
        ),
        (
            lambda m: m.update({"layer.bias": torch.ones(4, dtype=torch.float64)}),
            r"key layer\.bias is float32 \(4,\) .* but float64 \(4,\)",
        ),
    ],
)
def test_differing_keys_shapes_and_dtypes_are_refused(tmp_path, change, match):
    other = model(seed=1)
    change(other)
    a, b = write(tmp_path / "a.pt", model()), write(tmp_path / "b.pt", other)
    refused("--inputs", a, b, "--output", tmp_path / "o.pt", match=match)


def test_refuses_to_overwrite_an_input(tmp_path):
    a, b = write(tmp_path / "a.pt"), write(tmp_path / "b.pt", model(seed=1))
    before = a.read_bytes()
    refused("--inputs", a, b, "--output", a, match="is one of the inputs")
    refused("--inputs", a, b, "--output", tmp_path / "." / "b.pt", match="is one of the inputs")
    os.symlink(a, tmp_path / "link.pt")
    refused("--inputs", a, b, "--output", tmp_path / "link.pt", match="is one of the inputs")
    assert a.read_bytes() == before


def test_a_crash_while_writing_leaves_no_half_file(tmp_path, monkeypatch):
    a, b = write(tmp_path / "a.pt"), write(tmp_path / "b.pt", model(seed=1))
    out = tmp_path / "avg.pt"
    out.write_bytes(b"previous average")

    def crash(obj, f, *args, **kwargs):
        f.write(b"half a checkpoint")
        raise KeyboardInterrupt  # e.g. killed mid-write

    monkeypatch.setattr(avg.torch, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        average("--inputs", a, b, "--output", out)
    assert out.read_bytes() == b"previous average"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pt", "avg.pt", "b.pt"]
    monkeypatch.undo()
    average("--inputs", a, b, "--output", out)
    assert "model" in load(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pt", "avg.pt", "b.pt"]


class Unsafe:
    """Pickled by reference: weights-only loading must refuse it."""


def test_unreadable_and_unsafe_checkpoints_are_refused(tmp_path):
    good, out = write(tmp_path / "good.pt"), tmp_path / "o.pt"
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[:300])
    refused("--inputs", good, truncated, "--output", out,
            match=r"cannot read checkpoint .*truncated\.pt: the file is truncated or")  # fmt: skip
    unsafe = tmp_path / "unsafe.pt"
    state = checkpoint(model())
    state["extra_state"]["hook"] = Unsafe()
    torch.save(state, unsafe)
    message = refused("--inputs", good, unsafe, "--output", out,
                      match=r"unsafe\.pt holds a pickled .*Unsafe, outside the")  # fmt: skip
    assert "allow-list" in message and "load only checkpoints you trust" in message
    torch.save({"weights": torch.ones(1)}, tmp_path / "plain.pt")
    refused("--inputs", good, tmp_path / "plain.pt", "--output", out,
            match=r"plain\.pt is not a fairseq checkpoint")  # fmt: skip
    refused("--inputs", good, tmp_path / "nowhere.pt", "--output", out,
            match=r"nowhere\.pt does not exist")  # fmt: skip
    assert not out.exists()


def test_namespace_args_of_legacy_checkpoints_load(tmp_path):
    state = checkpoint(model())
    state["args"] = argparse.Namespace(arch="cmlm_plugin_tiny", best_checkpoint_metric="loss")
    torch.save(state, tmp_path / "a.pt")
    average("--inputs", tmp_path / "a.pt", write(tmp_path / "b.pt"), "--output", tmp_path / "o.pt")
    assert load(tmp_path / "o.pt")["args"].arch == "cmlm_plugin_tiny"


# -- selection from a folder ---------------------------------------------------------------


def run_folder(folder, *flags, out=None):
    out = out or folder.parent / "avg.pt"
    average("--inputs", folder, "--output", out, *flags)
    result = load(out)
    return result["model"]["layer.bias"][0].item(), result


def epoch_run(folder, epochs):
    folder.mkdir()
    for e in epochs:  # the model's weights are the epoch number: the mean shows which
        write(folder / f"checkpoint{e}.pt", model(fill=e), updates=10 * e, tag=f"epoch {e}")
    shutil.copy(folder / f"checkpoint{max(epochs)}.pt", folder / "checkpoint_last.pt")
    shutil.copy(folder / f"checkpoint{min(epochs)}.pt", folder / "checkpoint_best.pt")
    return folder


def test_num_last_takes_the_highest_epochs_by_number(tmp_path, capsys):
    folder = epoch_run(tmp_path / "ckpt", [1, 2, 3, 9, 10, 11])
    write(folder / "checkpoint_11_500.pt", model(fill=100))
    mean, result = run_folder(folder, "--num-last", 3)
    assert mean == 10.0  # epochs 11, 10, 9: not "9", "3", "2" as strings
    assert result["extra_state"]["tag"] == "epoch 11"  # the newest's other fields
    listed = [
        line.split()[0] for line in capsys.readouterr().out.splitlines() if line.startswith("  ")
    ]
    assert listed == [str(folder / f"checkpoint{e}.pt") for e in (11, 10, 9)]


def test_num_update_checkpoints_takes_the_highest_updates(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    for epoch, update in [(1, 50), (2, 100), (2, 150), (10, 1000)]:
        write(folder / f"checkpoint_{epoch}_{update}.pt", model(fill=update), updates=update)
    write(folder / "checkpoint2.pt", model(fill=-1))
    mean, result = run_folder(folder, "--num-update-checkpoints", 2)
    assert mean == (1000 + 150) / 2
    assert result["optimizer_history"][-1]["num_updates"] == 1000


BEST_FILES = {  # fairseq's names: 3 decimals, then the random tie-breaking digit
    "checkpoint.best_loss_4.1232.pt": (4.123, 30),
    "checkpoint.best_loss_3.9870.pt": (3.987, 20),
    "checkpoint.best_loss_10.5001.pt": (10.5, 10),
    "checkpoint.best_loss_4.0003.pt": (4.0, 40),
}


def test_num_best_ranks_by_the_value_in_fairseqs_file_names(tmp_path, capsys):
    folder = epoch_run(tmp_path / "ckpt", [1, 2])
    for name, (value, updates) in BEST_FILES.items():
        write(folder / name, model(fill=value), updates=updates, tag=name)
    mean, result = run_folder(folder, "--num-best", 2)
    assert mean == pytest.approx((3.987 + 4.0) / 2)
    assert result["extra_state"]["tag"] == "checkpoint.best_loss_4.0003.pt"  # most updates
    out = capsys.readouterr().out
    assert "checkpoint.best_loss_3.9870.pt  (loss 3.987)" in out
    mean, _ = run_folder(folder, "--num-best", 3)
    assert mean == pytest.approx((3.987 + 4.0 + 4.123) / 3)  # 10.5 is worst, not "1..."
    with pytest.raises(CMLMPluginError, match="trained to rank loss lower is better"):
        run_folder(folder, "--num-best", 2, "--maximize")


def test_num_best_maximize_with_another_metric(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    for value in (20.5, 31.25, 28.0):
        name = f"checkpoint.best_bleu_{value:.3f}0.pt"
        write(folder / name, model(fill=value), metric="bleu", maximize=True)
    mean, _ = run_folder(folder, "--num-best", 2, "--best-metric", "bleu", "--maximize")
    assert mean == pytest.approx((31.25 + 28.0) / 2)
    refused("--inputs", folder, "--output", tmp_path / "o.pt", "--num-best", 2,
            match=r"no files named checkpoint\.best_loss_<VALUE>\.pt in .*ckpt, but there are "
                  r"best checkpoints by bleu: pass --best-metric bleu")  # fmt: skip


def test_num_best_without_named_files_ranks_by_the_stored_validation_value(tmp_path):
    folder, out = tmp_path / "ckpt", tmp_path / "o.pt"
    folder.mkdir()
    for epoch, loss in [(1, 5.0), (2, 4.0), (3, 3.5), (4, 3.75)]:
        write(folder / f"checkpoint{epoch}.pt", model(fill=epoch), val_loss=loss, updates=epoch)
    write(folder / "checkpoint_4_35.pt", model(fill=100), val_loss=3.0, updates=35)
    write(folder / "checkpoint_4_36.pt", model(fill=200), val_loss=None, updates=36)
    shutil.copy(folder / "checkpoint_4_35.pt", folder / "checkpoint_best.pt")  # not twice
    mean, result = run_folder(folder, "--num-best", 2)
    assert mean == (100 + 3) / 2
    assert result["optimizer_history"][-1]["num_updates"] == 35
    refused("--inputs", folder, "--output", out, "--num-best", 9,
            match=r"--num-best 9 needs 9 epoch or update checkpoints storing a validation loss "
                  r"but .*ckpt has only 5")  # fmt: skip
    refused("--inputs", folder, "--output", out, "--num-best", 2, "--best-metric", "bleu",
            match=r"with --best-checkpoint-metric loss.*pass --best-metric loss")  # fmt: skip


def test_no_checkpoints_or_too_few_are_refused_naming_folder_pattern_and_flag(tmp_path):
    folder, out = tmp_path / "ckpt", tmp_path / "o.pt"
    folder.mkdir()
    write(folder / "checkpoint_last.pt")
    refused("--inputs", folder, "--output", out, "--num-last", 5,
            match=rf"--num-last 5: no epoch checkpoints in {folder} "
                  r"\(files named checkpoint<EPOCH>\.pt")  # fmt: skip
    refused("--inputs", folder, "--output", out, "--num-update-checkpoints", 2,
            match=rf"--num-update-checkpoints 2: no update checkpoints in {folder} "
                  r"\(files named checkpoint_<EPOCH>_<UPDATE>\.pt")  # fmt: skip
    refused("--inputs", folder, "--output", out, "--num-best", 5,
            match=rf"--num-best 5: no checkpoints to rank by loss in {folder}: "
                  r"no files named checkpoint\.best_loss_<VALUE>\.pt")  # fmt: skip
    write(folder / "checkpoint1.pt")
    write(folder / "checkpoint2.pt", model(seed=1))
    refused("--inputs", folder, "--output", out, "--num-last", 5,
            match=r"--num-last 5 needs 5 epoch checkpoints .* has only 2 "
                  r"\(checkpoint2\.pt, checkpoint1\.pt\): use --num-last 2 or fewer")  # fmt: skip
    refused("--inputs", folder, "--output", out,
            match=r"is a folder: choose its checkpoints with --num-last N")  # fmt: skip
    one = folder / "checkpoint1.pt"
    refused("--inputs", one, "--output", out, "--num-last", 1,
            match=r"--num-last 1 selects checkpoints from a folder")  # fmt: skip
    refused("--inputs", one, one, "--output", out, match=r"is given twice")
    refused("--inputs", one, "--output", out, "--maximize", match=r"apply only to --num-best")
    assert not out.exists()


# -- end to end ----------------------------------------------------------------------------


def test_console_command_averages_the_tiny_run_and_fairseq_generate_decodes_it(tiny_run, tmp_path):
    from cli import hypotheses, run
    from conftest import N_TEST

    folder = tmp_path / "ckpt"
    folder.mkdir()
    shutil.copy(tiny_run / "ckpt" / "checkpoint_last.pt", folder / "checkpoint1.pt")
    state = load(folder / "checkpoint1.pt")
    assert "last_optimizer_state" in state
    seen, generator = set(), torch.Generator().manual_seed(0)
    for value in state["model"].values():  # a second, different checkpoint of the same model
        ptr = value.untyped_storage().data_ptr()
        if value.is_floating_point() and ptr not in seen:  # shared embeddings: perturb once
            seen.add(ptr)
            value.add_(0.01 * torch.randn(value.shape, generator=generator))
    torch.save(state, folder / "checkpoint2.pt")

    out = tmp_path / "avg.pt"
    printed = run("cmlm-average-checkpoints", "--inputs", folder, "--num-last", 2,
                  "--output", out, stdout_only=True)  # fmt: skip
    listed = [line.split()[0] for line in printed.splitlines() if line.startswith("  ")]
    assert listed == [str(folder / "checkpoint2.pt"), str(folder / "checkpoint1.pt")]
    assert printed.splitlines()[-1] == f"wrote {out}"
    averaged = load(out)
    inputs = [load(folder / f"checkpoint{e}.pt")["model"] for e in (2, 1)]
    for key, value in averaged["model"].items():
        reference = (inputs[0][key].double() + inputs[1][key].double()) / 2
        assert torch.equal(value, reference.to(value.dtype)), key
    assert "last_optimizer_state" not in averaged
    assert os.path.getsize(out) < os.path.getsize(folder / "checkpoint1.pt") / 2

    decoded = run(
        "fairseq-generate", tiny_run / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm",
        "--path", out, "--cpu", "--batch-size", "8", "--gen-subset", "test",
        "--iter-decode-max-iter", 4, "--iter-decode-with-beam", 2,
    )  # fmt: skip
    hypos = hypotheses(decoded)
    assert sorted(hypos) == list(range(N_TEST))  # the average loads and decodes every sentence
    assert not any("<mask>" in h for h in hypos.values())
