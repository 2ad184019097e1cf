"""Component tests: task, model, criterion and generator on a tiny dictionary."""

import argparse
import os
import pickle

import pytest
import torch
from tinymodel import WORDS, encode, sample_for, setup


@pytest.fixture(scope="module")
def tiny(data_dir):
    torch.manual_seed(0)
    return setup(data_dir)


def test_registered_names_are_ours_beside_all_of_fairseq(tiny):
    import fairseq.criterions  # noqa: F401  (imports every fairseq criterion)
    import fairseq.models  # noqa: F401  (imports every fairseq model)
    from fairseq.criterions import CRITERION_REGISTRY
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY
    from fairseq.models.nat.cmlm_transformer import CMLMNATransformerModel
    from fairseq.tasks import TASK_REGISTRY

    from cmlm_plugin.criterions.cmlm_loss import CMLMPluginLoss
    from cmlm_plugin.models.cmlm_transformer import CMLMPluginModel
    from cmlm_plugin.tasks.cmlm_task import CMLMPluginTask

    assert MODEL_REGISTRY["cmlm_plugin_transformer"] is CMLMPluginModel
    for arch in ("cmlm_plugin_tiny", "cmlm_plugin_small", "cmlm_plugin_base", "cmlm_plugin_big"):
        assert ARCH_MODEL_REGISTRY[arch] is CMLMPluginModel
    assert TASK_REGISTRY["cmlm"] is CMLMPluginTask
    assert CRITERION_REGISTRY["cmlm_plugin_loss"] is CMLMPluginLoss
    assert MODEL_REGISTRY["cmlm_transformer"] is CMLMNATransformerModel  # fairseq's own
    assert isinstance(tiny[0], CMLMPluginTask) and isinstance(tiny[1], CMLMPluginModel)


def test_dictionary_gets_a_dedicated_mask_symbol(tiny):
    task = tiny[0]
    d = task.tgt_dict
    assert task.mask_idx == d.index("<mask>") != d.unk()
    assert task.mask_idx not in (d.pad(), d.bos(), d.eos())
    assert len(d) == 4 + len(WORDS) + 1  # specials + words + <mask>
    assert task.src_dict == task.tgt_dict  # joined: shared embeddings accept it


def test_base_arch_has_the_paper_sizes(data_dir):
    _, model, _ = setup(data_dir, arch="cmlm_plugin_base")
    args = model.args
    assert (args.encoder_layers, args.decoder_layers) == (6, 6)
    assert (args.encoder_embed_dim, args.encoder_ffn_embed_dim) == (512, 2048)
    assert args.encoder_attention_heads == args.decoder_attention_heads == 8
    assert args.encoder_learned_pos and args.decoder_learned_pos
    assert model.encoder.embed_tokens is model.decoder.embed_tokens
    weight = model.decoder.layers[0].fc1.weight
    assert abs(float(weight.std()) - 0.02) < 0.002  # BERT-style N(0, 0.02)


def test_decoder_self_attention_is_bidirectional(tiny):
    task, model, _ = tiny
    model.eval()
    src = encode(task, ["w1 w2 w3"])
    enc = model.encoder(src, src_lengths=torch.tensor([4]))
    tokens = encode(task, ["w4 w5 w6 w7"])[:, :4]
    changed = tokens.clone()
    changed[0, 3] = task.tgt_dict.index("w9")  # change the LAST position
    with torch.no_grad():
        a = model.decoder_logits(tokens, enc)
        b = model.decoder_logits(changed, enc)
    assert not torch.allclose(a[0, 0], b[0, 0])  # the FIRST position sees it


def test_loss_counts_masked_positions_only(tiny):
    task, model, criterion = tiny
    model.eval()
    sample = task.add_noise(sample_for(task, ["w1 w2 w3 w4", "w5 w6"], ["w7 w8 w9 w10", "w11 w12"]))
    assert not sample["target"].eq(task.tgt_dict.eos()).any()  # EOS dropped
    masked = sample["prev_target"].eq(task.mask_idx)
    assert masked.sum(1).min() >= 1
    loss, size, log = criterion(model, sample)
    assert size == int(masked.sum()) and torch.isfinite(loss)

    unmasked = (~masked & sample["target"].ne(task.tgt_dict.pad())).nonzero()[0]
    other = dict(sample, target=sample["target"].clone())
    other["target"][tuple(unmasked)] = task.tgt_dict.index("w20")
    assert torch.allclose(criterion(model, other)[2]["word_ins_loss"], log["word_ins_loss"])
    hit = masked.nonzero()[0]
    other["target"][tuple(hit)] = task.tgt_dict.index("w21")
    assert not torch.allclose(criterion(model, other)[2]["word_ins_loss"], log["word_ins_loss"])


