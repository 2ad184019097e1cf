"""Component tests of Mask-CTC on the tiny model: the joint CTC + CMLM loss
(``--ctc-cmlm-weight``) and the Mask-Predict passes that refine a CTC output."""

import argparse

import pytest
import torch
from test_ctc_components import SOURCES, TARGETS, best_path, left_padded
from tinymodel import sample_for, setup

from cmlm_decoding import DecodeResult
from cmlm_plugin.criterions.cmlm_loss import smoothed_nll
from cmlm_plugin.models.inference import inference_path

WEIGHT = 0.5


@pytest.fixture(scope="module")
def joint(data_dir):
    torch.manual_seed(0)
    task, model, criterion = setup(
        data_dir,
        "--ctc-upsample",
        "2",
        "--ctc-cmlm-weight",
        str(WEIGHT),
        "--label-smoothing",
        "0.1",
    )
    model.eval()
    return task, model, criterion


def test_the_loss_adds_the_weighted_cmlm_loss_of_the_masked_positions(joint):
    task, model, criterion = joint
    sample = task.add_noise(left_padded(task, sample_for(task, SOURCES, TARGETS)))
    loss, sample_size, log = criterion(model, sample)
    assert sample_size == sum(len(t.split()) for t in TARGETS)  # normalised by CTC's tokens

    prev, target = sample["prev_target"], sample["target"]
    masked = prev.eq(task.mask_idx)  # B x T
    assert log["cmlm_masked"] == int(masked.sum()) > 0
    src = sample["net_input"]["src_tokens"]
    encoder_out = model.encoder(src, src_lengths=None)
    logits = model.decoder_logits(prev, encoder_out, masked)  # M x V, the plain CMLM's input
    expected, _ = smoothed_nll(logits, target[masked], 0.1)
    torch.testing.assert_close(log["cmlm_loss"], expected.detach())
    total = log["word_ins_loss"] + WEIGHT * log["cmlm_loss"] + log["length_loss"]
    torch.testing.assert_close(loss.detach(), total)


def test_gradients_of_the_cmlm_term_reach_the_shared_decoder(joint):
    task, model, _ = joint
    sample = task.add_noise(left_padded(task, sample_for(task, SOURCES, TARGETS)))
    net = sample["net_input"]
    terms = model(net["src_tokens"], net["src_lengths"], sample["prev_target"], sample["target"])
    model.zero_grad()
    smoothed_nll(terms["cmlm"]["out"], terms["cmlm"]["tgt"], 0.0)[0].backward()
    assert model.decoder.layers[0].self_attn.q_proj.weight.grad.abs().sum() > 0
    model.zero_grad()


@pytest.mark.parametrize(
    "extra", [("--ctc-cmlm-weight", "1"), ("--ctc-upsample", "2", "--ctc-cmlm-weight", "-1")]
)
def test_the_weight_needs_ctc_and_must_not_be_negative(data_dir, extra):
    with pytest.raises(ValueError, match="--ctc-cmlm-weight adds the CMLM loss to a CTC model"):
        setup(data_dir, *extra)


def generate(task, model, passes, impl="modules", history=False):
    """Hypotheses of the test sentences; the blank penalty makes every CTC output non-empty."""
    args = argparse.Namespace(
        iter_decode_max_iter=passes,
        iter_decode_with_beam=1,
        iter_decode_force_max_iter=True,
        retain_iter_history=history,
    )
    task.cfg.ctc_blank_penalty = 1e4
    try:
        generator = task.build_generator([model], args)
    finally:
        task.cfg.ctc_blank_penalty = 0.0
    generator.decoder_impl = impl
    sample = left_padded(task, sample_for(task, SOURCES, TARGETS))
    return task.inference_step(generator, [model], sample), sample


