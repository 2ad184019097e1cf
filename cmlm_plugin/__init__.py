"""cmlm_plugin: Mask-Predict CMLMs for fairseq (``--user-dir cmlm_plugin``).

Importing the package registers the task ``cmlm``, the model
``cmlm_plugin_transformer`` (archs ``cmlm_plugin_{tiny,small,base,big}``) and the
criterion ``cmlm_plugin_loss``, allow-lists what fairseq checkpoints hold for
torch's weights-only loading (``checkpoints.safety``), makes checkpoint failures name
their file (``checkpoints.errors``), prints the plugin's own user errors as one line
(``errors.py``), and stops fairseq's batch-prefetch threads at exit so that a
finished training cannot abort in shutdown (``training.prefetch_shutdown``). The
decoding algorithms live in the separate package ``cmlm_decoding``.
"""

import os

from . import criterions, models, tasks  # noqa: F401  (registration)
from .checkpoints import errors as checkpoint_errors
from .checkpoints import safety  # noqa: F401  (the weights-only allow-list, on import)
from .errors import install_excepthook
from .install_check import check_installed_version
from .training import prefetch_shutdown
from .version import __version__

install_excepthook()
check_installed_version(__version__, os.path.dirname(os.path.abspath(__file__)))
checkpoint_errors.install()
prefetch_shutdown.install()
