"""``--init-from-ar``: a new CMLM starts from an autoregressive model's weights.

Unit tests of the copy on hand-built state dicts (rows, kept keys, refused shapes), and
component tests on the tiny CMLM with a tiny fairseq ``transformer`` of the same sizes
built in-process on the same 30-word dictionary: after the copy both encoders compute
the same states, the length head and the ``<mask>`` row keep their initialisation, the
task copies only into a new model, and bad teachers stop with one-line errors.
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_rerank_components import save
from tinymodel import config, encode, setup

from cmlm_plugin.errors import CMLMPluginError
from cmlm_plugin.training.ar_init import copy_autoregressive, init_from_autoregressive

# the sizes of cmlm_plugin_tiny, for the fairseq transformer
AR_AS_TINY = [
    "--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "64",
    "--decoder-embed-dim", "64", "--encoder-ffn-embed-dim", "128", "--decoder-ffn-embed-dim",
    "128", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
    "--share-all-embeddings",
]  # fmt: skip


def test_rows_are_copied_for_the_symbols_both_have_and_own_parts_are_kept():
    ours = {
        "encoder.embed_tokens.weight": torch.zeros(5, 2),  # V x C, the last row <mask>
        "encoder.layers.0.fc1.weight": torch.zeros(3, 2),
        "length_head.proj.weight": torch.full((4, 2), 7.0),
    }
    theirs = {
        "encoder.embed_tokens.weight": torch.ones(4, 2),  # V_ar x C
        "encoder.layers.0.fc1.weight": torch.full((3, 2), 2.0),
        "encoder.version": torch.tensor([3.0]),  # fairseq's bookkeeping: ignored
    }
    state, kept = copy_autoregressive(ours, theirs)
    assert kept == ["length_head.proj.weight"]
    assert state["encoder.embed_tokens.weight"][:4].eq(1).all()
    assert state["encoder.embed_tokens.weight"][4].eq(0).all()  # <mask>: not in theirs
    assert state["encoder.layers.0.fc1.weight"].eq(2).all()
    assert state["length_head.proj.weight"].eq(7).all()
    assert ours["encoder.embed_tokens.weight"].eq(0).all()  # the inputs are not modified


@settings(max_examples=30, deadline=None)
@given(v_ar=st.integers(1, 12), extra=st.integers(0, 4), dim=st.integers(1, 4))
def test_row_copy_takes_exactly_the_shared_rows(v_ar, extra, dim):
    key = "decoder.embed_tokens.weight"
    ours, theirs = {key: torch.randn(v_ar + extra, dim)}, {key: torch.randn(v_ar, dim)}
    state, kept = copy_autoregressive(ours, theirs)
    assert kept == []
    assert torch.equal(state[key][:v_ar], theirs[key])
    assert torch.equal(state[key][v_ar:], ours[key][v_ar:])


@pytest.mark.parametrize(
    "theirs, expected",
    [
        ({"encoder.layers.0.fc1.weight": torch.zeros(4, 2)}, r"fc1.weight is \(4, 2\), this model's \(3, 2\)"),
        ({"encoder.layers.0.fc1.weight": torch.zeros(3, 2), "encoder.layers.1.fc1.weight": torch.zeros(3, 2)},
         "it has encoder.layers.1.fc1.weight, which this model lacks"),
        ({}, "it lacks encoder.layers.0.fc1.weight"),
        ({"encoder.layers.0.fc1.weight": torch.zeros(3, 2), "encoder.embed_tokens.weight": torch.zeros(4, 3)},
         r"embed_tokens.weight is \(4, 3\), this model's \(5, 2\)"),
    ],
)  # fmt: skip
def test_other_shapes_are_refused_naming_the_tensor(theirs, expected):
    ours = {"encoder.layers.0.fc1.weight": torch.zeros(3, 2)}
    if "encoder.embed_tokens.weight" in theirs:
        ours["encoder.embed_tokens.weight"] = torch.zeros(5, 2)
    with pytest.raises(CMLMPluginError, match=expected) as info:
        copy_autoregressive(ours, theirs)
    assert "\n" not in str(info.value) and "--init-from-ar" in str(info.value)


def teacher(data_dir, path, *extra, seed=3):
    """A tiny fairseq ``transformer`` of ``--task translation``, saved; and the model."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    argv = [data_dir, "--task", "translation", "--arch", "transformer", "-s", "src", "-t", "tgt"]
    args = options.parse_args_and_arch(
        options.get_training_parser(), argv + AR_AS_TINY + [*extra, "--cpu"]
    )
    cfg = convert_namespace_to_omegaconf(args)
    torch.manual_seed(seed)
    model = tasks.setup_task(cfg.task).build_model(cfg.model)
    return save(cfg, model, path), model.eval()


