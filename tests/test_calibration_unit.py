"""Unit tests of temperature calibration (``cmlm_plugin.calibration``)."""

import pytest
import torch

from cmlm_decoding.calibration import fit_temperature, tempered_nll


@pytest.mark.parametrize("true_temperature", [0.5, 1.0, 2.5])
def test_fit_recovers_the_temperature_that_generated_the_labels(true_temperature):
    gen = torch.Generator().manual_seed(0)
    logits = 3.0 * torch.randn(20000, 8, generator=gen)
    probs = torch.softmax(logits / true_temperature, dim=-1)
    target = torch.multinomial(probs, 1, generator=gen).squeeze(1)
    fitted = fit_temperature(logits, target)
    # 20000 labels pin the optimum to a few percent
    assert abs(fitted - true_temperature) / true_temperature < 0.06
    assert tempered_nll(logits, target, fitted) <= tempered_nll(logits, target, 1.0) + 1e-9


def test_fit_rejects_empty_data():
    with pytest.raises(ValueError, match="empty"):
        fit_temperature(torch.zeros(0, 4), torch.zeros(0, dtype=torch.long))