def test_pass_two_remasks_the_least_confident_half_of_the_ctc_output(joint):
    """T=2: the first pass is the CTC best path (the output of T=1); its floor(n/2) least
    probable tokens are masked and predicted again by the decoder reading that input."""
    task, model, _ = joint
    one, sample = generate(task, model, 1)
    two, _ = generate(task, model, 2, history=True)
    d = task.tgt_dict
    banned = [d.pad(), d.bos(), d.eos(), task.mask_idx]
    symbols, kept = best_path(task, model, sample, banned)
    src = sample["net_input"]["src_tokens"]
    encoder_out = model.encoder(src, src_lengths=None)
    changed = 0
    for row, ((draft,), (refined,)) in enumerate(zip(one, two)):
        tokens = draft["tokens"][:-1]  # the CTC output without EOS
        assert tokens.tolist() == symbols[row][kept[row]].tolist()
        assert refined["steps"] == 2 and len(refined["tokens"]) == len(draft["tokens"])
        assert refined["history"][0]["tokens"][:-1].tolist() == tokens.tolist()
        n = len(tokens)
        remask = torch.zeros(n, dtype=torch.bool)
        remask[draft["positional_scores"].argsort(stable=True)[: n // 2]] = True
        masked = tokens.masked_fill(remask, task.mask_idx)[None]  # 1 x n
        one_row = model.encoder.reorder_encoder_out(encoder_out, torch.tensor([row]))
        logits = model.decoder_logits(masked, one_row)[0].float()  # n x V
        logits[:, banned] = float("-inf")
        expected = torch.where(remask, logits.argmax(dim=-1), tokens)
        assert refined["tokens"][:-1].tolist() == expected.tolist()
        changed += int(expected.ne(tokens).sum())
    assert changed > 0  # the check compares outputs that refinement altered


def test_the_fast_decoder_refines_as_the_modules_do(joint):
    task, model, _ = joint
    modules, _ = generate(task, model, 4)
    fast, _ = generate(task, model, 4, impl="fast")
    for (a,), (b,) in zip(fast, modules):
        assert a["tokens"].tolist() == b["tokens"].tolist()
        torch.testing.assert_close(a["positional_scores"], b["positional_scores"])


def test_an_empty_ctc_output_stays_empty(joint):
    task, model, _ = joint
    args = argparse.Namespace(iter_decode_max_iter=3, iter_decode_with_beam=1)
    generator = task.build_generator([model], args)
    sample = left_padded(task, sample_for(task, SOURCES[:2], TARGETS[:2]))
    src = sample["net_input"]["src_tokens"]
    path = inference_path(model, "modules", src.device)
    encoder_out = path.encode(src, sample["net_input"]["src_lengths"])
    pad, vocab = task.tgt_dict.pad(), len(task.tgt_dict)
    tokens = torch.tensor([[5, 6, 7], [pad, pad, pad]])  # sentence 1: no output
    draft = DecodeResult(tokens, torch.zeros(2, 3), torch.zeros(2), torch.ones(2).long(), [])
    scores = torch.randn(2, 3, vocab).log_softmax(dim=-1)
    out = generator.refined(path, encoder_out, draft, scores, torch.tensor([3, 0]), sample)
    assert out.tokens[1].tolist() == [pad] * 3 and out.steps.tolist() == [3, 1]
    assert not out.tokens[0].eq(pad).any()


def test_a_model_trained_with_ctc_only_refuses_more_passes(data_dir):
    task, model, _ = setup(data_dir, "--ctc-upsample", "2")
    args = argparse.Namespace(iter_decode_max_iter=10, iter_decode_with_beam=1)
    with pytest.raises(ValueError, match="no --ctc-cmlm-weight.*--iter-decode-max-iter 1"):
        task.build_generator([model], args)


def test_a_joint_model_takes_the_mask_canvas_unless_told_otherwise(data_dir, joint):
    """On the toy data the source canvas kept the CMLM half from learning (docs/training.md)."""
    assert joint[1].ctc_canvas_kind == "mask"
    _, model, _ = setup(
        data_dir, "--ctc-upsample", "2", "--ctc-cmlm-weight", "1", "--ctc-canvas", "source"
    )
    assert model.ctc_canvas_kind == "source"
    _, ctc_only, _ = setup(data_dir, "--ctc-upsample", "2")
    assert ctc_only.ctc_canvas_kind == "source"
