"""``--insert-causal-attn`` (CMLMC's causal self-attention in every decoder layer) on the
tiny model: the added parameters, the causality of the added sublayer, gradients, the
copy from an autoregressive model, and the refusal with CTC. The fast decoding path is
compared with the module forward in ``test_fast_decoder.py``."""

import pytest
import torch
from test_ar_init_components import teacher
from tinymodel import encode, sample_for, setup

from cmlm_plugin.errors import CMLMPluginError
from cmlm_plugin.training.ar_init import init_from_autoregressive

SOURCES = ["w1 w2 w3", "w4 w5"]


def tiny(data_dir, *extra):
    torch.manual_seed(0)
    task, model, criterion = setup(data_dir, *extra)
    return task, model.eval(), criterion


def features(task, model, targets):
    """Decoder states ``B x T x C`` of the targets given as decoder inputs."""
    src = encode(task, SOURCES)  # B x S
    encoder_out = model.encoder(src, src_lengths=src.ne(task.src_dict.pad()).sum(1))
    with torch.no_grad():
        return model.decoder(encode(task, targets), encoder_out, features_only=True)[0]


def test_every_decoder_layer_gains_one_self_attention_and_its_norm(data_dir):
    _, plain, _ = tiny(data_dir)
    _, causal, _ = tiny(data_dir, "--insert-causal-attn")
    c = plain.args.decoder_embed_dim
    added = sum(p.numel() for p in causal.parameters()) - sum(p.numel() for p in plain.parameters())
    per_layer = 4 * c * c + 4 * c + 2 * c  # q, k, v, out (weights, biases); norm
    assert added == plain.args.decoder_layers * per_layer
    assert all(hasattr(layer, "causal_attn") for layer in causal.decoder.layers)
    assert not hasattr(plain.decoder.layers[0], "causal_attn")


@pytest.mark.parametrize("prenorm", [False, True], ids=["post-norm", "pre-norm"])
def test_with_the_bidirectional_attention_silenced_a_position_sees_only_its_left(data_dir, prenorm):
    extra = ("--decoder-normalize-before",) if prenorm else ()
    task, model, _ = tiny(data_dir, "--insert-causal-attn", *extra)
    targets = ["w1 w2 w3 w4 w5", "w6 w7 w8 w9 w10"]
    changed = ["w1 w2 w3 w4 w11", "w6 w7 w12 w9 w10"]  # position 4, position 2
    before, after = features(task, model, targets), features(task, model, changed)
    assert not torch.allclose(before[0, :4], after[0, :4])  # bidirectional: all positions move
    for layer in model.decoder.layers:
        layer.self_attn.out_proj.weight.data.zero_()
        layer.self_attn.out_proj.bias.data.zero_()
    before, after = features(task, model, targets), features(task, model, changed)
    torch.testing.assert_close(before[0, :4], after[0, :4])
    torch.testing.assert_close(before[1, :2], after[1, :2])
    assert not torch.allclose(before[1, 2:], after[1, 2:])  # the change and its right


@pytest.mark.parametrize(
    "extra",
    [(), ("--glancing-ratio", "0.5", "--self-correction", "0.5")],
    ids=["cmlm", "glancing+self-correction"],
)
def test_the_loss_reaches_the_causal_sublayers(data_dir, extra):
    task, model, criterion = tiny(data_dir, "--insert-causal-attn", *extra)
    model.train()
    sample = sample_for(task, SOURCES, ["w1 w2 w3 w4", "w5 w6"])
    generator = task.noise_generator(sample)
    sample = task.add_noise(sample, generator)
    revise = task.second_pass(sample, 0, generator)  # the first pass through the sublayers
    assert (revise is None) == (not extra)
    if revise is not None:
        sample["revise"] = revise
    loss, _, _ = criterion(model, sample)
    loss.backward()
    for layer in model.decoder.layers:
        assert layer.causal_attn.q_proj.weight.grad.abs().sum() > 0


def test_both_self_attentions_start_from_the_autoregressive_one(data_dir, tmp_path):
    path, ar = teacher(data_dir, tmp_path / "ar.pt")
    task, model, _ = tiny(data_dir, "--activation-fn", "relu", "--insert-causal-attn")
    report = init_from_autoregressive(model, path, task.src_dict, task.tgt_dict)
    assert "kept at initialisation: length_head" in report  # no causal_attn key left behind
    for mine, theirs in zip(model.decoder.layers, ar.decoder.layers):
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            source = getattr(theirs.self_attn, name).weight
            assert torch.equal(getattr(mine.self_attn, name).weight, source)
            assert torch.equal(getattr(mine.causal_attn, name).weight, source)
        assert torch.equal(mine.causal_attn_layer_norm.weight, theirs.self_attn_layer_norm.weight)


def test_ctc_refuses_it(data_dir):
    with pytest.raises(CMLMPluginError, match="--insert-causal-attn is for the CMLM objective"):
        setup(data_dir, "--ctc-upsample", "2", "--insert-causal-attn")
