"""Models registered by the plugin."""

from .cmlm_transformer import CMLMPluginModel  # noqa: F401
