"""``--pll-rerank G`` on the tiny model: the length candidates ranked by their masked
pseudo-log-likelihood (``cmlm_decoding.pseudo_likelihood``) instead of the mean
log-probability of the decoding passes."""

import argparse

import pytest
import torch
from test_ctc_components import left_padded
from tinymodel import sample_for, setup

import cmlm_plugin.generation.generator as generator_module

SOURCES = ["w1 w2 w3 w4", "w5 w6", "w7 w8 w9 w10 w11", "w12"]
BEAM = 3


def decode(task, model, groups, beam=BEAM, impl="modules", decoding="mask_predict"):
    args = argparse.Namespace(iter_decode_max_iter=3, iter_decode_with_beam=beam)
    task.cfg.pll_rerank, task.cfg.decoding = groups, decoding
    try:
        generator = task.build_generator([model], args)
    finally:
        task.cfg.pll_rerank, task.cfg.decoding = 0, "mask_predict"
    generator.decoder_impl = impl
    sample = left_padded(task, sample_for(task, SOURCES, ["w1"] * len(SOURCES)))
    return task.inference_step(generator, [model], sample), sample


def by_hand(task, model, sample, row, tokens):
    """Mean over positions i of log P(y_i | the candidate with only y_i masked)."""
    d = task.tgt_dict
    banned = [d.pad(), d.bos(), d.eos(), task.mask_idx]
    encoder_out = model.encoder(sample["net_input"]["src_tokens"], src_lengths=None)
    one_row = model.encoder.reorder_encoder_out(encoder_out, torch.tensor([row]))
    total = 0.0
    for i in range(len(tokens)):
        masked = tokens.clone()
        masked[i] = task.mask_idx
        logits = model.decoder_logits(masked[None], one_row)[0, i].float()  # V
        logits[banned] = float("-inf")
        total += float(torch.log_softmax(logits, dim=-1)[tokens[i]])
    return total / len(tokens)


def recorded(monkeypatch, sign=1.0):
    """Record each call of the generator's ``pseudo_log_likelihood`` (scores times ``sign``)."""
    seen = []
    original = generator_module.pseudo_log_likelihood

    def recording(step, tokens, mask_idx, pad_idx, groups):
        scores = sign * original(step, tokens, mask_idx, pad_idx, groups)
        seen.append((tokens.clone(), scores.clone()))
        return scores

    monkeypatch.setattr(generator_module, "pseudo_log_likelihood", recording)
    return seen


def candidates_of(task, tokens, row):
    pad = task.tgt_dict.pad()
    return [tokens[i][tokens[i].ne(pad)] for i in range(row * BEAM, (row + 1) * BEAM)]


@pytest.mark.parametrize("decoding", ["mask_predict", "diffusion"])
def test_the_scores_are_the_pseudo_log_likelihood_computed_by_hand(
    tiny_eval, monkeypatch, decoding
):
    task, model = tiny_eval
    seen = recorded(monkeypatch)
    # G > every length: one position per call; the diffusion step returns logits
    hypos, sample = decode(task, model, groups=64, decoding=decoding)
    ((tokens, scores),) = seen
    for row, (best,) in enumerate(hypos):
        candidates = candidates_of(task, tokens, row)
        expected = [by_hand(task, model, sample, row, c) for c in candidates]
        torch.testing.assert_close(scores[row * BEAM : (row + 1) * BEAM], torch.tensor(expected))
        winner = candidates[max(range(BEAM), key=lambda k: expected[k])]
        assert best["tokens"][:-1].tolist() == winner.tolist()  # EOS excluded


def test_the_candidate_the_scores_rank_first_is_kept(tiny_eval, monkeypatch):
    """Negated scores: the output must follow them (the lowest pseudo-log-likelihood), so
    the selection reads these scores and not the passes' mean log-probability."""
    task, model = tiny_eval
    plain, _ = decode(task, model, groups=0)
    seen = recorded(monkeypatch, sign=-1.0)
    hypos, _ = decode(task, model, groups=2)
    ((tokens, scores),) = seen
    differ = 0
    for row, (best,) in enumerate(hypos):
        candidates = candidates_of(task, tokens, row)
        first = int(scores[row * BEAM : (row + 1) * BEAM].argmax())
        assert best["tokens"][:-1].tolist() == candidates[first].tolist()
        differ += best["tokens"].tolist() != plain[row][0]["tokens"].tolist()
    assert differ > 0


def test_candidates_dropped_by_length_pruning_stay_out(tiny_eval):
    """After one pass only the best candidate goes on (--length-prune-after 1): the
    ranking must not bring back a dropped, unfinished one."""
    task, model = tiny_eval
    task.cfg.length_prune_after, task.cfg.length_prune_keep = 1, 1
    try:
        plain, _ = decode(task, model, groups=0)
        ranked, _ = decode(task, model, groups=2)
    finally:
        task.cfg.length_prune_after = 0
    assert [h[0]["tokens"].tolist() for h in ranked] == [h[0]["tokens"].tolist() for h in plain]
    assert all(task.mask_idx not in h[0]["tokens"].tolist() for h in ranked)


def test_the_fast_decoder_ranks_as_the_modules_do(tiny_eval):
    task, model = tiny_eval
    modules, _ = decode(task, model, groups=2)
    fast, _ = decode(task, model, groups=2, impl="fast")
    assert [h[0]["tokens"].tolist() for h in fast] == [h[0]["tokens"].tolist() for h in modules]


def test_one_candidate_leaves_the_output_unchanged_with_a_warning(tiny_eval, capsys):
    task, model = tiny_eval
    ranked, _ = decode(task, model, groups=2, beam=1)
    assert "one candidate to rank" in capsys.readouterr().err
    plain, _ = decode(task, model, groups=0, beam=1)
    assert [h[0]["tokens"].tolist() for h in ranked] == [h[0]["tokens"].tolist() for h in plain]


def test_a_negative_group_count_is_refused(tiny_eval):
    task, model = tiny_eval
    with pytest.raises(ValueError, match=r"--pll-rerank must be >= 0"):
        decode(task, model, groups=-1)


def test_a_ctc_model_refuses_the_flag(data_dir):
    task, model, _ = setup(data_dir, "--ctc-upsample", "2", "--pll-rerank", "2")
    args = argparse.Namespace(iter_decode_max_iter=1, iter_decode_with_beam=1)
    with pytest.raises(ValueError, match="drop --pll-rerank"):
        task.build_generator([model], args)
