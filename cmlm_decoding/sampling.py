"""Token choice and confidence for masked-diffusion sampling (Nie et al., 2025).

Gumbel-max sampling at temperature tau: ``argmax(logits + tau * g)``, ``g`` standard
Gumbel noise drawn in float64 (LLaDA computes ``exp(logits) / (-log u) ** tau`` in
float64, the same argmax), which samples from ``softmax(logits / tau)``; ``tau = 0``
is the argmax. Confidence of a chosen token: its probability under the untempered
softmax (``low_confidence`` remasking) or a uniform random number (``random``).
"""

from typing import Optional, Tuple

import torch
from torch import Tensor

REMASKING = ("low_confidence", "random")


def choose_tokens(
    logits: Tensor, temperature: float = 0.0, generator: Optional[torch.Generator] = None
) -> Tensor:
    """``... x V`` logits -> ``...`` token ids (argmax, or Gumbel-max at ``temperature``)."""
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits.double()
    uniform = torch.rand(
        logits.shape, dtype=torch.float64, device=logits.device, generator=generator
    )
    gumbel = -torch.log(-torch.log(uniform.clamp_min(torch.finfo(torch.float64).tiny)))
    return (logits + temperature * gumbel).argmax(dim=-1)


def confidence(
    logits: Tensor,
    chosen: Tensor,
    remasking: str = "low_confidence",
    generator: Optional[torch.Generator] = None,
) -> Tuple[Tensor, Tensor]:
    """Confidence of each chosen token and its log-probability.

    Args:
        logits: ``N x L x V``.
        chosen: ``N x L`` token ids.
        remasking: ``low_confidence`` (probability of the chosen token) or ``random``.

    Returns:
        ``(confidence, logprob)``, each ``N x L`` float32.
    """
    if remasking not in REMASKING:
        raise ValueError(f"remasking must be one of {REMASKING}, got {remasking!r}")
    logprob = torch.log_softmax(logits.float(), dim=-1).gather(-1, chosen[..., None])
    logprob = logprob.squeeze(-1)  # N x L
    if remasking == "low_confidence":
        return logprob.exp(), logprob
    noise = torch.rand(chosen.shape, device=chosen.device, generator=generator)
    return noise, logprob


def guided_logits(cond: Tensor, uncond: Tensor, scale: float) -> Tensor:
    """Classifier-free guidance: ``uncond + (scale + 1) * (cond - uncond)``.

    ``scale = 0`` returns the conditional logits (Ho & Salimans, 2021; LLaDA's form).
    """
    return uncond + (scale + 1.0) * (cond - uncond)