def test_length_targets_absolute_and_offset(data_dir):
    for extra, expected in (((), [4, 2]), (("--length-offset",), [32 + 4 - 5, 32 + 2 - 2])):
        task, model, _ = setup(data_dir, *extra)
        sample = task.add_noise(
            sample_for(task, ["w1 w2 w3 w4", "w5"], ["w7 w8 w9 w10", "w11 w12"])
        )
        terms = model(
            sample["net_input"]["src_tokens"],
            sample["net_input"]["src_lengths"],
            sample["prev_target"],
            sample["target"],
        )
        assert terms["length"]["tgt"].tolist() == expected  # sources hold EOS: 5 and 2


def test_generator_outputs_and_single_encoder_pass(tiny):
    task, model, _ = tiny
    gen = task.build_generator(
        [model], argparse.Namespace(iter_decode_max_iter=4, iter_decode_with_beam=3)
    )
    gen.decoder_impl = "modules"  # fairseq's encoder module (the fast one: test_fast_decoder)
    calls = []
    original = model.encoder.forward

    def counting(*args, **kwargs):
        calls.append(args[0].size(0))
        return original(*args, **kwargs)

    model.encoder.forward = counting
    try:
        sample = sample_for(task, ["w1 w2 w3", "w4", "w5 w6 w7 w8 w9"], ["w1", "w2", "w3"])
        hypos = task.inference_step(gen, [model], sample)
    finally:
        model.encoder.forward = original
    assert calls == [3]  # one encoder pass for 3 sentences x 3 length candidates
    d = task.tgt_dict
    assert len(hypos) == 3 and all(len(h) == 1 for h in hypos)
    for (hypo,) in hypos:
        tokens = hypo["tokens"].tolist()
        assert tokens[-1] == d.eos() and len(tokens) >= 2
        body = tokens[:-1]
        assert not set(body) & {d.pad(), d.bos(), d.eos(), task.mask_idx}
        assert len(body) <= model.decoder.max_positions()
        assert 1 <= hypo["steps"] <= 4
        assert hypo["positional_scores"].numel() == len(body)


@pytest.mark.parametrize(
    "max_iter, beam, message",
    [
        (0, 1, "iter-decode-max-iter"),
        (-2, 1, "iter-decode-max-iter"),
        (3, 0, "with-beam"),
        (3, 65, "length classes"),
    ],
)
def test_generator_rejects_bad_flags(tiny, max_iter, beam, message):
    task, model, _ = tiny
    args = argparse.Namespace(iter_decode_max_iter=max_iter, iter_decode_with_beam=beam)
    with pytest.raises(ValueError, match=message):
        task.build_generator([model], args)


def test_bad_mask_ratio_range_is_rejected(data_dir):
    with pytest.raises(ValueError, match="mask-ratio"):
        setup(data_dir, "--mask-ratio-min", "0.9", "--mask-ratio-max", "0.1")


class Exploit:
    def __reduce__(self):
        return (os.getcwd, ())


def test_weights_only_loading_refuses_pickled_callables(tmp_path):
    import cmlm_plugin  # noqa: F401  (installs the allow-list)

    good = tmp_path / "good.pt"
    torch.save({"args": argparse.Namespace(arch="x"), "model": {"w": torch.zeros(2)}}, good)
    assert torch.load(good)["args"].arch == "x"
    bad = tmp_path / "bad.pt"
    torch.save({"model": Exploit()}, bad)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(bad)