def test_after_the_copy_both_encoders_compute_the_same_states(data_dir, tmp_path, capfd):
    path, ar = teacher(data_dir, tmp_path / "ar.pt")
    task, model, _ = setup(data_dir, "--activation-fn", "relu")
    mask_row = model.encoder.embed_tokens.weight[task.mask_idx].clone()
    length_head = {k: v.clone() for k, v in model.length_head.state_dict().items()}
    report = init_from_autoregressive(model, path, task.src_dict, task.tgt_dict)
    assert report.startswith(f"--init-from-ar {path}: copied ")
    assert "positions from its sinusoidal table" in report and "length_head.proj.weight" in report
    assert "warning" not in capfd.readouterr().err  # same options on both sides
    model.eval()
    sources = encode(task, ["w1 w2 w3 w4", "w5 w6"])  # B x S, right-padded
    lengths = sources.ne(task.src_dict.pad()).sum(1)
    with torch.no_grad():
        theirs = ar.encoder(sources, src_lengths=lengths)["encoder_out"][0]  # S x B x C
        mine = model.encoder(sources, src_lengths=lengths)["encoder_out"][0]  # S x B x C
    assert torch.allclose(mine, theirs, atol=1e-5)
    assert torch.equal(model.encoder.embed_tokens.weight[task.mask_idx], mask_row)
    assert torch.equal(model.decoder.output_projection.weight[: len(task.tgt_dict) - 1],
                       ar.decoder.output_projection.weight)  # fmt: skip
    for key, value in model.length_head.state_dict().items():
        assert torch.equal(value, length_head[key])
    assert torch.equal(model.decoder.layers[1].fc2.weight, ar.decoder.layers[1].fc2.weight)


def test_another_activation_is_copied_with_a_warning(data_dir, tmp_path, capfd):
    path, _ = teacher(data_dir, tmp_path / "ar.pt")
    task, model, _ = setup(data_dir)  # the CMLM's own default: gelu
    init_from_autoregressive(model, path, task.src_dict, task.tgt_dict)
    err = capfd.readouterr().err
    assert "cmlm_plugin warning: --init-from-ar" in err
    assert "--activation-fn relu there, gelu here" in err


def test_the_task_copies_into_a_new_model_only(data_dir, tmp_path):
    path, ar = teacher(data_dir, tmp_path / "ar.pt")
    task, model, _ = setup(data_dir, "--activation-fn", "relu", "--init-from-ar", path)
    layer = model.encoder.layers[0].fc1.weight
    assert torch.equal(layer, ar.encoder.layers[0].fc1.weight)
    # a model built to load a checkpoint into (fairseq-generate, the hub) reads no teacher
    (tmp_path / "ar.pt").unlink()
    cfg = config(data_dir, "--init-from-ar", path)
    loaded = task.build_model(cfg.model, from_checkpoint=True)
    assert not torch.equal(loaded.encoder.layers[0].fc1.weight, ar.encoder.layers[0].fc1.weight)
    with pytest.raises(CMLMPluginError, match="no such checkpoint file.*drop --init-from-ar"):
        task.build_model(cfg.model)


def test_a_teacher_of_other_sizes_is_refused(data_dir, tmp_path):
    path, _ = teacher(data_dir, tmp_path / "ar.pt", "--encoder-ffn-embed-dim", "64")
    task, model, _ = setup(data_dir, "--activation-fn", "relu")
    with pytest.raises(CMLMPluginError) as info:
        init_from_autoregressive(model, path, task.src_dict, task.tgt_dict)
    message = str(info.value)
    assert "\n" not in message
    assert "encoder.layers.0.fc1.weight is (64, 64), this model's (128, 64)" in message


def test_a_cmlm_checkpoint_is_refused(data_dir, tmp_path):
    task, model, _ = setup(data_dir)
    path = save(config(data_dir), model, tmp_path / "cmlm.pt")
    with pytest.raises(CMLMPluginError, match="not an autoregressive encoder-decoder model"):
        init_from_autoregressive(model, path, task.src_dict, task.tgt_dict)
