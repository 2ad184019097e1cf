"""A fork server for the console commands the tests run (``cli.invoke``).

Each command a test runs used to start a fresh interpreter that imported torch, scikit-learn
(fairseq's tasks import it) and the rest of fairseq's third-party stack: most of the 5 to 7 s
of CPU that a command spent before doing anything. The server is one interpreter
per test process that imports those libraries once (``PRELOAD``) and forks a child for each
command. The child is the command as a user runs it in every other respect: its own process,
its console entry point called with its argv, its cwd, environment, stdin, exit status and
output, and an ordinary interpreter exit (atexit handlers, stream flushes). fairseq and the
plugin are not preloaded: each command imports them itself, with their import-time logging
set-up, registries and ``--user-dir`` loading as in a fresh process.

What a child inherits and a fresh command would not: the server's hash seed (shared by the
commands of one test process; ``test_reliability_e2e`` trains its second run in a fresh
interpreter and checks the two checkpoints bit for bit) and the environment variables that
take effect at interpreter or library start (``cli.invoke`` starts a fresh interpreter when a
command changes one of them). ``CMLM_TEST_FORK=0`` runs every command fresh.

Protocol: one JSON request per line on a socket, one JSON reply per command.
"""

import importlib
import json
import os
import signal
import socket
import sys
import time

# the imports that dominate a command's start (python -X importtime, 2026-12-03): everything
# fairseq imports from outside itself that costs more than 0.1 s, none of it configuring logging
PRELOAD = ("torch", "numpy", "scipy.stats", "sklearn.metrics", "sacrebleu", "omegaconf",
           "hydra.core.config_store")  # fmt: skip


def entry_point(target: str):
    """The callable named by a console-script target ``module:attr.attr``."""
    module, _, attrs = target.partition(":")
    found = importlib.import_module(module)
    for attr in attrs.split("."):
        found = getattr(found, attr)
    return found


def redirect(path: str, fd: int, flags: int) -> None:
    opened = os.open(path, flags, 0o644)
    os.dup2(opened, fd)
    os.close(opened)


def become_command(request: dict) -> None:
    """In the forked child: turn this process into the command; never returns."""
    os.setpgid(0, 0)  # a timeout kills the command's own children as well
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    redirect(request["stdin"], 0, os.O_RDONLY)
    redirect(request["stdout"], 1, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    redirect(request["stderr"], 2, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    sys.argv = request["argv"]
    # as a console script does; SystemExit (or an error) leaves the server's loop and the
    # interpreter exits as a fresh command's would
    sys.exit(entry_point(request["entry"])())


def wait(pid: int, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return {"returncode": os.waitstatus_to_exitcode(status), "timed_out": False}
        if time.monotonic() > deadline:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return {"returncode": -signal.SIGKILL, "timed_out": True}
        time.sleep(0.02)


def serve(fd: int) -> None:
    for name in PRELOAD:
        importlib.import_module(name)
    channel = socket.socket(fileno=fd)
    requests = channel.makefile("r", encoding="utf-8")
    channel.sendall(b'{"ready": true}\n')
    for line in requests:  # ends when the test process closes its end
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            requests.close()
            channel.close()
            become_command(request)
        reply = wait(pid, request["timeout"])
        channel.sendall((json.dumps(reply) + "\n").encode("utf-8"))


if __name__ == "__main__":
    serve(int(sys.argv[1]))
