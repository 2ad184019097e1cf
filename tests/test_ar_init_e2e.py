"""End-to-end: ``fairseq-train --task cmlm --init-from-ar AR_CKPT`` on the shared tiny data.

A tiny autoregressive ``transformer`` of ``cmlm_plugin_tiny``'s sizes is trained a few
updates with fairseq-train (``--task translation``, so its dictionary lacks ``<mask>``);
a CMLM starts from it, logs what was copied, and decodes with fairseq-generate after the
teacher's file is gone (a loaded model never reads it).
"""

import shutil

from cli import fails, hypotheses, run
from conftest import N_TEST
from test_bad_input_e2e import assert_matches_readme

AR = [
    "--task", "translation", "--arch", "transformer", "--encoder-layers", 2,
    "--decoder-layers", 2, "--encoder-embed-dim", 64, "--decoder-embed-dim", 64,
    "--encoder-ffn-embed-dim", 128, "--decoder-ffn-embed-dim", 128,
    "--encoder-attention-heads", 2, "--decoder-attention-heads", 2, "--share-all-embeddings",
    "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", 1000, "--max-update", 5,
    "--cpu", "--no-epoch-checkpoints", "--no-save-optimizer-state", "--seed", 2,
]  # fmt: skip


def train_cmlm(data, save, *extra):
    return run(
        "fairseq-train", data, "--user-dir", "cmlm_plugin", "--task", "cmlm",
        "--arch", "cmlm_plugin_tiny", "--activation-fn", "relu", "--criterion",
        "cmlm_plugin_loss", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", 1000,
        "--save-dir", save, "--cpu", "--no-epoch-checkpoints", "--seed", 2, *extra,
    )  # fmt: skip


def test_a_cmlm_starts_from_an_ar_model_and_decodes_without_it(tiny_run, tmp_path):
    run("fairseq-train", tiny_run / "bin", *AR, "--save-dir", tmp_path / "ar")
    teacher = tmp_path / "ar" / "checkpoint_last.pt"
    out = train_cmlm(
        tiny_run / "bin", tmp_path / "cmlm", "--max-update", 3, "--init-from-ar", teacher
    )
    assert f"--init-from-ar {teacher}: copied " in out
    assert "positions from its sinusoidal table" in out and "warning" not in out
    shutil.move(teacher, tmp_path / "moved.pt")
    generated = run(
        "fairseq-generate", tiny_run / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm",
        "--path", tmp_path / "cmlm" / "checkpoint_last.pt", "--gen-subset", "test", "--cpu",
        "--batch-size", 8, "--iter-decode-max-iter", 2,
    )  # fmt: skip
    assert sorted(hypotheses(generated)) == list(range(N_TEST))
    # resuming needs the file (fairseq builds the model first): a clear error, no lost state
    error = fails(
        *["fairseq-train", tiny_run / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm"],
        *["--arch", "cmlm_plugin_tiny", "--criterion", "cmlm_plugin_loss", "--cpu"],
        *["--max-tokens", 1000, "--max-update", 4, "--save-dir", tmp_path / "cmlm"],
        *["--init-from-ar", teacher],
    )
    assert f"--init-from-ar {teacher}: no such checkpoint file" in error
    assert_matches_readme("init-ar-missing", error)
    assert (tmp_path / "cmlm" / "checkpoint_last.pt").exists()
    resumed = train_cmlm(tiny_run / "bin", tmp_path / "cmlm", "--max-update", 4)
    assert "num_updates 4" in resumed or "num_updates=4" in resumed


def test_a_teacher_of_other_sizes_stops_the_training_naming_the_tensor(tiny_run, tmp_path):
    other = [a if a != 128 else 64 for a in AR]  # FFN 64 instead of the CMLM's 128
    run("fairseq-train", tiny_run / "bin", *other, "--max-update", 1, "--save-dir", tmp_path / "ar")
    error = fails(
        *["fairseq-train", tiny_run / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm"],
        *["--arch", "cmlm_plugin_tiny", "--criterion", "cmlm_plugin_loss", "--cpu"],
        *["--max-tokens", 1000, "--max-update", 1, "--save-dir", tmp_path / "cmlm"],
        *["--init-from-ar", tmp_path / "ar" / "checkpoint_last.pt"],
    )
    assert_matches_readme("init-ar-shape", error)
    assert "encoder.layers.0.fc1.weight is (64, 64), this model's (128, 64)" in error
    assert not (tmp_path / "cmlm" / "checkpoint_last.pt").exists()


def test_the_causal_sublayer_model_trains_from_an_ar_model_and_decodes(tiny_run, tmp_path):
    """``--insert-causal-attn`` through the real commands: the copy fills the added
    sublayers, the checkpoint rebuilds them, and both decoding paths agree."""
    run("fairseq-train", tiny_run / "bin", *AR, "--save-dir", tmp_path / "ar")
    teacher = tmp_path / "ar" / "checkpoint_last.pt"
    out = train_cmlm(
        tiny_run / "bin", tmp_path / "cmlm", "--max-update", 2, "--init-from-ar", teacher,
        "--insert-causal-attn",
    )  # fmt: skip
    assert "kept at initialisation: length_head" in out
    outputs = [
        hypotheses(
            run(
                "fairseq-generate", tiny_run / "bin", "--user-dir", "cmlm_plugin", "--task",
                "cmlm", "--path", tmp_path / "cmlm" / "checkpoint_last.pt", "--gen-subset",
                "test", "--cpu", "--batch-size", 8, "--iter-decode-max-iter", 3,
                "--decoder-impl", impl,
            )  # fmt: skip
        )
        for impl in ("fast", "modules")
    ]
    assert sorted(outputs[0]) == list(range(N_TEST))
    assert outputs[0] == outputs[1]
