"""``cmlm-convert mask-predict``: original Mask-Predict checkpoints decode the same in our model.

A synthetic checkpoint of the original code (``bert_transformer_seq2seq``, fairseq 0.7.2)
is written with the original parameter names and shapes and random weights (random
LayerNorm gamma/beta too), in three layouts: one shared fp16 table (the released
models), separate tables with ``decoder.embed_out``, and separate tables with a tied
decoder output. It is converted with ``convert_checkpoint``, loaded the way
fairseq-generate loads it, and compared with ``reference``, a plain-torch
re-implementation of the original forward pass:

* encoder states at the real source positions (left- and right-padded batches);
* length log-probabilities: our class c (c words) is the original class c + 1 (c words
  and EOS); our last class has no counterpart and gets no probability;
* decoder logits at the real target positions of an input with ``<mask>`` tokens, with
  the vocabulary reordered: our word i (>= 4) is original i + 1, our ``<mask>``
  (the last symbol) is original 4;
* every original weight lands in the converted checkpoint (no silent drops), a missing
  weight or a dictionary of the wrong size is a one-line ``CMLMPluginError``;
* the console command converts a checkpoint that fairseq-generate then decodes.

Known differences, allowed for: fairseq's LayerNorm eps is 1e-5 where the original's is
1e-12 (compared within ``ORIGINAL_ATOL``; against the reference run with eps 1e-5 the
match is float rounding, ``EXACT_ATOL``), and our decoder reads the final ``</s>`` as
given where the original masks and predicts that slot too (the reference gets ``</s>``).
"""

import argparse
import math
from collections import OrderedDict

import pytest
import torch
import torch.nn.functional as F
from tinymodel import WORDS

from cmlm_plugin.checkpoints.convert import from_mask_predict
from cmlm_plugin.cli.convert import convert_checkpoint
from cmlm_plugin.errors import CMLMPluginError

C, FFN, HEADS, LAYERS, POSITIONS = 16, 32, 2, 2, 20  # POSITIONS = max_*_positions = length classes
V = 4 + len(WORDS) + 1  # <s> <pad> </s> <unk>, the words, <mask> (the same count in both codes)
PAD, EOS, MASK = 1, 2, V - 1  # our ids; the original's <mask> is 4
# our id -> original id: specials stay, word i is original i + 1, our <mask> is original 4
TO_ORIGINAL = torch.cat([torch.arange(4), torch.arange(5, V), torch.tensor([4])])
ORIGINAL_ATOL = 1e-4  # against the original's LayerNorm eps 1e-12
EXACT_ATOL = 1e-5  # against the same computation with fairseq's eps 1e-5
LAYOUTS = ("shared-fp16", "separate", "tied-output")


def original_state(layout="shared-fp16", vocab=V, seed=0) -> OrderedDict:
    """Random weights under the original names and shapes, in the order the original saves them."""
    g = torch.Generator().manual_seed(seed)
    dtype = torch.float16 if layout.endswith("fp16") else torch.float32

    def rand(*shape, mean=0.0, std=0.3):
        return (mean + std * torch.randn(*shape, generator=g)).to(dtype)

    def attention(prefix):
        return {
            f"{prefix}.in_proj_weight": rand(3 * C, C),  # packed [q; k; v]
            f"{prefix}.in_proj_bias": rand(3 * C, std=0.1),
            f"{prefix}.out_proj.weight": rand(C, C),
            f"{prefix}.out_proj.bias": rand(C, std=0.1),
        }

    def ffn_and_norms(prefix, norms):
        out = {
            f"{prefix}.fc1.weight": rand(FFN, C),
            f"{prefix}.fc1.bias": rand(FFN, std=0.1),
            f"{prefix}.fc2.weight": rand(C, FFN),
            f"{prefix}.fc2.bias": rand(C, std=0.1),
        }
        for norm in norms:  # BertLayerNorm
            out[f"{prefix}.{norm}.gamma"] = rand(C, mean=1.0, std=0.2)
            out[f"{prefix}.{norm}.beta"] = rand(C, std=0.2)
        return out

    tokens = rand(vocab, C)
    state = OrderedDict()
    state["encoder.version"] = torch.tensor([2.0])
    state["encoder.embed_tokens.weight"] = tokens
    state["encoder.embed_positions.weight"] = rand(POSITIONS + 2, C)
    state["encoder.embed_lengths.weight"] = rand(POSITIONS, C)  # row 0: the LENGTH token
    for i in range(LAYERS):
        state.update(attention(f"encoder.layers.{i}.self_attn"))
        state.update(ffn_and_norms(f"encoder.layers.{i}", ["layer_norms.0", "layer_norms.1"]))
    # one tensor under both names when all embeddings are shared, as the original saves it
    state["decoder.embed_tokens.weight"] = tokens if layout == "shared-fp16" else rand(vocab, C)
    state["decoder.embed_positions.weight"] = rand(POSITIONS + 2, C)
    for i in range(LAYERS):
        state.update(attention(f"decoder.layers.{i}.self_attn"))
        state.update(attention(f"decoder.layers.{i}.encoder_attn"))
        norms = ["self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm"]
        state.update(ffn_and_norms(f"decoder.layers.{i}", norms))
    if layout == "separate":
        state["decoder.embed_out"] = rand(vocab, C)
    state["decoder.version"] = torch.tensor([2.0])
    return state


