"""``python -m cmlm_plugin.cli.diagnose``: the same as the ``cmlm-diagnose`` command."""

from . import main

main()
