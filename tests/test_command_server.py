"""The tests' fork server (``command_server.py``): a command run through it gets its argv,
cwd, environment, stdin, exit status, output and an ordinary interpreter exit, as a fresh
process would; a timeout kills it. Fairseq's own commands through both paths are compared in
``test_reliability_e2e`` (the same training, bit for bit) and below (a failing start)."""

import atexit
import os
import subprocess
import sys

import pytest
from cli import CommandServer, environment, invoke
from conftest import ROOT


def probe():
    """A console entry point for the server (imported by its child from tests/)."""
    atexit.register(print, "atexit ran")
    print(os.getcwd(), os.environ["PROBE"], sys.argv[1:], sys.stdin.read().split())
    print("to stderr", file=sys.stderr)
    if "--raise" in sys.argv:
        raise ValueError("probe failed")
    return 3


def through_server(*args, cwd=ROOT, stdin=None, timeout=120):
    server = CommandServer.shared()
    return server.run(["probe", *args], "test_command_server:probe", cwd, stdin,
                      environment(PROBE="set"), timeout)  # fmt: skip


def test_a_command_gets_its_cwd_environment_argv_stdin_and_exit_status(tmp_path):
    proc = through_server("x", "--y", cwd=tmp_path, stdin="one\ntwo\n")
    assert proc.returncode == 3
    assert proc.stdout.splitlines() == [f"{tmp_path} set ['x', '--y'] ['one', 'two']", "atexit ran"]
    assert proc.stderr == "to stderr\n"


def test_an_uncaught_error_exits_1_with_its_traceback():
    proc = through_server("--raise")
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1] == "ValueError: probe failed"


def test_a_command_past_its_timeout_is_killed():
    with pytest.raises(subprocess.TimeoutExpired):
        CommandServer.shared().run(["pause"], "signal:pause", ROOT, None, environment(), 1)
    assert through_server().returncode == 3  # the server goes on


def test_a_failing_fairseq_command_reads_the_same_through_both_paths(tmp_path):
    args = ("fairseq-generate", tmp_path, "--user-dir", "cmlm_plugin", "--task", "cmlm")
    forked, fresh = invoke(*args), invoke(*args, fresh=True)
    assert forked.returncode == fresh.returncode != 0
    assert forked.stderr.splitlines()[-1] == fresh.stderr.splitlines()[-1]


def test_a_changed_start_up_variable_gets_a_fresh_interpreter():
    server = CommandServer.shared()
    assert server.serves(environment(MULTI30K_DIR="/x"))
    assert not server.serves(environment(OMP_NUM_THREADS="2"))
    assert not server.serves(environment(PYTHONIOENCODING="latin-1"))
