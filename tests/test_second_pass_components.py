"""Component tests of glancing and self-correction training on the tiny model."""

import pytest
import torch
from tinymodel import sample_for, setup

from cmlm_plugin.training.second_pass import glancing_input

SOURCES = ["w1 w2 w3 w4", "w5 w6", "w7 w8 w9 w10 w11"]
TARGETS = ["w11 w12 w13 w14 w15", "w16 w17 w18", "w19 w20 w21 w22"]


def noisy_sample(task, update=0):
    sample = sample_for(task, SOURCES, TARGETS)
    generator = task.noise_generator(sample)
    sample = task.add_noise(sample, generator)
    return sample, task.second_pass(sample, update, generator)


def test_off_by_default(data_dir):
    task, _, _ = setup(data_dir)
    assert noisy_sample(task)[1] is None


@pytest.mark.parametrize("flag", ["--glancing-ratio", "--self-correction"])
def test_second_pass_starts_at_its_update(data_dir, flag):
    task, _, _ = setup(data_dir, flag, "0.5", "--second-pass-from-update", "100")
    assert noisy_sample(task, update=0)[1] is None  # plain CMLM training first
    assert noisy_sample(task, update=99)[1] is None
    assert callable(noisy_sample(task, update=100)[1])


@pytest.mark.parametrize(
    "flags", [("--glancing-ratio", "0.5"), ("--self-correction", "1.0")], ids=["glat", "sc"]
)
def test_the_first_pass_gets_no_gradient_and_the_loss_follows_the_revised_input(
    data_dir, flags, monkeypatch
):
    task, model, criterion = setup(data_dir, *flags)
    torch.manual_seed(0)
    sample, revise = noisy_sample(task)
    seen = {}

    def recording(prev, predicted):
        seen["predicted_grad"] = predicted.requires_grad or predicted.grad_fn is not None
        seen["input"], seen["loss"] = revise(prev, predicted)
        return seen["input"], seen["loss"]

    sample["revise"] = recording
    first_pass = model.first_pass
    calls = []
    monkeypatch.setattr(model, "first_pass", lambda *a: calls.append(1) or first_pass(*a))
    loss, sample_size, log = criterion(model, sample)
    loss.backward()
    assert calls == [1] and seen["predicted_grad"] is False
    assert sample_size == int(seen["loss"].sum())  # the loss covers the revised positions
    assert (
        not seen["input"].eq(task.tgt_dict.pad()).ne(sample["target"].eq(task.tgt_dict.pad())).any()
    )
    assert torch.isfinite(loss) and model.decoder.embed_tokens.weight.grad is not None


def test_self_correction_feeds_the_models_own_tokens(data_dir):
    task, model, _ = setup(data_dir, "--self-correction", "1.0")
    torch.manual_seed(0)
    sample, revise = noisy_sample(task)
    prev, target = sample["prev_target"], sample["target"]
    net = sample["net_input"]
    encoder_out = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"])
    model.eval()  # no dropout: the first pass is deterministic
    predicted = model.first_pass(prev, encoder_out)
    new, loss = revise(prev, predicted)
    replaced = prev.eq(task.mask_idx) & new.ne(task.mask_idx)
    assert torch.equal(new[replaced], predicted[replaced])
    special = torch.tensor(task.special_ids)
    assert not torch.isin(predicted[prev.eq(task.mask_idx)], special).any()  # never a symbol
    assert loss[replaced].all()


@pytest.mark.parametrize("share", ["1.0", "0.0"])
def test_glancing_full_mask_starts_the_first_pass_from_the_whole_target_masked(data_dir, share):
    task, _, _ = setup(data_dir, "--glancing-ratio", "0.5", "--glancing-full-mask", share)
    sample, revise = noisy_sample(task)
    real = ~torch.isin(sample["target"], torch.tensor(task.special_ids))  # B x T
    all_masked = sample["prev_target"].eq(task.mask_idx).eq(real).all(dim=1)  # B
    assert callable(revise)
    if share == "1.0":
        assert all_masked.all()  # GLAT's first pass for every sentence
    else:  # the CMLM input, and no draw between it and glancing's: seeded runs keep their masks
        expected = sample_for(task, SOURCES, TARGETS)
        generator = task.noise_generator(expected)
        expected = task.add_noise(expected, generator)
        assert torch.equal(sample["prev_target"], expected["prev_target"])
        prev, target = sample["prev_target"], sample["target"]
        wrong = torch.full_like(target, task.mask_idx)  # every prediction wrong: reveals to draw
        reference = glancing_input(prev, target, wrong, task.mask_idx, 0.5, generator)
        for ours, theirs in zip(revise(prev, wrong), reference):
            assert torch.equal(ours, theirs)


def test_glancing_full_mask_leaves_the_self_correction_rows_alone(data_dir):
    flags = ("--glancing-ratio", "0.5", "--glancing-full-mask", "1.0", "--self-correction", "1.0")
    task, _, _ = setup(data_dir, *flags)
    sample, _ = noisy_sample(task)
    plain, _ = noisy_sample(
        setup(data_dir, "--glancing-ratio", "0.5", "--self-correction", "1.0")[0]
    )
    assert torch.equal(sample["prev_target"], plain["prev_target"])


@pytest.mark.parametrize(
    "flags, message",
    [
        (("--glancing-ratio", "1.5"), "glancing-ratio"),
        (("--self-correction", "-0.1"), "self-correction"),
        (("--glancing-ratio", "0.5", "--glancing-anneal-updates", "-1"), "anneal"),
        (("--glancing-ratio", "0.5", "--objective", "diffusion"), "objective cmlm"),
        (("--self-correction", "0.5", "--second-pass-from-update", "-1"), "from-update must"),
        (("--glancing-ratio", "0.5", "--glancing-full-mask", "2"), "full-mask must"),
        (("--glancing-full-mask", "0.5"), "add --glancing-ratio"),
    ],
)
def test_bad_flags_are_refused_at_start_up(data_dir, flags, message):
    with pytest.raises(ValueError, match=message):
        setup(data_dir, *flags)
