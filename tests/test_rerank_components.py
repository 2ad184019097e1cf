"""``--rerank-with``: the length candidates rescored by an autoregressive model.

Unit tests of the selection on hand-built scores, the teacher-forced score against the
AR model's own forward, and the generator on a tiny CMLM with a tiny AR ``transformer``
built in-process on the same 30-word dictionary (the AR task's dictionary lacks the
``<mask>`` that ``--task cmlm`` appends, as when both are trained on one binarized set).
"""

import argparse

import pytest
import torch
from omegaconf import OmegaConf
from tinymodel import config, encode, sample_for, setup

from cmlm_decoding import select_best

SOURCES = ["w1 w2 w3 w4", "w5 w6", "w7 w8 w9 w10 w11", "w12"]
AR_TINY = [
    "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16",
    "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "16", "--decoder-ffn-embed-dim",
    "16", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
    "--share-all-embeddings",
]  # fmt: skip


def test_weight_one_keeps_the_candidate_the_ar_scores_best():
    from cmlm_plugin.generation.rerank import combine

    cmlm = torch.tensor([-0.1, -2.0, -3.0, -1.0, -0.5, -0.2])  # 2 sentences x l = 3
    ar = torch.tensor([-3.0, -1.0, -2.0, -0.4, -0.3, -0.9])
    assert select_best(cmlm, 3).tolist() == [0, 5]  # the CMLM's own choice
    assert select_best(combine(cmlm, ar, 1.0), 3).tolist() == [1, 4]  # the AR model's
    mixed = combine(cmlm, ar, 0.5)  # (cmlm + ar) / 2: -1.55 -1.5 -2.5 | -0.7 -0.4 -0.55
    assert torch.allclose(mixed, 0.5 * (cmlm + ar))
    assert select_best(mixed, 3).tolist() == [1, 4]
    assert select_best(combine(cmlm, ar, 0.1), 3).tolist() == [0, 5]  # mostly the CMLM


def test_candidates_dropped_by_pruning_stay_out():
    from cmlm_plugin.generation.rerank import combine

    cmlm = torch.tensor([-1.0, float("-inf"), -2.0])  # the middle one was pruned
    ar = torch.tensor([-3.0, -0.1, -2.5])
    assert select_best(combine(cmlm, ar, 1.0), 3).tolist() == [2]
    assert select_best(combine(cmlm, ar, 0.5), 3).tolist() == [0]  # -2.0 against -2.25
    assert combine(cmlm, ar, 0.5)[1] == float("-inf")


@pytest.mark.parametrize("weight", [0.0, -0.5, 1.5])
def test_weight_outside_the_unit_interval_is_refused(weight):
    from cmlm_plugin.errors import CMLMPluginError
    from cmlm_plugin.generation.rerank import check_weight

    with pytest.raises(CMLMPluginError, match=r"--rerank-weight .* must be in \(0, 1\]"):
        check_weight(weight)


