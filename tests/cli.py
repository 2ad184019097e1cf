"""Helpers to run fairseq's console commands as subprocesses and parse their output."""

import atexit
import importlib.metadata
import json
import locale
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

from conftest import ROOT, THREADS

BIN = Path(sys.executable).parent


def command(name: str) -> List[str]:
    """The console script ``name`` of this Python's environment."""
    path = shutil.which(name, path=str(BIN)) or shutil.which(name)
    if path is None:
        raise FileNotFoundError(f"{name} is not installed: pip install -e . first")
    return [path]


def environment(**extra) -> Dict[str, str]:
    """The environment of the commands the tests run, plus ``extra``.

    One thread per command (``conftest.THREADS``). A traceback request is dropped so that
    the plugin's one-line errors show as users see them.
    """
    env = dict(os.environ, OMP_NUM_THREADS=THREADS, PYTHONWARNINGS="ignore")
    env.pop("CMLM_PLUGIN_TRACEBACK", None)
    env.update(extra)
    return env


def invoke(name: str, *args, cwd=None, stdin=None, timeout=900, env=None, fresh=False):
    """Run a console command of this environment (``env`` adds variables).

    A Python console command runs as a child of this test process's fork server
    (``command_server.py``: torch and the other heavy libraries already imported), unless
    ``fresh``, ``CMLM_TEST_FORK=0``, or ``env`` changes a variable read at start-up; then,
    and for every other program, in a fresh process.
    """
    env = environment(**(env or {}))
    argv = command(name) + [str(a) for a in args]
    target = console_target(name)
    if target and not fresh and os.environ.get("CMLM_TEST_FORK", "1") != "0":
        server = CommandServer.shared()
        if server.serves(env):
            return server.run(argv, target, cwd or ROOT, stdin, env, timeout)
    return subprocess.run(
        argv, cwd=cwd or ROOT, input=stdin, capture_output=True, text=True, env=env,
        timeout=timeout,
    )  # fmt: skip


def console_target(name: str) -> Optional[str]:
    """``module:function`` of the console script ``name``, or None for other programs."""
    found = importlib.metadata.entry_points(group="console_scripts", name=name)
    return next(iter(found)).value if found else None


# read when an interpreter or torch starts: a child of the server keeps the server's values
STARTUP_VARIABLES = re.compile(r"^(PYTHON|OMP_|MKL_|CUDA_|TORCH|LD_|MALLOC)")


class CommandServer:
    """This test process's connection to its fork server (started on first use)."""

    _shared = None

    @classmethod
    def shared(cls) -> "CommandServer":
        if cls._shared is None:
            cls._shared = cls()
            atexit.register(cls._shared.close)
        return cls._shared

    def __init__(self):
        self.env = environment()
        ours, theirs = socket.socketpair()
        self.log = tempfile.NamedTemporaryFile("w+", prefix="command-server-", suffix=".log")
        self.process = subprocess.Popen(
            [sys.executable, Path(__file__).with_name("command_server.py"), str(theirs.fileno())],
            pass_fds=[theirs.fileno()], env=self.env, cwd=ROOT,
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
        )  # fmt: skip
        theirs.close()
        self.channel = ours
        self.replies = ours.makefile("r", encoding="utf-8")
        self.reply()  # {"ready": true} once the preloaded libraries are imported

    def serves(self, env: Dict[str, str]) -> bool:
        """Whether a command with ``env`` starts as it would in a fresh process."""
        names = {n for n in {*env, *self.env} if STARTUP_VARIABLES.match(n)}
        return all(env.get(n) == self.env.get(n) for n in names)

    def reply(self) -> dict:
        line = self.replies.readline()
        if not line:
            self.log.seek(0)
            raise RuntimeError(f"the command server stopped:\n{self.log.read()[-3000:]}")
        return json.loads(line)

    def run(self, argv, target, cwd, stdin, env, timeout) -> subprocess.CompletedProcess:
        encoding = locale.getpreferredencoding(False)  # as subprocess.run(text=True)
        with tempfile.TemporaryDirectory(prefix="command-") as folder:
            files = {k: os.path.join(folder, k) for k in ("stdin", "stdout", "stderr")}
            with open(files["stdin"], "w", encoding=encoding) as handle:
                handle.write(stdin or "")
            request = dict(files, argv=argv, entry=target, cwd=str(cwd), env=env, timeout=timeout)
            self.channel.sendall((json.dumps(request) + "\n").encode("utf-8"))
            reply = self.reply()
            output = {}
            for stream in ("stdout", "stderr"):
                with open(files[stream], encoding=encoding) as handle:
                    output[stream] = handle.read()
        if reply["timed_out"]:
            raise subprocess.TimeoutExpired(argv, timeout, output["stdout"], output["stderr"])
        return subprocess.CompletedProcess(argv, reply["returncode"], **output)

    def close(self) -> None:
        self.replies.close()
        self.channel.close()  # the server's loop ends at end of file
        self.process.wait(timeout=60)
        self.log.close()


