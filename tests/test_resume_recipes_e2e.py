"""End-to-end: a recipe rerun on a finished training decodes again and trains no further.

fairseq-train resumed from a checkpoint that already holds ``--max-update`` updates takes
one more update before it checks the bound, and overwrites ``checkpoint_last.pt`` with it:
on 2026-12-02 a rerun of ``train-multi30k-best.sh`` moved its finished teacher from 3000 to
3001 updates (beam 5 36.40 -> 36.82) before distilling. ``resume-common.sh`` reads the
count and ``resume_point`` turns it into the flag that stops fairseq-train before its first
update, as quickstart.sh, ``train-multi30k-ar.sh`` and ``train-multi30k-best.sh`` use it.
"""

from cli import fails, run
from conftest import ROOT

RECIPES = ROOT / "examples/translation"


def updates(checkpoint) -> int:
    out = run("bash", "-c", f'. "{RECIPES}/resume-common.sh" && checkpoint_updates "{checkpoint}"',
              stdout_only=True)  # fmt: skip
    return int(out.strip().splitlines()[-1])


def test_checkpoint_updates_reads_the_count_and_is_zero_without_a_file(tiny_run, tmp_path):
    assert updates(tiny_run / "ckpt/checkpoint_last.pt") == 12
    assert updates(tmp_path / "none.pt") == 0


def test_a_finished_autoregressive_training_is_only_decoded_again(tiny_run, tmp_path):
    data, save = tmp_path / "data", tmp_path / "ar"
    data.mkdir()
    (data / "bin").symlink_to(tiny_run / "bin")
    script = RECIPES / "train-multi30k-ar.sh"
    env = {"MAX_UPDATE": "2", "BEAMS": "5"}  # one beam: the decode is not what is tested
    first = run("bash", script, data, save, env=env, stdout_only=True)
    assert "decoding only" not in first and "beam 5:" in first
    last = save / "checkpoint_last.pt"
    assert updates(last) == 2
    trained = last.read_bytes()
    again = run("bash", script, data, save, env=env, stdout_only=True)
    assert "already holds 2 updates (MAX_UPDATE=2): decoding only" in again
    assert "beam 5:" in again and last.read_bytes() == trained  # not one update more


def test_a_checkpoint_that_does_not_load_stops_the_recipe_and_is_kept(tmp_path):
    save = tmp_path / "ar"
    save.mkdir()
    broken = save / "checkpoint_last.pt"
    broken.write_bytes(b"not a checkpoint")
    script = RECIPES / "train-multi30k-ar.sh"
    error = fails("bash", script, tmp_path / "data", save, env={"MAX_UPDATE": "2"})
    assert error == f"error: {broken} does not load (see above): delete it to train from scratch"
    assert broken.read_bytes() == b"not a checkpoint"
    error = fails("bash", script, tmp_path / "data", save, env={"BEAMS": "1 x"})
    assert error == """error: BEAMS must be beam sizes (positive integers, e.g. "1 5"), got '1 x'"""
