"""Component tests of CTC training and one-pass decoding (``--ctc-upsample``) on the tiny model."""

import argparse

import pytest
import torch
from tinymodel import WORDS, sample_for, setup

from cmlm_plugin.models.ctc import collapse, ctc_nll

SOURCES = ["w1 w2 w3 w4", "w5 w6", "w7 w8 w9 w10 w11"]
TARGETS = ["w11 w12 w13 w14 w15", "w16 w17 w18", "w19 w20 w21 w22"]


@pytest.fixture(scope="module")
def ctc(data_dir):
    torch.manual_seed(0)
    task, model, criterion = setup(data_dir, "--ctc-upsample", "2")
    model.eval()
    return task, model, criterion


def left_padded(task, sample):
    """The sample with its sources left-padded, as fairseq's datasets give them."""
    src = sample["net_input"]["src_tokens"]  # B x S, right-padded by tinymodel
    pad = task.src_dict.pad()
    order = torch.sort(src.ne(pad).long(), dim=1, stable=True).indices  # pads first
    sample["net_input"]["src_tokens"] = src.gather(1, order)
    return sample


def test_the_source_canvas_repeats_each_source_token(ctc):
    task, model, _ = ctc
    sample = left_padded(task, sample_for(task, SOURCES, TARGETS))
    src = sample["net_input"]["src_tokens"]
    canvas = model.ctc_canvas(src)
    d = task.tgt_dict
    for row, source in zip(canvas.tolist(), SOURCES):
        ids = [d.index(w) for w in source.split()] + [d.eos()]
        expected = [i for i in ids for _ in range(2)]
        assert row[: len(expected)] == expected
        assert set(row[len(expected) :]) <= {d.pad()}


def test_the_mask_canvas_holds_masks_for_twice_the_source(data_dir):
    task, model, _ = setup(data_dir, "--ctc-upsample", "2", "--ctc-canvas", "mask")
    sample = left_padded(task, sample_for(task, SOURCES, TARGETS))
    src = sample["net_input"]["src_tokens"]
    canvas = model.ctc_canvas(src)
    lengths = [2 * (len(s.split()) + 1) for s in SOURCES]
    assert canvas.eq(task.mask_idx).sum(dim=1).tolist() == lengths
    assert canvas.size(1) == max(lengths)


def test_the_loss_is_ctc_on_the_models_own_distributions(ctc):
    task, model, criterion = ctc
    sample = task.add_noise(left_padded(task, sample_for(task, SOURCES, TARGETS)))
    loss, sample_size, log = criterion(model, sample)
    d = task.tgt_dict
    assert sample_size == log["masked"] == sum(len(t.split()) for t in TARGETS)

    src = sample["net_input"]["src_tokens"]
    encoder_out = model.encoder(src, src_lengths=None)
    canvas = model.ctc_canvas(src)
    lprobs = torch.log_softmax(model.decoder_logits(canvas, encoder_out).float(), dim=-1)
    target = sample["target"]
    lengths = target.ne(d.pad()).sum(dim=1)
    expected = ctc_nll(lprobs, canvas.ne(d.pad()).sum(dim=1), target, lengths, task.mask_idx)
    torch.testing.assert_close(log["word_ins_loss"], expected.detach())
    torch.testing.assert_close(loss, expected + log["length_loss"])


def test_label_smoothing_leaves_the_ctc_term_alone_and_gradients_reach_both_halves(data_dir):
    torch.manual_seed(0)
    task, model, criterion = setup(data_dir, "--ctc-upsample", "2", "--label-smoothing", "0.1")
    sample = task.add_noise(left_padded(task, sample_for(task, SOURCES, TARGETS)))
    model.eval()
    loss, _, log = criterion(model, sample)
    assert torch.equal(log["word_ins_loss"], log["word_ins_nll"])
    loss.backward()
    for name in ("encoder.layers.0.fc1.weight", "decoder.layers.0.fc1.weight"):
        assert model.get_parameter(name).grad.abs().sum() > 0