def write_original(path, state):
    tied = "decoder.embed_out" not in state
    shared = state.get("decoder.embed_tokens.weight") is state["encoder.embed_tokens.weight"]
    args = argparse.Namespace(
        arch="bert_transformer_seq2seq",
        encoder_attention_heads=HEADS,
        decoder_attention_heads=HEADS,
        dropout=0.3,
        share_all_embeddings=shared,
        share_decoder_input_output_embed=tied,
        max_source_positions=POSITIONS,
        max_target_positions=POSITIONS,
    )
    torch.save({"args": args, "model": state, "optimizer_history": [], "extra_state": {}}, path)
    return str(path)


def reference(state, src, tgt=None, eps=1e-12):
    """The original forward pass in plain torch, on original ids (right-padded ``src``/``tgt``).

    Returns the encoder states ``B x S x C``, the length log-probs ``B x POSITIONS``
    (class k = k tokens with EOS; class 0 is -inf) and the decoder logits ``B x T x V``
    (None without ``tgt``).
    """
    sd = {k: v.float() for k, v in state.items()}

    def norm(x, prefix):
        return F.layer_norm(x, (C,), sd[prefix + ".gamma"], sd[prefix + ".beta"], eps=eps)

    def attend(q, kv, prefix, padding):
        out, _ = F.multi_head_attention_forward(
            q, kv, kv, C, HEADS,
            sd[prefix + ".in_proj_weight"], sd[prefix + ".in_proj_bias"], None, None, False, 0.0,
            sd[prefix + ".out_proj.weight"], sd[prefix + ".out_proj.bias"],
            training=False, key_padding_mask=padding, need_weights=False,
        )  # fmt: skip
        return out

    def ffn(x, prefix):
        hidden = F.gelu(F.linear(x, sd[prefix + ".fc1.weight"], sd[prefix + ".fc1.bias"]))
        return F.linear(hidden, sd[prefix + ".fc2.weight"], sd[prefix + ".fc2.bias"])

    def positions(tokens):
        real = tokens.ne(PAD).long()
        return torch.cumsum(real, 1) * real + PAD

    batch = src.size(0)
    lengths = sd["encoder.embed_lengths.weight"]  # POSITIONS x C
    x = (
        sd["encoder.embed_tokens.weight"][src]
        + sd["encoder.embed_positions.weight"][positions(src)]
    )  # B x S x C, no embedding scale
    x = torch.cat([lengths[0].expand(batch, 1, C), x], 1).transpose(0, 1)  # (S+1) x B x C
    padding = torch.cat([torch.zeros(batch, 1, dtype=torch.bool), src.eq(PAD)], 1)
    for i in range(LAYERS):
        p = f"encoder.layers.{i}"
        x = norm(x + attend(x, x, p + ".self_attn", padding), p + ".layer_norms.0")
        x = norm(x + ffn(x, p), p + ".layer_norms.1")
    length_logits = x[0] @ lengths.T  # B x POSITIONS
    length_logits[:, 0] = -math.inf
    encoder_out = x[1:]  # S x B x C
    length_logprobs = F.log_softmax(length_logits, -1)
    if tgt is None:
        return encoder_out.transpose(0, 1), length_logprobs, None

    embed = sd["decoder.embed_tokens.weight"]
    y = (embed[tgt] + sd["decoder.embed_positions.weight"][positions(tgt)]).transpose(0, 1)
    for i in range(LAYERS):
        p = f"decoder.layers.{i}"
        y = norm(y + attend(y, y, p + ".self_attn", tgt.eq(PAD)), p + ".self_attn_layer_norm")
        y = norm(
            y + attend(y, encoder_out, p + ".encoder_attn", src.eq(PAD)),
            p + ".encoder_attn_layer_norm",
        )
        y = norm(y + ffn(y, p), p + ".final_layer_norm")
    logits = y.transpose(0, 1) @ sd.get("decoder.embed_out", embed).T  # B x T x V
    return encoder_out.transpose(0, 1), length_logprobs, logits