def ar_model(data_dir, seed=0, direction=("src", "tgt")):
    """A tiny fairseq ``transformer`` of ``--task translation`` (no ``<mask>``) and its cfg."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_training_parser()
    argv = [data_dir, "--task", "translation", "--arch", "transformer"]
    argv += ["-s", direction[0], "-t", direction[1]]
    args = options.parse_args_and_arch(parser, argv + AR_TINY + ["--cpu"])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    torch.manual_seed(seed)
    return task, task.build_model(cfg.model), cfg


def save(cfg, model, path):
    """A checkpoint as fairseq-train writes it: plain containers and tensors only."""
    container = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    history = {"criterion_name": "CrossEntropyCriterion", "optimizer_name": "FairseqAdam",
               "lr_scheduler_state": {}, "num_updates": 1}  # fmt: skip
    state = {"args": None, "cfg": container, "model": model.state_dict(), "criterion": None,
             "optimizer_history": [history], "task_state": {},
             "extra_state": {"train_iterator": {"epoch": 1}}, "last_optimizer_state": None}  # fmt: skip
    torch.save(state, path)
    return str(path)


def prefer_eos(model, bias=30.0):
    """Make the AR model put nearly all mass on EOS: it then prefers the shortest candidate."""
    eos = model.decoder.dictionary.eos()
    projection = model.decoder.output_projection  # tied to the embeddings here
    untied = torch.nn.Linear(projection.in_features, projection.out_features, bias=True)
    with torch.no_grad():
        untied.weight.copy_(projection.weight)
        untied.bias.zero_()
        untied.bias[eos] = bias
    model.decoder.output_projection = untied


def test_score_is_the_mean_log_probability_of_tokens_and_eos(data_dir):
    from cmlm_plugin.generation.rerank import Reranker

    task, model, _ = ar_model(data_dir)
    model.eval()
    d = task.tgt_dict
    reranker = Reranker(model, d.pad(), d.eos(), d.unk())
    sources = encode(task, ["w1 w2 w3", "w4"])  # B x S, EOS-terminated, right-padded
    src_lengths = sources.ne(d.pad()).sum(1)
    candidates = ["w5 w6", "w7 w8 w9", "w1", "w2 w3 w4 w5"]
    rows = encode(task, candidates)  # N x (L + 1): tokens, EOS, pad
    tokens = rows.masked_fill(rows.eq(d.eos()), d.pad())[:, :-1]  # N x L: tokens, pad
    order = torch.tensor([0, 0, 1, 1])
    got = reranker.score(sources, src_lengths, tokens, order)
    for i, sentence in enumerate(candidates):  # reference: fairseq's forward, one at a time
        target = d.encode_line(sentence, add_if_not_exist=False).long()[None]  # 1 x (n+1)
        previous = torch.cat([target.new_full((1, 1), d.eos()), target[:, :-1]], 1)
        s = order[i]
        src = sources[s : s + 1, : int(src_lengths[s])]
        with torch.no_grad():
            out = model(src, src_lengths[s : s + 1], previous)
            logprobs = model.get_normalized_probs(out, log_probs=True)  # 1 x (n+1) x V
        expected = logprobs.gather(2, target[:, :, None]).mean()
        assert got[i].item() == pytest.approx(expected.item(), abs=1e-5)


def test_the_reranker_keeps_the_candidate_the_ar_model_prefers(data_dir, tmp_path):
    _, ar, cfg = ar_model(data_dir)
    path = save(cfg, ar, tmp_path / "ar.pt")
    task, model, _ = setup(data_dir)
    reranking, _, _ = setup(data_dir, "--rerank-with", path)
    model.eval()
    args = argparse.Namespace(iter_decode_max_iter=3, iter_decode_with_beam=3)
    sample = sample_for(task, SOURCES, ["w1"] * len(SOURCES))
    captured = {}
    generator = reranking.build_generator([model], args)
    assert generator.reranker is not None and not generator.reranker.model.training
    prefer_eos(generator.reranker.model)  # the shortest candidate now scores best under it
    decode = generator.decode

    def keep(*a, **k):
        captured["result"] = decode(*a, **k)
        return captured["result"]

    generator.decode = keep
    torch.manual_seed(0)
    hypos = reranking.inference_step(generator, [model], sample)
    lengths = captured["result"].tokens.ne(task.tgt_dict.pad()).sum(1).view(len(SOURCES), 3)
    chosen = [len(h[0]["tokens"]) - 1 for h in hypos]  # EOS excluded
    assert chosen == lengths.min(dim=1).values.tolist()
    torch.manual_seed(0)
    plain = task.inference_step(task.build_generator([model], args), [model], sample)
    # without the reranker some sentence keeps a longer candidate: the AR model decided
    assert [len(h[0]["tokens"]) - 1 for h in plain] != chosen
    assert all("<mask>" not in task.tgt_dict.string(h[0]["tokens"]) for h in hypos)


def test_reranker_follows_the_models_device_and_type(data_dir, tmp_path):
    _, ar, cfg = ar_model(data_dir)
    path = save(cfg, ar, tmp_path / "ar.pt")
    task, model, _ = setup(data_dir, "--rerank-with", path)
    model.eval().double()
    args = argparse.Namespace(iter_decode_max_iter=2, iter_decode_with_beam=2)
    generator = task.build_generator([model], args)
    task.inference_step(generator, [model], sample_for(task, SOURCES, ["w1"] * len(SOURCES)))
    assert next(generator.reranker.model.parameters()).dtype == torch.float64


def test_one_candidate_warns_and_loads_nothing(data_dir, tmp_path, capsys):
    task, model, _ = setup(data_dir, "--rerank-with", str(tmp_path / "never-read.pt"))
    generator = task.build_generator([model], argparse.Namespace(iter_decode_with_beam=1))
    assert generator.reranker is None
    err = capsys.readouterr().err
    assert "cmlm_plugin warning: --rerank-with has one candidate to choose from" in err
    assert "--iter-decode-with-beam 2 or more" in err


def bad(data_dir, path, beam=2):
    from cmlm_plugin.errors import CMLMPluginError

    task, model, _ = setup(data_dir, "--rerank-with", str(path))
    with pytest.raises(CMLMPluginError) as info:
        task.build_generator([model], argparse.Namespace(iter_decode_with_beam=beam))
    message = str(info.value)
    assert "\n" not in message
    return message


def test_missing_reranker_file(data_dir, tmp_path):
    message = bad(data_dir, tmp_path / "nowhere.pt")
    assert message.startswith(f"--rerank-with {tmp_path / 'nowhere.pt'}: no such checkpoint file")
    assert "fairseq-train DATA_BIN --task translation --arch transformer" in message


def test_a_non_autoregressive_reranker_is_refused(data_dir, tmp_path):
    task, model, _ = setup(data_dir)
    path = save(config(data_dir), model, tmp_path / "cmlm.pt")
    message = bad(data_dir, path)
    assert "the checkpoint is --task cmlm --arch cmlm_plugin_tiny, not an autoregressive" in message


def dictionary_folder(folder, data_dir, extra=(), swap=None):
    """``dict.{src,tgt}.txt`` of ``data_dir`` with ``extra`` symbols added, two lines swapped."""
    folder.mkdir()
    lines = open(f"{data_dir}/dict.tgt.txt").read().splitlines() + [f"{w} 1" for w in extra]
    if swap:
        i, j = swap
        lines[i], lines[j] = lines[j], lines[i]
    for lang in ("src", "tgt"):
        (folder / f"dict.{lang}.txt").write_text("\n".join(lines) + "\n")
    return str(folder)


def test_a_reranker_of_another_vocabulary_names_both_sizes(data_dir, tmp_path):
    _, ar, cfg = ar_model(dictionary_folder(tmp_path / "big", data_dir, ["zz1", "zz2"]))
    message = bad(data_dir, save(cfg, ar, tmp_path / "ar.pt"))
    assert "the reranker's target dictionary has 36 symbols but ours has 35 (34 without the "
    "<mask> that --task cmlm adds)" in message


@pytest.mark.parametrize("languages", ["recorded", "inferred"])
def test_one_symbol_in_the_place_of_our_mask_is_refused(data_dir, tmp_path, languages):
    _, ar, cfg = ar_model(dictionary_folder(tmp_path / "big", data_dir, ["zz1"]))
    if languages == "inferred":  # fairseq-train without -s/-t records None, reads file names
        cfg.task.source_lang = cfg.task.target_lang = None
        (tmp_path / "big" / "train.src-tgt.src.idx").write_bytes(b"")
    message = bad(data_dir, save(cfg, ar, tmp_path / "ar.pt"))
    assert "has 35 symbols but ours has 35 (34 without" in message
    assert "symbol 34 is 'zz1' there and '<mask>' here" in message


def test_a_reranker_whose_symbols_differ_names_the_first(data_dir, tmp_path):
    _, ar, cfg = ar_model(dictionary_folder(tmp_path / "swapped", data_dir, swap=(2, 3)))
    message = bad(data_dir, save(cfg, ar, tmp_path / "ar.pt"))
    assert "the reranker's target dictionary has 34 symbols but ours has 35 (34 without" in message
    assert "symbol 6 is 'w3' there and 'w2' here" in message


def test_without_its_dictionary_files_the_sizes_are_compared(data_dir, tmp_path):
    bigger = dictionary_folder(tmp_path / "big", data_dir, ["zz1", "zz2"])
    _, ar, cfg = ar_model(bigger)
    path = save(cfg, ar, tmp_path / "ar.pt")
    for lang in ("src", "tgt"):
        (tmp_path / "big" / f"dict.{lang}.txt").unlink()  # moved away after training
    message = bad(data_dir, path)
    assert "the reranker's target dictionary has 36 symbols but ours has 35 (34 without" in message


def test_a_reranker_of_the_other_direction_is_refused(data_dir, tmp_path):
    _, ar, cfg = ar_model(data_dir, direction=("tgt", "src"))
    message = bad(data_dir, save(cfg, ar, tmp_path / "ar.pt"))
    assert "the reranker translates tgt-src but we translate src-tgt" in message