def test_weights_only_loading_takes_fairseq_eval_bleu_counts(tmp_path):
    """fairseq's --eval-bleu stores numpy count arrays in extra_state; object arrays stay out."""
    import numpy as np

    import cmlm_plugin  # noqa: F401  (installs the allow-list)

    counts = {"val": np.array([372, 182, 95, 51]), "sum": np.array([0.5, 1.5], dtype=np.float32)}
    path = tmp_path / "ar.pt"
    torch.save({"extra_state": {"metrics": {"valid": [(10, "_bleu_counts", counts)]}}}, path)
    loaded = torch.load(path)["extra_state"]["metrics"]["valid"][0][2]
    assert loaded["val"].tolist() == [372, 182, 95, 51] and loaded["sum"].dtype == np.float32
    bad = tmp_path / "objects.pt"
    torch.save({"o": np.array([1, "x"], dtype=object)}, bad)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(bad)


def test_diffusion_loss_is_the_weighted_bound(data_dir):
    task, model, criterion = setup(data_dir, "--objective", "diffusion", "--label-smoothing", "0")
    model.eval()
    sample = task.add_noise(sample_for(task, ["w1 w2 w3 w4", "w5 w6"], ["w7 w8 w9 w10", "w11 w12"]))
    assert sample["mask_prob"].shape == (2,)
    sample["prev_target"] = sample["target"].clone()
    sample["prev_target"][0, 1] = sample["prev_target"][1, 0] = task.mask_idx  # one masked each
    sample["mask_prob"] = torch.tensor([0.25, 0.5])
    loss, size, log = criterion(model, sample)
    assert size == 6  # normalised by target tokens, not masked ones
    terms = model(
        sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"],
        sample["prev_target"], sample["target"],
    )  # fmt: skip
    nll = -torch.log_softmax(terms["word_ins"]["out"], -1).gather(
        1, terms["word_ins"]["tgt"][:, None]
    )
    expected = 4.0 * nll[0] + 2.0 * nll[1]  # weights 1/p, rows in order
    assert torch.allclose(log["word_ins_nll"], expected.squeeze())


def test_guided_generation_runs_one_encoder_call_on_both_inputs(data_dir):
    task, model, _ = setup(data_dir, "--decoding", "diffusion", "--cfg-scale", "1.5")
    gen = task.build_generator(
        [model], argparse.Namespace(iter_decode_max_iter=3, iter_decode_with_beam=2)
    )
    gen.decoder_impl = "modules"  # counts calls of fairseq's encoder module
    calls = []
    original = model.encoder.forward

    def counting(*args, **kwargs):
        calls.append(args[0].clone())
        return original(*args, **kwargs)

    model.encoder.forward = counting
    try:
        sample = sample_for(task, ["w1 w2 w3", "w4"], ["w1", "w2"])
        hypos = task.inference_step(gen, [model], sample)
    finally:
        model.encoder.forward = original
    assert len(calls) == 1 and calls[0].size(0) == 4  # 2 sources + 2 empty ones
    assert calls[0][2:].ne(task.src_dict.pad()).sum(1).tolist() == [1, 1]
    assert len(hypos) == 2
    assert all(task.mask_idx not in h[0]["tokens"].tolist() for h in hypos)


@pytest.mark.parametrize(
    "extra, message",
    [
        (("--decoding", "diffusion", "--confidence-threshold", "1.5"), "confidence-threshold"),
        (("--decoding", "diffusion", "--block-length", "-1"), "block-length"),
        (("--decoding", "diffusion", "--sampling-temperature", "-1"), "sampling-temperature"),
        (("--objective", "diffusion", "--diffusion-eps", "0"), "diffusion-eps"),
        (("--p-uncond", "1.0"), "p-uncond"),
        (("--mc-samples", "0"), "mc-samples"),
    ],
)
def test_bad_diffusion_flags_are_rejected(data_dir, extra, message):
    with pytest.raises(ValueError, match=message):
        task, model, _ = setup(data_dir, *extra)
        task.build_generator([model], argparse.Namespace(iter_decode_max_iter=3))


def test_template_errors(tiny):
    task, model, _ = tiny
    gen = task.build_generator([model], argparse.Namespace(iter_decode_max_iter=2))
    d = task.tgt_dict
    packed = torch.tensor([[1, 0, 0, 0], [1, d.index("w1"), d.eos(), 0], [1] + [d.index("w2")] * 3])
    with pytest.raises(ValueError, match="empty"):
        gen.templates(packed[:1], 10)
    with pytest.raises(ValueError, match="pad/BOS/EOS"):
        gen.templates(packed[1:2], 10)
    with pytest.raises(ValueError, match="more than"):
        gen.templates(packed[2:], 2)
    assert gen.templates(torch.tensor([[0, 0], [1, d.index("w3")]]), 5) == [None, [d.index("w3")]]