def generate(task, model, impl="modules", blank_penalty=0.0):
    args = argparse.Namespace(iter_decode_max_iter=1, iter_decode_with_beam=1)
    task.cfg.ctc_blank_penalty = blank_penalty  # --ctc-blank-penalty, a task flag
    try:
        generator = task.build_generator([model], args)
    finally:
        task.cfg.ctc_blank_penalty = 0.0
    generator.decoder_impl = impl
    sample = left_padded(task, sample_for(task, SOURCES, TARGETS))
    return task.inference_step(generator, [model], sample), sample


def best_path(task, model, sample, banned):
    """The symbols of one modules pass over the canvas (``banned`` excluded) and the
    positions CTC's collapse keeps, ``B x L`` each."""
    src = sample["net_input"]["src_tokens"]
    encoder_out = model.encoder(src, src_lengths=None)
    canvas = model.ctc_canvas(src)
    logits = model.decoder_logits(canvas, encoder_out).float()  # B x L x V
    logits[..., banned] = float("-inf")
    symbols = logits.argmax(dim=-1)  # B x L
    pad = task.tgt_dict.pad()
    kept, _ = collapse(symbols, canvas.ne(pad).sum(dim=1), task.mask_idx, pad)
    return symbols, kept


def test_decoding_is_the_best_path_of_one_pass_and_fast_agrees(ctc):
    task, model, _ = ctc
    hypos, sample = generate(task, model)
    d = task.tgt_dict
    symbols, kept = best_path(task, model, sample, [d.pad(), d.bos(), d.eos()])
    assert sum(int(k.sum()) for k in kept) > 0  # the check below compares non-empty outputs
    for (hypo,), row, keep in zip(hypos, symbols, kept):
        tokens = hypo["tokens"].tolist()
        assert tokens[:-1] == row[keep].tolist() and tokens[-1] == d.eos()
        assert hypo["steps"] == 1 and hypo["positional_scores"].numel() == len(tokens) - 1
        assert not set(tokens[:-1]) & {d.pad(), d.bos(), d.eos(), task.mask_idx}
    fast, _ = generate(task, model, impl="fast")
    for (a,), (b,) in zip(fast, hypos):
        assert a["tokens"].tolist() == b["tokens"].tolist()
        torch.testing.assert_close(a["positional_scores"], b["positional_scores"])


def test_a_blank_penalty_turns_blanks_into_symbols(ctc):
    """A penalty larger than any log-probability gap leaves no blank on the best path:
    the output is then the canvas's runs of the best non-blank symbols."""
    task, model, _ = ctc
    plain, sample = generate(task, model)
    d = task.tgt_dict
    symbols, kept = best_path(task, model, sample, [d.pad(), d.bos(), d.eos(), task.mask_idx])
    penalised, _ = generate(task, model, blank_penalty=1e4)
    for (hypo,), row, keep in zip(penalised, symbols, kept):
        assert hypo["tokens"].tolist()[:-1] == row[keep].tolist()
    unchanged, _ = generate(task, model, blank_penalty=0.0)
    assert [h[0]["tokens"].tolist() for h in unchanged] == [h[0]["tokens"].tolist() for h in plain]


def test_a_cmlm_refuses_the_blank_penalty(data_dir):
    task, model, _ = setup(data_dir, "--ctc-blank-penalty", "1.0")
    args = argparse.Namespace(iter_decode_max_iter=1, iter_decode_with_beam=1)
    with pytest.raises(ValueError, match="--ctc-blank-penalty applies to models trained"):
        task.build_generator([model], args)


@pytest.mark.parametrize(
    "max_iter, beam, message",
    [(10, 1, "no --ctc-cmlm-weight"), (1, 5, "--iter-decode-with-beam 1")],
    ids=["several-passes", "length-candidates"],
)
def test_decoding_refuses_passes_and_length_candidates(ctc, max_iter, beam, message):
    """Several passes need a model trained with --ctc-cmlm-weight (test_ctc_refine_components)."""
    task, model, _ = ctc
    args = argparse.Namespace(iter_decode_max_iter=max_iter, iter_decode_with_beam=beam)
    with pytest.raises(ValueError, match=message):
        task.build_generator([model], args)