def run(name: str, *args, stdout_only=False, **kwargs) -> str:
    """Run a console command; fail with its output if it exits non-zero.

    Returns stdout followed by stderr (fairseq logs to stderr), or stdout alone.
    """
    proc = invoke(name, *args, **kwargs)
    if proc.returncode != 0:
        raise AssertionError(
            f"{name} exited {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}"
            f"\n--- stderr\n{proc.stderr[-5000:]}"
        )
    return proc.stdout if stdout_only else proc.stdout + proc.stderr


def preprocess(raw: Path, out: Path, splits=("train", "valid", "test")) -> None:
    """fairseq-preprocess (joined dictionary) of ``raw/{split}.src|tgt`` into ``out``, run
    in this process: the console command would cost seconds of imports per fixture, and
    the recipes' tests (quickstart, distill.sh, the tagged data) still run it as users do."""
    import logging

    from fairseq import options
    from fairseq_cli import preprocess as fairseq_preprocess

    argv = ["--source-lang", "src", "--target-lang", "tgt", "--destdir", out]
    argv += ["--joined-dictionary", "--workers", "1"]
    for split in splits:
        argv += [f"--{split}pref", raw / split]
    logger = logging.getLogger("fairseq_cli.preprocess")
    kept, level = set(logger.handlers), logger.level
    # INFO: out/preprocess.log as the command writes it (distill.sh reads the language pair)
    logger.setLevel(logging.INFO)
    try:
        fairseq_preprocess.main(
            options.get_preprocessing_parser().parse_args([str(a) for a in argv])
        )
    finally:  # main() adds a FileHandler to out/preprocess.log on every call
        logger.setLevel(level)
        for handler in set(logger.handlers) - kept:
            logger.removeHandler(handler)
            handler.close()


def hypotheses(output: str, tag: str = "H") -> Dict[int, str]:
    """``{sentence id: text}`` from fairseq-generate/interactive ``H-``/``D-`` lines."""
    found = {}
    for line in output.splitlines():
        match = re.match(rf"^{tag}-(\d+)\t(\S+)\t(.*)$", line)
        if match:
            found[int(match.group(1))] = match.group(3)
    return found


def tagged(output: str, tag: str) -> Dict[str, str]:
    """``{id: rest}`` from lines ``TAG-id<TAB>rest`` (ids may be ``3_1``)."""
    found = {}
    for line in output.splitlines():
        match = re.match(rf"^{tag}-([\d_]+)\t(.*)$", line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def bleu(output: str) -> float:
    match = re.search(r"BLEU4? = ([\d.]+)", output) or re.search(r"BLEU = ([\d.]+)", output)
    if match is None:
        raise AssertionError(f"no BLEU line in:\n{output[-2000:]}")
    return float(match.group(1))


def run_python(code: str, marker: str, timeout=300) -> str:
    """Run ``code`` in a fresh interpreter; fail unless it exits 0 and prints ``marker``."""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert marker in proc.stdout, proc.stdout[-2000:]
    return proc.stdout


def fails(name: str, *args, **kwargs) -> str:
    """Run a console command that must fail; return the last line of its stderr."""
    proc = invoke(name, *args, **kwargs)
    assert proc.returncode != 0, f"{name} should have failed:\n{proc.stdout[-2000:]}"
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    return lines[-1] if lines else ""