def test_eos_fill_keeps_eos_as_a_maskable_token(data_dir):
    task, model, criterion = setup(data_dir, "--objective", "diffusion", "--eos-fill")
    sample = sample_for(task, ["w1 w2 w3", "w4"], ["w7 w8 w9 w10", "w11"])
    sample["target"][1, 2:] = task.tgt_dict.pad()  # right padding after "w11 </s>"
    d = task.tgt_dict
    torch.manual_seed(0)
    masked_eos = False
    for _ in range(20):
        noisy = task.add_noise(dict(sample, target=sample["target"].clone()))
        assert not noisy["target"].eq(d.pad()).any()  # padding became EOS
        assert noisy["target"][1].tolist() == [d.index("w11")] + [d.eos()] * 4
        masked_eos |= bool(
            (noisy["prev_target"].eq(task.mask_idx) & noisy["target"].eq(d.eos())).any()
        )
    assert masked_eos
    terms = model(
        noisy["net_input"]["src_tokens"], noisy["net_input"]["src_lengths"],
        noisy["prev_target"], noisy["target"],
    )  # fmt: skip
    assert terms["length"]["tgt"].tolist() == [4, 1]  # lengths count words, not EOS


def test_eos_fill_needs_the_diffusion_objective(data_dir):
    with pytest.raises(ValueError, match="eos-fill"):
        setup(data_dir, "--eos-fill")


@pytest.mark.parametrize(
    "extra, message",
    [
        (("--gen-length", "10", "--block-length", "4"), "does not divide"),
        (("--gen-length", "-1"), "gen-length"),
        (("--gen-length", "500"), "target positions"),
    ],
)
def test_bad_fixed_length_flags(data_dir, extra, message):
    task, model, _ = setup(
        data_dir, "--decoding", "diffusion", "--max-target-positions", "128", *extra
    )
    with pytest.raises(ValueError, match=message):
        task.build_generator([model], argparse.Namespace(iter_decode_max_iter=4))


def test_fixed_length_forbids_several_length_candidates(data_dir):
    task, model, _ = setup(data_dir, "--decoding", "diffusion", "--gen-length", "8")
    with pytest.raises(ValueError, match="with-beam 1"):
        task.build_generator(
            [model], argparse.Namespace(iter_decode_max_iter=4, iter_decode_with_beam=2)
        )


def test_training_noise_depends_on_the_update_seed_and_the_batch_only(tiny):
    """The same batch gets the same masks under the same per-update seed, however the
    batches of an update are spread over workers or micro-batches."""
    task, _, _ = tiny
    targets = ["w1 w2 w3 w4 w5 w6 w7 w8"] * 6

    def masks(ids, seed, draws_before=0):
        torch.manual_seed(seed)  # what fairseq does before each update
        torch.rand(draws_before)  # other consumers of the global stream in between
        sample = sample_for(task, ["w1"] * 6, targets)
        sample["id"] = torch.tensor(ids)
        generator = task.noise_generator(sample)
        return task.add_noise(sample, generator)["prev_target"]

    first = masks([0, 1, 2, 3, 4, 5], seed=11)
    assert torch.equal(first, masks([0, 1, 2, 3, 4, 5], seed=11, draws_before=7))
    assert not torch.equal(first, masks([6, 7, 8, 9, 10, 11], seed=11))
    assert not torch.equal(first, masks([0, 1, 2, 3, 4, 5], seed=12))


def test_stop_unchanged_reaches_mask_predict_and_refuses_force_max_iter(data_dir):
    task, model, _ = setup(data_dir, "--stop-unchanged")
    gen = task.build_generator([model], argparse.Namespace(iter_decode_max_iter=4))
    assert gen.options.stop_unchanged is True
    with pytest.raises(ValueError, match="drop one of them"):
        task.build_generator(
            [model], argparse.Namespace(iter_decode_max_iter=4, iter_decode_force_max_iter=True)
        )
