"""End-to-end reliability (issue 6): exact resume after SIGKILL, seeded determinism,
atomic checkpoint writes, two-process CPU training, and no network at run time.

Measured tolerances are stated beside each assertion.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys

import pytest
import torch
from cli import BIN, environment, hypotheses, preprocess, run
from conftest import ROOT
from toydata import write_transduction

UPDATES = 30
KILL_AT = 20  # a mid-epoch checkpoint (an epoch is ~40 updates here)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("reliability")
    write_transduction(root / "raw", {"train": 600, "valid": 20, "test": 12}, seed=5)
    preprocess(root / "raw", root / "bin")
    return root


def train_args(data, save_dir, *extra):
    return [
        data / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm",
        "--arch", "cmlm_plugin_tiny", "--criterion", "cmlm_plugin_loss",
        "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", 150,
        "--max-update", UPDATES, "--save-interval-updates", 10, "--no-epoch-checkpoints",
        "--log-format", "json", "--log-interval", 1, "--save-dir", save_dir,
        "--cpu", "--seed", 7, "--disable-validation", *extra,
    ]  # fmt: skip


def losses(log: str) -> dict:
    """``{update: (epoch, loss string)}`` from fairseq's JSON ``train_inner`` lines."""
    found = {}
    for line in log.splitlines():
        if "| train_inner |" in line:
            record = json.loads(line.split("| train_inner |", 1)[1])
            found[int(record["num_updates"])] = (int(record["epoch"]), record["loss"])
    return found


def model_state(path):
    import cmlm_plugin  # noqa: F401  (allow-list for weights-only loading)

    return torch.load(path, map_location="cpu")["model"]


@pytest.fixture(scope="module")
def reference(data):
    """One uninterrupted run, and the same run again for determinism: b in a fresh
    interpreter (its own hash seed), a as a child of the tests' fork server (cli.invoke)."""
    logs = {}
    for name in ("a", "b"):
        log = run("fairseq-train", *train_args(data, data / name), fresh=name == "b")
        logs[name] = losses(log)
    return logs


def test_same_seed_gives_identical_checkpoints_and_outputs(data, reference):
    assert reference["a"] == reference["b"] and len(reference["a"]) == UPDATES
    a = model_state(data / "a" / "checkpoint_last.pt")
    b = model_state(data / "b" / "checkpoint_last.pt")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)  # bit-identical weights
    outputs = []
    for name in ("a", "a"):  # temperature 0: the same output every time (b's weights are a's)
        out = run(
            "fairseq-generate", data / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm",
            "--path", data / name / "checkpoint_last.pt", "--cpu", "--gen-subset", "test",
            "--iter-decode-max-iter", 4, "--iter-decode-with-beam", 3,
        )  # fmt: skip
        outputs.append(hypotheses(out))
    assert outputs[0] == outputs[1] and len(outputs[0]) == 12


def test_sigkill_mid_epoch_then_restart_continues_the_same_curve(data, reference):
    save = data / "killed"
    proc = subprocess.Popen(
        [str(BIN / "fairseq-train"), *map(str, train_args(data, save))],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=environment(),
    )  # fmt: skip
    first = []
    for line in proc.stdout:
        first.append(line)
        if "Saved checkpoint" in line and f"@ {KILL_AT} updates" in line:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=120)
    assert proc.returncode == -signal.SIGKILL, "".join(first[-20:])
    assert model_state(save / "checkpoint_last.pt")  # the interrupted run's file loads

    resumed = losses(run("fairseq-train", *train_args(data, save)))  # the same command
    assert sorted(resumed) == list(range(KILL_AT + 1, UPDATES + 1))
    assert resumed[KILL_AT + 1][0] == 1  # resumed inside epoch 1, not at its start
    for update, (epoch, loss) in resumed.items():
        # measured: identical to the uninterrupted run at fairseq's 3 printed decimals
        assert (epoch, loss) == reference["a"][update], update
    final = model_state(save / "checkpoint_last.pt")
    a = model_state(data / "a" / "checkpoint_last.pt")
    assert all(torch.equal(final[k], a[k]) for k in a)  # measured: bit-identical weights


