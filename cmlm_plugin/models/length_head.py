"""Target-length prediction from the encoder (Ghazvininejad et al., 2019, §3.3).

The encoder states of the real source tokens are mean-pooled and a linear layer
scores C length classes (fairseq's port of Mask-Predict does the same; the original
code reads a prepended LENGTH token instead). Class c stands for target length c,
or, with ``offset`` mode, for ``source_length + c - C // 2`` (the model then
predicts the difference target - source). Lengths count real target tokens only
(no BOS/EOS).
"""

import torch
from torch import Tensor, nn

from ..errors import CMLMPluginError


class LengthHead(nn.Module):
    def __init__(self, embed_dim: int, num_classes: int, offset: bool = False):
        super().__init__()
        if num_classes < 2:
            raise CMLMPluginError(f"--length-classes must be >= 2, got {num_classes}")
        self.num_classes = num_classes
        self.offset = offset
        self.proj = nn.Linear(embed_dim, num_classes)

    def forward(self, encoder_states: Tensor, padding_mask: Tensor) -> Tensor:
        """Length logits.

        Args:
            encoder_states: ``T x B x C`` (fairseq's time-first layout).
            padding_mask: ``B x T`` bool, True at source padding.

        Returns:
            ``B x num_classes`` logits.
        """
        keep = (~padding_mask).transpose(0, 1).unsqueeze(-1).to(encoder_states)  # T x B x 1
        pooled = (encoder_states * keep).sum(0) / keep.sum(0).clamp(min=1.0)  # B x C
        return self.proj(pooled)  # B x num_classes

    def class_lengths(self, source_lengths: Tensor) -> Tensor:
        """``B x num_classes``: the target length each class stands for."""
        classes = torch.arange(self.num_classes, device=source_lengths.device)
        if not self.offset:
            return classes[None, :].expand(source_lengths.size(0), -1)
        return source_lengths[:, None] + classes[None, :] - self.num_classes // 2

    def target_classes(self, target_lengths: Tensor, source_lengths: Tensor) -> Tensor:
        """``(B,)`` the class to train on, clipped into ``[0, num_classes - 1]``."""
        if self.offset:
            target_lengths = target_lengths - source_lengths + self.num_classes // 2
        return target_lengths.clamp(0, self.num_classes - 1)