def pad_rows(rows, left=False):
    """``B x S`` right- (or left-) padded tensor of the lists ``rows``."""
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), PAD)
    for i, r in enumerate(rows):
        if left:
            out[i, width - len(r) :] = torch.tensor(r)
        else:
            out[i, : len(r)] = torch.tensor(r)
    return out


# our ids: words 4..V-2 (V-2 the last word), <unk> 3, sources end with </s> as binarized
SOURCES = [[5, 9, V - 2, 3, 20, 7, EOS], [4, 11, EOS], [30, 6, 8, 12, EOS]]
TARGETS = [[MASK, 12, MASK, MASK, 4], [MASK, MASK, V - 2], [MASK, MASK, MASK, MASK, MASK, MASK]]


def original_ids(rows, append_eos=False):
    return [[TO_ORIGINAL[t].item() for t in r] + ([EOS] if append_eos else []) for r in rows]


def max_diff(a, b):
    return (a - b).abs().max().item()


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny tensors: a second OpenMP thread only waits for a busy core (100x slower here)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def convert(tmp_path, state, data_dir, name="original"):
    """Convert ``state`` with ``convert_checkpoint``; return the converted file."""
    source = write_original(tmp_path / f"{name}.pt", state)
    out = str(tmp_path / f"{name}-converted.pt")
    convert_checkpoint("mask-predict", source, out, data_dir, source_lang="src", target_lang="tgt")
    return out


@pytest.fixture(scope="module", params=LAYOUTS)
def converted(request, tmp_path_factory, data_dir):
    """(original state, our model loaded as fairseq-generate loads it, the task)."""
    from fairseq import checkpoint_utils

    import cmlm_plugin  # noqa: F401  (registers the task and model)

    state = original_state(request.param)
    out = convert(tmp_path_factory.mktemp(request.param), state, data_dir)
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [out], arg_overrides={"data": data_dir}
    )
    return state, models[0].eval(), task


@pytest.mark.parametrize("left_pad", [True, False])
def test_encoder_states_and_length_logprobs_match_the_original(converted, left_pad):
    state, model, task = converted
    assert len(task.target_dictionary) == V and task.target_dictionary.index("<mask>") == MASK
    src = pad_rows(SOURCES, left=left_pad)
    with torch.no_grad():
        encoder_out = model.encoder(src, src_lengths=src.ne(PAD).sum(1))
        length = model.predict_length(encoder_out)
    ours = encoder_out["encoder_out"][0].transpose(0, 1)  # B x S x C
    ref_src = pad_rows(original_ids(SOURCES))
    for eps, atol in ((1e-12, ORIGINAL_ATOL), (1e-5, EXACT_ATOL)):
        ref_states, ref_lengths, _ = reference(state, ref_src, eps=eps)
        # the real positions, sentence by sentence, in order
        diff = max_diff(ours[src.ne(PAD)], ref_states[ref_src.ne(PAD)])
        assert diff < atol, f"encoder states, eps {eps}: max abs diff {diff}"
        diff = max_diff(length["logprobs"][:, :-1], ref_lengths[:, 1:])  # class c = original c+1
        assert diff < atol, f"length log-probs, eps {eps}: max abs diff {diff}"
    assert (length["logprobs"][:, -1] < -1e3).all()  # no original class means POSITIONS - 1 words
    assert length["class_lengths"][0].tolist() == list(range(POSITIONS))  # class c = c words


