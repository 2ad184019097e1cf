"""User errors of the plugin, shown as one line instead of a traceback.

``CMLMPluginError`` marks a mistake the user can fix (a bad flag, a wrong
checkpoint, malformed input); its message names the problem and the fix.
``install_excepthook`` makes fairseq's console commands print such an error, or
an error raised while handling one (fairseq re-raises checkpoint failures as its
own ``Exception``), as ``cmlm_plugin error: ...`` on one line and exit with
status 1. Every other exception keeps its full traceback, and
``CMLM_PLUGIN_TRACEBACK=1`` shows the traceback of ours too.
"""

import os
import sys

TRACEBACK_ENV = "CMLM_PLUGIN_TRACEBACK"
PREFIX = "cmlm_plugin error: "


class CMLMPluginError(ValueError):
    """A user-fixable problem; the message says what is wrong and how to fix it."""


def find_plugin_error(exc: BaseException):
    """The first ``CMLMPluginError`` in ``exc``'s cause/context chain, or None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, CMLMPluginError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def one_line(exc: BaseException) -> str:
    """The message ``install_excepthook`` prints for ``exc`` (no trailing newline)."""
    ours = find_plugin_error(exc)
    message = " ".join(str(ours).split())
    if ours is not exc:  # fairseq wrapped it: keep fairseq's first line as context
        outer = str(exc).strip().splitlines()
        if outer:
            message = f"{message} (while: {outer[0]})"
    return PREFIX + message


def install_excepthook() -> None:
    """Print uncaught plugin errors as one line; leave every other error alone."""
    previous = sys.excepthook
    if getattr(previous, "_cmlm_plugin", False):
        return

    def hook(exc_type, exc, tb):
        if find_plugin_error(exc) is None or os.environ.get(TRACEBACK_ENV):
            previous(exc_type, exc, tb)
        else:
            print(one_line(exc), file=sys.stderr, flush=True)

    hook._cmlm_plugin = True
    sys.excepthook = hook
