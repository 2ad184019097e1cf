"""Helpers to run fairseq's console commands as subprocesses and parse their output."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

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


def invoke(name: str, *args, cwd=None, stdin=None, timeout=900, env=None):
    """Run a console command of this environment (``env`` adds variables)."""
    env = environment(**(env or {}))
    return subprocess.run(
        command(name) + [str(a) for a in args],
        cwd=cwd or ROOT,
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


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