def test_an_empty_source_gets_the_empty_hypothesis(ctc):
    task, model, _ = ctc
    args = argparse.Namespace(iter_decode_max_iter=1, iter_decode_with_beam=1)
    generator = task.build_generator([model], args)
    sample = sample_for(task, ["w1 w2", ""], ["w3", "w4"])
    hypos = task.inference_step(generator, [model], sample)
    assert hypos[1][0]["tokens"].tolist() == [task.tgt_dict.eos()]


def test_glancing_shows_the_best_alignment_where_the_first_pass_was_wrong(data_dir):
    """--glancing-ratio 1 on a CTC model: the trained pass's canvas holds the reference's
    best alignment at as many positions as the first pass got wrong; no gradient
    through the first pass; the loss is CTC on the revised canvas."""
    torch.manual_seed(0)
    task, model, criterion = setup(data_dir, "--ctc-upsample", "3", "--glancing-ratio", "1")
    sample = task.add_noise(left_padded(task, sample_for(task, SOURCES, TARGETS)))
    revise = task.second_pass(sample, 0, torch.Generator().manual_seed(0))
    seen = {}

    def spy(canvas, predicted, aligned, candidates):
        seen.update(canvas=canvas, predicted=predicted, aligned=aligned, candidates=candidates)
        seen["new"] = revise(canvas, predicted, aligned, candidates)
        return seen["new"]

    sample["revise"] = spy
    loss, _, _ = criterion(model, sample)
    loss.backward()
    canvas, new, aligned = seen["canvas"], seen["new"], seen["aligned"]
    wrong = (seen["candidates"] & seen["predicted"].ne(aligned)).sum(dim=1)  # B
    shown = new.ne(canvas)  # B x L, source tokens never equal their row's alignment here
    assert shown.sum(dim=1).tolist() == wrong.tolist() and int(wrong.sum()) > 0
    assert torch.equal(new[shown], aligned[shown])
    assert not any(seen[k].requires_grad for k in ("predicted", "aligned"))
    d = task.tgt_dict
    lengths = canvas.ne(d.pad()).sum(dim=1)
    kept, order = collapse(aligned, lengths, task.mask_idx, d.pad())
    for row, target in enumerate(TARGETS):  # the alignment spells the reference
        ids = aligned[row].gather(0, order[row])[: int(kept[row].sum())]
        assert d.string(ids) == target
    assert model.decoder.layers[0].self_attn.q_proj.weight.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "extra, message",
    [
        (("--glancing-ratio", "0.5", "--glancing-full-mask", "0.5"), "--glancing-full-mask"),
        (("--self-correction", "0.5"), "--self-correction"),
        (("--objective", "diffusion"), "--objective diffusion"),
        (("--ctc-upsample", "-1"), "must be >= 0"),
    ],
)
def test_training_flags_that_ctc_cannot_take_are_refused(data_dir, extra, message):
    with pytest.raises(ValueError, match=message):
        setup(data_dir, "--ctc-upsample", "2", *extra)


def test_the_source_canvas_needs_a_joined_dictionary(ctc):
    """The archs share all embeddings, so fairseq-train stops split dictionaries earlier;
    the check guards a model built without them."""
    from fairseq.data import Dictionary

    from cmlm_plugin.tasks.cmlm_task import check_ctc

    task, model, _ = ctc
    other = Dictionary()
    for word in WORDS[::-1]:
        other.add_symbol(word)
    with pytest.raises(ValueError, match="--joined-dictionary, or use --ctc-canvas mask"):
        check_ctc(task.cfg, model, task.src_dict, other, from_checkpoint=True)
    check_ctc(task.cfg, model, task.src_dict, task.tgt_dict, from_checkpoint=True)
