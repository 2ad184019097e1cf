"""Component tests: the fast decoder path equals fairseq's module forward.

``FastDecoder`` (cross-attention keys/values once per sentence, packed projections)
must give the logits of ``model.decoder_logits`` on encoder states expanded to every
candidate, for every decoder framing and for pre-norm layers; the generator must
decode the same hypotheses with ``--decoder-impl fast`` and ``modules`` (and
``compiled``, the fast path through ``torch.compile``, the same tokens as ``fast``); ``int8``
stays close to the float model; ``int8`` and ``compiled`` refuse what they cannot run.
"""

import argparse

import pytest
import torch
from test_bad_input_e2e import assert_matches_readme
from tinymodel import sample_for, setup

from cmlm_plugin.errors import CMLMPluginError
from cmlm_plugin.models.fast_decoder import FastDecoder, Linear, unsupported
from cmlm_plugin.models.fast_encoder import FastEncoder
from cmlm_plugin.models.inference import ModulePath, inference_path

CPU = torch.device("cpu")

VARIANTS = [
    (),
    ("--decoder-frame", "bos-eos"),
    ("--decoder-frame", "eos", "--length-source", "length-token"),
    ("--decoder-normalize-before", "--encoder-normalize-before"),
    ("--no-scale-embedding", "--layernorm-embedding"),
    ("--insert-causal-attn",),
    ("--insert-causal-attn", "--decoder-normalize-before", "--decoder-frame", "bos-eos"),
]
SOURCES = ["w1 w2 w3", "w4", "w5 w6 w7 w8 w9", "w10 w11"]
TARGETS = ["w1", "w2", "w3", "w4"]


def tiny_model(data_dir, *extra, seed=0):
    torch.manual_seed(seed)
    task, model, _ = setup(data_dir, *extra)
    return task, model.eval()


def random_inputs(task, rows, width, seed=1):
    """``rows x width`` tokens with <mask>s, right-padded rows, and a position selection."""
    g = torch.Generator().manual_seed(seed)
    d = task.tgt_dict
    tokens = torch.randint(d.nspecial, len(d) - 1, (rows, width), generator=g)  # n x L
    tokens[torch.rand(rows, width, generator=g) < 0.5] = task.mask_idx
    lengths = torch.randint(1, width + 1, (rows,), generator=g)
    lengths[0] = width
    tokens[torch.arange(width)[None, :] >= lengths[:, None]] = d.pad()
    where = tokens.eq(task.mask_idx)  # n x L
    return tokens, where


@pytest.mark.parametrize("extra", VARIANTS, ids=lambda e: " ".join(e) or "paper")
def test_fast_logits_equal_the_module_forward(data_dir, extra):
    task, model = tiny_model(data_dir, *extra)
    assert unsupported(model.decoder) is None
    sample = sample_for(task, SOURCES, TARGETS)
    sentences = torch.tensor([2, 0, 0, 1, 3, 2])  # candidates' sentences, repeated
    tokens, where = random_inputs(task, sentences.numel(), 7)
    with torch.no_grad():
        net = sample["net_input"]
        encoder_out = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"])
        expanded = model.encoder.reorder_encoder_out(encoder_out, sentences)
        fast = FastDecoder(model)
        cache = fast.prepare(encoder_out)
        for selection in (None, where):
            expected = model.decoder_logits(tokens, expanded, selection)
            got = fast.logits(tokens, cache, sentences, selection)
            assert got.shape == expected.shape
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("extra", VARIANTS, ids=lambda e: " ".join(e) or "paper")
def test_fast_encoder_equals_the_module_encoder_or_steps_aside(data_dir, extra):
    task, model = tiny_model(data_dir, *extra)
    fast = FastEncoder.build(model.encoder)
    if "length-token" in extra:  # the LENGTH-token encoder runs as fairseq's module
        assert fast is None
        return
    net = sample_for(task, SOURCES, TARGETS)["net_input"]
    with torch.no_grad():
        expected = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"])
        got = fast(net["src_tokens"], net["src_lengths"])
    keep = ~expected["encoder_padding_mask"][0]  # B x S
    assert torch.equal(got["encoder_padding_mask"][0], expected["encoder_padding_mask"][0])
    states = [out["encoder_out"][0].transpose(0, 1)[keep] for out in (got, expected)]
    torch.testing.assert_close(*states, rtol=1e-4, atol=1e-5)  # real positions
    torch.testing.assert_close(got["src_lengths"][0], expected["src_lengths"][0])
    torch.testing.assert_close(model.length_logits(got), model.length_logits(expected))


def test_the_fast_path_encodes_once_and_never_calls_the_module_encoder(data_dir, monkeypatch):
    task, model = tiny_model(data_dir)
    calls = []
    original = FastEncoder.__call__

    def counting(self, src_tokens, src_lengths=None):
        calls.append(src_tokens.size(0))
        return original(self, src_tokens, src_lengths)

    monkeypatch.setattr(FastEncoder, "__call__", counting)
    monkeypatch.setattr(model.encoder, "forward", None)  # calling the module would fail
    hypos = decode(task, model, "fast")
    assert calls == [len(SOURCES)] and len(hypos) == len(SOURCES)


