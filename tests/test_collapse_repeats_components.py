"""``--collapse-repeats`` on the tiny model: the chosen output with each run of one token
kept once (``cmlm_decoding.repeats``), for Mask-Predict and the diffusion sampler."""

import argparse
import itertools

import pytest
import torch
from test_ctc_components import left_padded
from tinymodel import sample_for, setup

SOURCES = ["w1 w2 w3 w4", "w5 w6", "w7 w8 w9 w10 w11", "w12", "w3 w3 w3 w3 w3 w3"]


def decode(task, model, collapse, decoding="mask_predict", beam=3, constraints=None):
    args = argparse.Namespace(iter_decode_max_iter=3, iter_decode_with_beam=beam)
    task.cfg.collapse_repeats, task.cfg.decoding = collapse, decoding
    try:
        generator = task.build_generator([model], args)
    finally:
        task.cfg.collapse_repeats, task.cfg.decoding = False, "mask_predict"
    sample = left_padded(task, sample_for(task, SOURCES, ["w1"] * len(SOURCES)))
    with torch.no_grad():
        return generator.generate([model], sample, constraints=constraints)


@pytest.mark.parametrize("decoding", ["mask_predict", "diffusion"])
def test_the_output_is_the_plain_output_with_each_run_kept_once(tiny_eval, decoding):
    task, model = tiny_eval
    eos = task.tgt_dict.eos()
    plain = decode(task, model, False, decoding)
    collapsed = decode(task, model, True, decoding)
    runs = 0
    for (p,), (c,) in zip(plain, collapsed):
        tokens = p["tokens"][:-1].tolist()
        groups = [(k, len(list(g))) for k, g in itertools.groupby(tokens)]
        firsts = list(itertools.accumulate([0] + [n for _, n in groups[:-1]]))
        assert c["tokens"].tolist() == [k for k, _ in groups] + [eos]
        assert torch.equal(c["positional_scores"], p["positional_scores"][firsts])
        assert c["score"] == p["score"]  # the ranking score of the decoding, unchanged
        runs += len(groups) < len(tokens)
    assert runs > 0  # the untrained model repeats: the flag had something to do


def test_given_tokens_of_a_template_stay(tiny_eval):
    """A template "w3 w3 <mask> <mask> <mask>": both given w3 stay; generated tokens that
    repeat their left neighbour go."""
    task, model = tiny_eval
    d = task.tgt_dict
    w3 = d.index("w3")
    row = [1, w3, w3] + [task.mask_idx] * 3
    packed = torch.tensor([row] * len(SOURCES))
    plain = decode(task, model, False, beam=1, constraints=packed)
    collapsed = decode(task, model, True, beam=1, constraints=packed)
    generated_repeats = 0
    for (p,), (c,) in zip(plain, collapsed):
        tokens = p["tokens"][:-1].tolist()
        assert tokens[:2] == [w3, w3]
        kept = tokens[:2] + [t for i, t in enumerate(tokens) if i >= 2 and t != tokens[i - 1]]
        assert c["tokens"][:-1].tolist() == kept
        generated_repeats += len(kept) < len(tokens)
    assert generated_repeats > 0


def test_a_ctc_model_refuses_the_flag(data_dir):
    task, model, _ = setup(data_dir, "--ctc-upsample", "2", "--collapse-repeats")
    args = argparse.Namespace(iter_decode_max_iter=1, iter_decode_with_beam=1)
    with pytest.raises(ValueError, match="drop --collapse-repeats"):
        task.build_generator([model], args)
