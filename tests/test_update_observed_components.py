"""``--update-observed`` on the tiny model: the flag reaches the Mask-Predict core
through the task's generator, changes what the context-dependent model outputs, and is
refused by the diffusion sampler; at one pass it warns that it changes nothing."""

import argparse

import pytest
import torch
from test_ctc_components import left_padded
from tinymodel import sample_for, setup

from cmlm_plugin.errors import CMLMPluginError

SOURCES = ["w1 w2 w3 w4", "w5 w6", "w7 w8 w9 w10 w11", "w12", "w3 w3 w3 w3 w3 w3"]


def build(task, model, observed, decoding="mask_predict", passes=4):
    args = argparse.Namespace(iter_decode_max_iter=passes, iter_decode_with_beam=2)
    task.cfg.update_observed, task.cfg.decoding = observed, decoding
    try:
        return task.build_generator([model], args)
    finally:
        task.cfg.update_observed, task.cfg.decoding = False, "mask_predict"


def test_the_flag_reaches_the_core_and_changes_outputs(tiny_eval):
    task, model = tiny_eval
    sample = left_padded(task, sample_for(task, SOURCES, ["w1"] * len(SOURCES)))
    outputs = {}
    for observed in (False, True):
        generator = build(task, model, observed)
        assert generator.options.update_observed is observed
        with torch.no_grad():
            outputs[observed] = [
                h[0]["tokens"].tolist() for h in generator.generate([model], sample)
            ]
    for tokens in outputs[True]:
        assert task.mask_idx not in tokens and tokens[-1] == task.tgt_dict.eos()
    assert outputs[True] != outputs[False]  # the untrained model's tokens depend on context


def test_the_diffusion_sampler_refuses_it(tiny_eval):
    task, model = tiny_eval
    with pytest.raises(CMLMPluginError, match="--update-observed .* drop it"):
        build(task, model, True, decoding="diffusion")


def test_one_pass_warns_that_the_flag_changes_nothing(tiny_eval, capsys):
    task, model = tiny_eval
    build(task, model, True, passes=1)
    assert "--update-observed" in capsys.readouterr().err
    build(task, model, True, passes=2)
    build(task, model, False, passes=1)
    assert "--update-observed" not in capsys.readouterr().err


def test_a_one_pass_ctc_decode_warns_too(data_dir, capsys):
    task, model, _ = setup(data_dir, "--ctc-upsample", "2", "--update-observed")
    args = argparse.Namespace(iter_decode_max_iter=1, iter_decode_with_beam=1)
    task.build_generator([model], args)
    assert "--update-observed" in capsys.readouterr().err