def decode(task, model, impl, **extra):
    args = argparse.Namespace(iter_decode_max_iter=4, iter_decode_with_beam=3, **extra)
    gen = task.build_generator([model], args)
    gen.decoder_impl = impl
    return task.inference_step(gen, [model], sample_for(task, SOURCES, TARGETS))


@pytest.mark.parametrize(
    "extra",
    [
        (),
        ("--decoder-frame", "bos-eos"),
        ("--decoding", "diffusion", "--cfg-scale", "1.5"),
        ("--insert-causal-attn",),
    ],
    ids=["mask-predict", "bos-eos", "guided-diffusion", "causal-sublayer"],
)
def test_generator_decodes_the_same_with_fast_and_modules(data_dir, extra):
    task, model = tiny_model(data_dir, *extra)
    fast, modules = decode(task, model, "fast"), decode(task, model, "modules")
    for (a,), (b,) in zip(fast, modules):
        assert a["tokens"].tolist() == b["tokens"].tolist()
        assert a["steps"] == b["steps"]
        torch.testing.assert_close(a["positional_scores"], b["positional_scores"])


def test_int8_linear_error_is_bounded_by_the_weight_step():
    torch.manual_seed(0)
    weight, bias, x = torch.randn(48, 32), torch.randn(48), torch.randn(5, 32)
    exact = torch.nn.functional.linear(x, weight, bias)
    got = Linear(weight, bias, int8=True)(x)
    # weights: per-row step max|w|/127; activations: 7 bits over their range
    bound = (weight.abs().amax(1) / 127 * x.abs().sum(1, keepdim=True)).max()
    bound = bound + (x.max() - x.min()) / 127 * weight.abs().sum(1).max()
    assert (got - exact).abs().max() <= bound
    assert (got - exact).abs().max() > 0  # it is a different computation


def test_int8_decoding_stays_close_to_float(data_dir):
    task, model = tiny_model(data_dir)
    sample = sample_for(task, SOURCES, TARGETS)
    sentences = torch.arange(len(SOURCES))
    tokens, where = random_inputs(task, len(SOURCES), 6)
    with torch.no_grad():
        net = sample["net_input"]
        encoder_out = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"])
        results = []
        for int8 in (False, True):
            fast = FastDecoder(model, int8=int8)
            results.append(fast.logits(tokens, fast.prepare(encoder_out), sentences, where))
    exact, quantized = results
    scale = exact.abs().max()
    assert (quantized - exact).abs().max() < 0.05 * scale
    hypos = decode(task, model, "int8")
    assert all(task.mask_idx not in h[0]["tokens"].tolist() for h in hypos)


def test_int8_requantizes_after_an_in_place_update(data_dir):
    task, model = tiny_model(data_dir)
    first = inference_path(model, "int8", CPU).decoder
    assert inference_path(model, "int8", CPU).decoder is first  # cached
    with torch.no_grad():
        model.decoder.layers[0].fc1.weight.mul_(2.0)
    assert inference_path(model, "int8", CPU).decoder is not first


def test_unsupported_layers_fall_back_to_modules_and_int8_refuses(data_dir):
    task, model = tiny_model(data_dir)
    model.decoder.layers[0].attn_ln = torch.nn.LayerNorm(model.decoder.embed_dim)
    assert "NormFormer" in unsupported(model.decoder)
    assert isinstance(inference_path(model, "fast", CPU), ModulePath)  # modules
    with pytest.raises(CMLMPluginError, match="decoder-impl modules"):
        inference_path(model, "int8", CPU)


def test_int8_refuses_a_gpu_device(data_dir):
    task, model = tiny_model(data_dir)
    with pytest.raises(CMLMPluginError, match="CPU only") as error:
        inference_path(model, "int8", torch.device("cuda"))
    assert_matches_readme("int8-gpu", f"cmlm_plugin error: {error.value}")  # docs/reliability.md


def test_decoder_impl_flag_reaches_the_generator(data_dir):
    task, model = tiny_model(data_dir, "--decoder-impl", "modules")
    gen = task.build_generator([model], argparse.Namespace(iter_decode_max_iter=2))
    assert gen.decoder_impl == "modules"
    task, model = tiny_model(data_dir)
    assert task.build_generator([model], argparse.Namespace()).decoder_impl == "fast"


def test_int8_without_torch_quantized_kernels_names_the_fix(monkeypatch):
    import cmlm_plugin.models.fast_decoder as fast_decoder

    monkeypatch.setattr(fast_decoder, "_LINEAR_INT8", None)
    with pytest.raises(CMLMPluginError, match="use --decoder-impl fast"):
        Linear(torch.randn(4, 3), None, int8=True)


def test_int8_refuses_a_half_precision_model(data_dir):
    task, model = tiny_model(data_dir)
    model = model.to(torch.bfloat16)
    with pytest.raises(CMLMPluginError, match="drop --fp16/--bf16"):
        inference_path(model, "int8", CPU)


