"""Tasks registered by the plugin."""

from .cmlm_task import CMLMPluginTask  # noqa: F401
