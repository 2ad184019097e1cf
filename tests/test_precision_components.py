"""Half-precision paths of our own code on CPU (model, criterion, generator).

fairseq's CLI cannot train in half precision on a CPU: ``--fp16`` assumes CUDA and
``--bf16`` implies ``--tpu`` (torch_xla) on fairseq's main branch. These tests run
our model, loss and decoder in bfloat16 and float16 directly, so that a dtype
assumption in the plugin (a float32 constant, an ``-inf`` fill, a length head
that expects float32) shows up without a GPU.
"""

import argparse

import pytest
import torch
from tinymodel import sample_for, setup, write_dictionaries


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_training_step_and_decoding(tmp_path, dtype):
    torch.manual_seed(0)
    task, model, criterion = setup(write_dictionaries(tmp_path))
    model = model.to(dtype)
    sample = sample_for(task, ["w1 w2 w3", "w4 w5"], ["w6 w7 w8", "w9 w10 w11 w12"])
    sample = task.add_noise(sample)
    sample["net_input"]["prev_output_tokens"] = sample["prev_target"]
    loss, sample_size, logging = criterion(model, sample)
    loss.backward()
    assert torch.isfinite(loss) and loss.item() > 0
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(g.dtype == dtype and torch.isfinite(g).all() for g in grads)

    generator = task.build_generator(
        [model], argparse.Namespace(iter_decode_max_iter=3, iter_decode_with_beam=2)
    )
    hypos = task.inference_step(generator, [model], sample)
    for (hypo,) in hypos:
        body = hypo["tokens"][:-1]
        assert body.numel() >= 1 and not body.eq(task.mask_idx).any()
        assert torch.isfinite(hypo["positional_scores"]).all()


def test_compiled_path_decodes_a_bfloat16_model_like_fast(tmp_path):
    torch.manual_seed(0)
    task, model, _ = setup(write_dictionaries(tmp_path))
    model = model.eval().to(torch.bfloat16)
    sample = sample_for(task, ["w1 w2 w3", "w4 w5"], ["w6 w7 w8", "w9 w10 w11 w12"])
    outputs = []
    for impl in ("fast", "compiled"):
        args = argparse.Namespace(iter_decode_max_iter=3, iter_decode_with_beam=2)
        generator = task.build_generator([model], args)
        generator.decoder_impl = impl
        outputs.append(task.inference_step(generator, [model], sample))
    for (fast,), (compiled,) in zip(*outputs):
        assert torch.isfinite(compiled["positional_scores"]).all()
        assert not compiled["tokens"].eq(task.mask_idx).any()
        # bf16 rounding differs between fused and eager kernels: scores close, not equal
        torch.testing.assert_close(
            compiled["positional_scores"], fast["positional_scores"], rtol=0, atol=0.1
        )
