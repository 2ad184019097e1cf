"""Component tests of bad inputs the generator must survive or refuse (issue 6).

Empty sources get the empty hypothesis while the rest of the batch decodes;
NaN/inf logits (an fp16 overflow) stop decoding with an error naming the
sentences; a dictionary without ``<mask>`` is refused with the fix.
"""

import argparse

import pytest
import torch
from tinymodel import sample_for, setup, write_dictionaries

from cmlm_plugin.errors import CMLMPluginError, find_plugin_error, one_line
from cmlm_plugin.models.fast_decoder import FastDecoder
from cmlm_plugin.symbols import mask_index


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    torch.manual_seed(0)
    return setup(write_dictionaries(tmp_path_factory.mktemp("dict")))


def generate(task, model, sources, decoding_args=(), **gen):
    args = argparse.Namespace(iter_decode_max_iter=4, iter_decode_with_beam=2, **gen)
    generator = task.build_generator([model], args)
    sample = sample_for(task, sources, ["w1"] * len(sources))
    return task.inference_step(generator, [model], sample)


def test_empty_source_gets_the_empty_hypothesis_and_the_batch_decodes(tiny):
    task, model, _ = tiny
    hypos = generate(task, model, ["w1 w2 w3", "", "w4 w5"])
    eos = task.tgt_dict.eos()
    assert hypos[1][0]["tokens"].tolist() == [eos]
    assert hypos[1][0]["positional_scores"].numel() == 0
    for i in (0, 2):
        assert len(hypos[i][0]["tokens"]) >= 2  # a real output beside it


@pytest.mark.parametrize("impl", ["fast", "modules"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nonfinite_logits_are_refused_naming_the_sentences(tiny, bad, impl, monkeypatch):
    task, model, _ = tiny
    owner = FastDecoder if impl == "fast" else model  # where the pass's logits come from
    original = owner.logits if impl == "fast" else model.decoder_logits

    def overflowing(*args):  # n x L x V, or M x V
        return original(*args).index_fill(-1, torch.tensor([7]), bad)

    monkeypatch.setattr(owner, "logits" if impl == "fast" else "decoder_logits", overflowing)
    with pytest.raises(
        CMLMPluginError, match=r"NaN/inf logits for 2 sentence\(s\) \(ids \[0, 1\]\)"
    ):
        args = argparse.Namespace(iter_decode_max_iter=4, iter_decode_with_beam=2)
        generator = task.build_generator([model], args)
        generator.decoder_impl = impl
        sample = sample_for(task, ["w1 w2 w3", "w4 w5"], ["w1"] * 2)
        task.inference_step(generator, [model], sample)


def test_finite_logits_pass_the_check(tiny):
    task, model, _ = tiny
    assert len(generate(task, model, ["w1 w2 w3", "w4 w5"])) == 2


def test_dictionary_without_mask_is_refused_with_the_fix():
    from fairseq.data import Dictionary

    with pytest.raises(CMLMPluginError, match="load it through --task cmlm"):
        mask_index(Dictionary())


def test_one_line_message_keeps_the_wrapping_context():
    try:
        try:
            raise CMLMPluginError("the checkpoint's source vocabulary has 9 symbols\nbut 10")
        except CMLMPluginError:
            raise Exception("Cannot load model parameters from checkpoint x.pt; match")
    except Exception as exc:
        assert find_plugin_error(exc) is not None
        assert one_line(exc) == (
            "cmlm_plugin error: the checkpoint's source vocabulary has 9 symbols but 10 "
            "(while: Cannot load model parameters from checkpoint x.pt; match)"
        )
    assert find_plugin_error(RuntimeError("deep inside torch")) is None