def test_checkpoint_write_is_atomic_when_interrupted(data, reference, monkeypatch, tmp_path):
    """fairseq saves to ``name.tmp`` and renames: a crash mid-write keeps the old file."""
    from fairseq import checkpoint_utils

    target = tmp_path / "checkpoint_last.pt"
    target.write_bytes((data / "a" / "checkpoint_last.pt").read_bytes())
    state = torch.load(target, map_location="cpu", weights_only=False)
    real_save = torch.save

    def crash_midway(obj, f, *args, **kwargs):
        f.write(b"partial bytes of a checkpoint")
        raise KeyboardInterrupt("killed while writing")

    monkeypatch.setattr(torch, "save", crash_midway)
    with pytest.raises(KeyboardInterrupt):
        checkpoint_utils.torch_persistent_save(state, str(target))
    monkeypatch.setattr(torch, "save", real_save)
    assert model_state(target).keys() == state["model"].keys()  # the old file is intact
    assert state["cfg"]["task"]["_name"] == "cmlm"  # our task config travels with it


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_process_gloo_training_matches_one_process_with_twice_the_batch(data):
    """fairseq's DDP on CPU: gloo backend, ``legacy_ddp`` (``pytorch_ddp`` passes
    device ids that CPU modules reject), one process per rank as fairseq documents
    for multi-node runs (``--distributed-init-method`` + ``--distributed-rank``)."""
    # no dropout: its stream, unlike the task's noise, differs between the two setups
    common = ["--max-update", 12, "--save-interval-updates", 0, "--dropout", 0]
    single = losses(
        run("fairseq-train", *train_args(data, data / "single", *common), "--update-freq", 2)
    )
    init = f"tcp://127.0.0.1:{free_port()}"
    procs = [
        subprocess.Popen(
            [str(BIN / "fairseq-train"), *map(str, train_args(data, data / "ddp", *common)),
             "--distributed-world-size", "2", "--distributed-rank", str(rank),
             "--distributed-init-method", init, "--distributed-no-spawn",
             "--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=environment(OMP_NUM_THREADS="1"),
        )  # fmt: skip
        for rank in range(2)
    ]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs[0][-3000:]
    both = losses(outs[0])
    assert sorted(both) == sorted(single) == list(range(1, 13))
    # Rank r takes every other batch, as --update-freq 2 does, and the task draws the
    # same masks for a batch either way (CMLMPluginTask.noise_generator).
    assert both == single  # measured: equal at fairseq's 3 printed decimals
    ddp = model_state(data / "ddp" / "checkpoint_last.pt")
    one = model_state(data / "single" / "checkpoint_last.pt")
    gap = max((ddp[k].float() - one[k].float()).abs().max().item() for k in one)
    print(f"two-process vs one-process weights after 12 updates: max |diff| {gap:.2e}")
    assert gap < 1e-4  # measured: 1.5e-07 (float summation order only)


BLOCK_NETWORK = """
import socket
_LOCAL = ("127.0.0.1", "::1", "localhost")
_connect, _getaddrinfo = socket.socket.connect, socket.getaddrinfo
def _connect_local(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in _LOCAL:
        raise OSError("network access attempted")
    return _connect(self, address)
def _getaddrinfo_local(host, *args, **kwargs):
    if host not in _LOCAL and host is not None:
        raise OSError("network access attempted")
    return _getaddrinfo(host, *args, **kwargs)
socket.socket.connect = _connect_local
socket.getaddrinfo = _getaddrinfo_local
"""


def test_no_network_at_import_or_run_time(tiny_run, tmp_path):
    """Internet connections are refused (local IPC stays allowed); decoding still works."""
    (tmp_path / "sitecustomize.py").write_text(BLOCK_NETWORK)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    out = run(
        "fairseq-generate", tiny_run / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm",
        "--path", tiny_run / "ckpt" / "checkpoint_last.pt", "--cpu", "--gen-subset", "test",
        env=env,
    )  # fmt: skip
    assert len(hypotheses(out)) == 20
    check = subprocess.run(
        [sys.executable, "-c", "import socket; socket.create_connection(('example.org', 80))"],
        env=dict(os.environ, **env), capture_output=True, text=True,
    )  # fmt: skip
    assert "network access attempted" in check.stderr  # the block itself works
    assert re.search(r"^H-0\t", out, re.M)
