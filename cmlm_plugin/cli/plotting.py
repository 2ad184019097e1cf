"""matplotlib for the ``--plot`` options, imported only when a plot is asked for.

``pyplot()`` imports it headless (the Agg backend, no display needed) or raises one
clear ``CMLMPluginError`` saying how to install it, so that matplotlib stays an optional
dependency of ``cmlm-table``, ``cmlm-diagnose`` and the benchmarks' plots.
"""

import logging

from ..errors import CMLMPluginError


def pyplot():
    """``matplotlib.pyplot`` with the Agg backend; a one-line error if it is missing."""
    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # fairseq logs at DEBUG
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise CMLMPluginError(
            "--plot needs matplotlib: pip install matplotlib (or drop --plot)"
        ) from exc
    return plt
