"""Component tests of length selection: --length-prior-weight (candidates ranked with the
length head's prior) and --length-shift (every candidate moved by K pieces)."""

import argparse

import pytest
import torch
from tinymodel import sample_for, setup

from cmlm_decoding import length_candidates

SOURCES = ["w1 w2 w3 w4", "w5 w6", "w7 w8 w9 w10 w11", "w12"]


def decode(task, model, beam):
    torch.manual_seed(0)
    args = argparse.Namespace(iter_decode_max_iter=3, iter_decode_with_beam=beam)
    generator = task.build_generator([model], args)
    sample = sample_for(task, SOURCES, ["w1"] * len(SOURCES))
    return task.inference_step(generator, [model], sample), sample


def head_lengths(model, sample, beam):
    net = sample["net_input"]
    with torch.no_grad():
        length = model.predict_length(model.encoder(net["src_tokens"], net["src_lengths"]))
    lengths, _ = length_candidates(
        length["logprobs"], length["class_lengths"], beam, model.decoder.max_positions()
    )
    return lengths  # B x beam, best first


def test_a_dominant_prior_picks_the_length_heads_best_candidate(data_dir):
    task, model, _ = setup(data_dir, "--length-prior-weight", "1000")
    model.eval()
    hypos, sample = decode(task, model, beam=3)
    best = head_lengths(model, sample, 3)[:, 0]
    assert [len(h[0]["tokens"]) - 1 for h in hypos] == best.tolist()  # EOS excluded


def test_weight_zero_is_the_papers_rule(data_dir):
    task, model, _ = setup(data_dir)
    model.eval()
    plain, sample = decode(task, model, beam=3)
    chosen = [len(h[0]["tokens"]) - 1 for h in plain]
    candidates = head_lengths(model, sample, 3)
    assert all(n in row for n, row in zip(chosen, candidates.tolist()))  # one of the three
    # on this model the mean log-probability alone picks another length than the head's
    # best for some sentence, so the prior test above can tell the two rules apart
    assert chosen != candidates[:, 0].tolist()
    assert task.build_generator([model], argparse.Namespace()).length_prior_weight == 0.0


def test_a_negative_weight_is_refused(data_dir):
    task, model, _ = setup(data_dir, "--length-prior-weight", "-1")
    with pytest.raises(ValueError, match="length-prior-weight"):
        task.build_generator([model], argparse.Namespace())


@pytest.mark.parametrize("shift", [2, -1])
def test_a_length_shift_moves_every_candidate(data_dir, shift):
    task, model, _ = setup(data_dir, "--length-shift", str(shift))
    model.eval()
    hypos, sample = decode(task, model, beam=1)
    head = head_lengths(model, sample, 1)[:, 0]  # B, the head's own best length
    expected = head + shift
    assert (expected >= 1).all() and (expected <= model.decoder.max_positions()).all()
    assert [len(h[0]["tokens"]) - 1 for h in hypos] == expected.tolist()  # EOS excluded
    assert task.build_generator([model], argparse.Namespace()).length_shift == shift