def test_bucket_sizes_cover_and_stay_few():
    from cmlm_plugin.models.compiled_decoder import bucket, length_bucket

    sizes = (1, 2, 3, 5, 8, 9, 17, 128, 129)
    assert [bucket(n) for n in sizes] == [1, 2, 4, 8, 8, 16, 24, 128, 136]
    assert [bucket(n, step=1) for n in sizes] == list(sizes)  # a CPU pads nothing
    assert [length_bucket(n) for n in (1, 8, 9, 40, 41)] == [8, 8, 16, 40, 48]
    assert len({bucket(n) for n in range(1, 257)}) == 35  # 4 powers of two, 31 multiples of 8


@pytest.mark.parametrize(
    "extra", [(), ("--decoding", "diffusion", "--cfg-scale", "1.5")], ids=["mask-predict", "guided"]
)
def test_compiled_decodes_the_same_tokens_as_fast(data_dir, extra):
    task, model = tiny_model(data_dir, *extra)
    fast, compiled = decode(task, model, "fast"), decode(task, model, "compiled")
    for (a,), (b,) in zip(fast, compiled):
        assert a["tokens"].tolist() == b["tokens"].tolist()
        assert a["steps"] == b["steps"]
        torch.testing.assert_close(a["positional_scores"], b["positional_scores"])
    path = inference_path(model, "compiled", CPU)
    assert type(path).__name__ == "CompiledPath"  # cached on the model, never modules


def test_bucketed_compiled_logits_equal_the_fast_path(data_dir):
    """CUDA's bucketing (rows, target and source lengths padded to 8s), run on a CPU."""
    from cmlm_plugin.models.compiled_decoder import CompiledDecoder

    task, model = tiny_model(data_dir, "--decoder-frame", "bos-eos")
    sample = sample_for(task, SOURCES, TARGETS)
    sentences = torch.tensor([2, 0, 0, 1, 3])  # 5 rows -> 8
    tokens, where = random_inputs(task, sentences.numel(), 7)  # L = 7 -> 8
    fast, compiled = FastDecoder(model), CompiledDecoder(model, CPU, step=8)
    with torch.no_grad():
        net = sample["net_input"]
        encoder_out = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"])
        cache = compiled.prepare(encoder_out)
        for selection in (where, None):
            expected = fast.logits(tokens, fast.prepare(encoder_out), sentences, selection)
            got = compiled.logits(tokens, cache, sentences, selection)
            assert got.shape == expected.shape
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert compiled.shapes == {(8, 8, 4, 8)}  # rows, length, sentences, source length


def test_compiled_refuses_without_a_cxx_compiler(data_dir, monkeypatch):
    import cmlm_plugin.models.compiled_decoder as compiled_decoder

    task, model = tiny_model(data_dir)
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(compiled_decoder.shutil, "which", lambda name: None)
    with pytest.raises(CMLMPluginError, match="needs a C.. compiler: install g"):
        inference_path(model, "compiled", CPU)


def test_a_failing_compile_names_the_fix_and_never_falls_back(data_dir):
    import torch._dynamo.exc

    from cmlm_plugin.models.compiled_decoder import CompiledDecoder

    task, model = tiny_model(data_dir)
    compiled = CompiledDecoder(model, CPU)

    def broken(*args):
        raise torch._dynamo.exc.TorchDynamoException("inductor crashed\nmore lines")

    compiled.trunk = broken
    sample = sample_for(task, SOURCES, TARGETS)
    tokens, where = random_inputs(task, len(SOURCES), 6)
    with torch.no_grad():
        net = sample["net_input"]
        cache = compiled.prepare(model.encoder(net["src_tokens"], src_lengths=net["src_lengths"]))
        with pytest.raises(CMLMPluginError, match="inductor crashed.*use --decoder-impl fast"):
            compiled.logits(tokens, cache, torch.arange(len(SOURCES)), where)


def test_compiled_refuses_what_the_fast_path_cannot_evaluate(data_dir):
    task, model = tiny_model(data_dir)
    model.decoder.layers[0].attn_ln = torch.nn.LayerNorm(model.decoder.embed_dim)
    with pytest.raises(CMLMPluginError, match="compiled cannot evaluate.*decoder-impl modules"):
        inference_path(model, "compiled", CPU)


def test_loading_the_plugin_leaves_torch_dynamo_unimported():
    """Commands that never compile (fairseq-generate, -interactive, the plugin's tools) do
    not pay for importing ``torch._dynamo`` (about 2 s of every command's start)."""
    from cli import run_python

    run_python(
        "import sys, argparse, fairseq.utils\n"
        "assert 'torch._dynamo' not in sys.modules, 'fairseq itself imported it'\n"
        "fairseq.utils.import_user_module(argparse.Namespace(user_dir='cmlm_plugin'))\n"
        "import cmlm_plugin.models.compiled_decoder\n"
        "assert 'torch._dynamo' not in sys.modules, 'the plugin imported it'\n"
        "print('NO-DYNAMO')\n",
        "NO-DYNAMO",
    )