def test_decoder_logits_match_the_original_with_the_vocabulary_reordered(converted):
    state, model, _ = converted
    src = pad_rows(SOURCES, left=True)  # as our task pads sources
    tgt = pad_rows(TARGETS)  # our decoder input: no </s>, right-padded
    with torch.no_grad():
        encoder_out = model.encoder(src, src_lengths=src.ne(PAD).sum(1))
        ours = model.decoder_logits(tgt, encoder_out)  # B x T x V
    assert ours.shape == (*tgt.shape, V)
    ref_tgt = pad_rows(original_ids(TARGETS, append_eos=True))  # y1..yn </s>, original ids
    real = tgt.ne(PAD)
    for eps, atol in ((1e-12, ORIGINAL_ATOL), (1e-5, EXACT_ATOL)):
        _, _, ref = reference(state, pad_rows(original_ids(SOURCES)), ref_tgt, eps=eps)
        ref = ref[:, : tgt.size(1)][:, :, TO_ORIGINAL]  # our positions, our vocabulary order
        diff = max_diff(ours[real], ref[real])
        assert diff < atol, f"decoder logits, eps {eps}: max abs diff {diff}"


def test_every_original_weight_reaches_the_converted_model(converted):
    """No silent drops: the mapping gives exactly the model's weights, and every original
    value appears among them (checked on float32 weights: fp16 values repeat by chance)."""
    state, model, _ = converted
    weights, framing = from_mask_predict(state, V)
    assert framing == {"decoder_frame": "eos", "length_source": "length-token"}
    ours = model.state_dict()
    assert set(weights) == set(ours) - {"encoder.version", "decoder.version"}
    if state["encoder.embed_tokens.weight"].dtype == torch.float32:
        values = torch.cat([v.flatten().float() for v in ours.values()])
        for key, value in state.items():
            if not key.endswith(".version"):
                assert torch.isin(value.flatten(), values).all(), f"{key} was dropped"
    assert all(v.dtype == torch.float32 for v in ours.values())


@pytest.mark.parametrize(
    "key",
    [
        "encoder.layers.0.self_attn.in_proj_weight",
        "decoder.layers.0.final_layer_norm.gamma",
        "decoder.embed_tokens.weight",
        "encoder.embed_lengths.weight",
    ],
)
def test_a_missing_weight_is_a_one_line_error(tmp_path, data_dir, key):
    state = original_state("separate")
    del state[key]
    with pytest.raises(CMLMPluginError) as error:
        convert(tmp_path, state, data_dir)
    message = str(error.value)
    assert "\n" not in message
    assert key.rsplit(".", 1)[0] in message or "embed_lengths" in message, message


def test_a_dictionary_of_another_size_is_a_one_line_error(tmp_path):
    text = "".join(f"{w} 1\n" for w in WORDS[:-1])  # one word fewer than the model's
    for lang in ("src", "tgt"):
        (tmp_path / f"dict.{lang}.txt").write_text(text)
    with pytest.raises(CMLMPluginError, match="dictionary") as error:
        convert(tmp_path, original_state("separate"), str(tmp_path))
    assert "\n" not in str(error.value)


def test_console_command_output_decodes_with_fairseq_generate(tmp_path):
    from cli import hypotheses, preprocess, run
    from toydata import write_transduction

    write_transduction(tmp_path / "raw", {"train": 8, "test": 3}, seed=1, vocab=5)
    preprocess(tmp_path / "raw", tmp_path / "bin", splits=("train", "test"))
    with open(tmp_path / "bin" / "dict.src.txt") as f:
        words = sum(1 for _ in f)
    source = write_original(tmp_path / "original.pt", original_state(vocab=5 + words))
    out = tmp_path / "converted.pt"
    one_thread = {"OMP_NUM_THREADS": "1"}
    run("cmlm-convert", "mask-predict", source, out, "--data", tmp_path / "bin", env=one_thread)
    output = run(
        "fairseq-generate", tmp_path / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm",
        "--path", out, "--gen-subset", "test", "--batch-size", "3", "--cpu",
        env=one_thread,
    )  # fmt: skip
    assert "<unk>" not in output  # the test words are in the dictionary
    assert sorted(hypotheses(output)) == [0, 1, 2], output[-2000:]
