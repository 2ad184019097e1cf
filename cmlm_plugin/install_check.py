"""Refuse a ``--user-dir`` copy of the plugin that is not the installed version.

fairseq imports whatever folder ``--user-dir`` names. A stale copy of the plugin (an
old checkout, a folder copied next to the experiment) would then register an old
task and model without a word; checkpoints trained with newer options fail later
and far from the cause. When the ``cmlm-plugin`` distribution is installed and the
imported copy carries another version, the import stops with a one-line error.
A source tree that was never installed is accepted as is.
"""

import importlib.metadata

from .errors import CMLMPluginError

DISTRIBUTION = "cmlm-plugin"


def check_installed_version(version: str, folder: str) -> None:
    try:
        installed = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return
    if installed != version:
        raise CMLMPluginError(
            f"--user-dir {folder} holds cmlm_plugin {version}, but {DISTRIBUTION} "
            f"{installed} is installed: point --user-dir at the installed copy "
            '(--user-dir "$(cmlm-plugin-dir)") or pip install the copy you want to use'
        )
