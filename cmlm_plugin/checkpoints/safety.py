"""Weights-only checkpoint loading for fairseq checkpoints (torch >= 2.6).

torch.load defaults to ``weights_only=True`` since torch 2.6; fairseq's
``checkpoint_utils`` calls it without the flag, so a checkpoint loads only if
every non-tensor object in it is allow-listed. fairseq stores its legacy
``args`` as an ``argparse.Namespace``; that is the one class added here.
Weights-only loading itself stays on: a checkpoint holding any other pickled
callable is still refused.
"""

import argparse

import torch

SAFE_GLOBALS = [argparse.Namespace]

if hasattr(torch.serialization, "add_safe_globals"):
    torch.serialization.add_safe_globals(SAFE_GLOBALS)
