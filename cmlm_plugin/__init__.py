"""cmlm_plugin: Mask-Predict CMLMs for fairseq (``--user-dir cmlm_plugin``).

Importing the package registers the task ``cmlm``, the model
``cmlm_plugin_transformer`` (archs ``cmlm_plugin_{tiny,small,base,big}``) and the
criterion ``cmlm_plugin_loss``, and allow-lists what fairseq checkpoints hold for
torch's weights-only loading.
"""

from . import checkpoint_safety  # noqa: F401  (allow-list, before any load)
from . import criterions, models, tasks  # noqa: F401  (registration)

__version__ = "0.1.0"
