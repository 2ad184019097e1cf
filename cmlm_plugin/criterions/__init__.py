"""Criterions registered by the plugin."""

from .cmlm_loss import CMLMPluginLoss  # noqa: F401
