"""End-to-end: fairseq's own CMLM converted and decoded by us, cmlm-table, distill.sh.

A tiny fairseq ``cmlm_transformer`` (task ``translation_lev``) and a tiny autoregressive
``transformer`` are trained here with fairseq's own commands on the shared toy data.
Where Mask-Predict and fairseq's generator coincide (one length candidate, every pass
run: ``--iter-decode-force-max-iter``; fairseq's ``--iter-decode-max-iter k`` is k + 1
passes) the converted model must give fairseq's outputs token for token.
"""

import json
import shutil
import sys

import pytest
from cli import fails, hypotheses, invoke, run, tagged
from conftest import N_TEST, ROOT

TINY = [
    "--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "64",
    "--decoder-embed-dim", "64", "--encoder-ffn-embed-dim", "128", "--decoder-ffn-embed-dim",
    "128", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
    "--share-all-embeddings", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000",
    "--cpu", "--no-epoch-checkpoints", "--seed", "2", "--log-interval", "50",
]  # fmt: skip
# for the fixtures' trainings of 60-150 updates (about 25-60 epochs of the toy data): no
# validation and no epoch checkpoints; fairseq still saves checkpoint_last.pt at --max-update
QUIET = ["--disable-validation", "--save-interval", "1000"]
DECODE = ["--gen-subset", "test", "--batch-size", "8", "--required-batch-size-multiple", "1"]
DECODE += ["--cpu", "--iter-decode-with-beam", "1"]


@pytest.fixture(scope="module")
def fairseq_cmlm(tiny_run):
    """fairseq's cmlm_transformer trained 150 updates, and its conversion."""
    save = tiny_run / "fairseq-cmlm"
    run(
        "fairseq-train", tiny_run / "bin", "--user-dir", "cmlm_plugin",
        "--task", "translation_lev", "--noise", "random_mask", "--arch", "cmlm_transformer",
        "--encoder-learned-pos", "--decoder-learned-pos", "--activation-fn", "gelu",
        "--apply-bert-init", "--criterion", "nat_loss", "--label-smoothing", "0.1",
        "--length-loss-factor", "0.1", "--max-update", "150", "--save-dir", save, *TINY, *QUIET,
    )  # fmt: skip
    converted = tiny_run / "fairseq-cmlm-converted.pt"
    out = run(
        "cmlm-convert", "fairseq-cmlm", save / "checkpoint_last.pt", converted,
        "--data", tiny_run / "bin",
    )  # fmt: skip
    assert "decoder frame 'bos-eos'" in out
    return save / "checkpoint_last.pt", converted


def test_converted_fairseq_cmlm_decodes_exactly_like_fairseq(tiny_run, fairseq_cmlm):
    theirs, ours = fairseq_cmlm
    outputs = {}
    for passes in (1, 4):
        fairseq_out = hypotheses(
            run("fairseq-generate", tiny_run / "bin", "--user-dir", "cmlm_plugin",
                "--task", "translation_lev", "--path", theirs, *DECODE,
                "--iter-decode-max-iter", passes - 1, "--iter-decode-force-max-iter")  # fmt: skip
        )
        our_out = hypotheses(
            run("fairseq-generate", tiny_run / "bin", "--user-dir", "cmlm_plugin",
                "--task", "cmlm", "--path", ours, *DECODE, "--iter-decode-max-iter", passes)  # fmt: skip
        )
        assert len(fairseq_out) == N_TEST
        assert our_out == fairseq_out, f"T={passes}"
        outputs[passes] = our_out
    # the comparison has teeth: refinement changed some outputs of this model
    assert outputs[1] != outputs[4]


def test_cmlm_table_runs_every_system(tiny_run, fairseq_cmlm, tmp_path):
    theirs, ours = fairseq_cmlm
    report, table = tmp_path / "table.json", tmp_path / "table.md"
    out = run(
        "cmlm-table", tiny_run / "bin", "--cmlm", f"converted={ours}",
        "--fairseq-cmlm", f"fairseq={theirs}",
        "--iters", "1,3", "--length-beams", "1,2", "--configs", "T=3,l=2,shift=1",
        "--tokenized-bleu", "--pair", "wmt14-en-de",
        "--cpu", "--json", report, "--markdown", table, "--plot", tmp_path / "table.png",
    )  # fmt: skip
    rows = json.loads(report.read_text())
    assert len(rows) == 2 * 2 * 2 + 1  # fairseq's generator has no --length-shift
    assert [r["label"] for r in rows if r["config"] == "T=3,l=2,shift=1"] == ["converted"]
    assert all(r["sentences"] == N_TEST and r["sentences_per_s"] > 0 for r in rows)
    single = [r for r in rows if r["T"] == 1]
    assert all(r["passes"] == 1.0 for r in single)
    assert all(1.0 <= r["passes"] <= 3.0 for r in rows if r["T"] == 3)
    # fairseq's generator and ours on the same weights agree at l=1 (passes mapped T-1)
    by = {(r["label"], r["T"], r["l"]): r for r in rows}
    assert by["converted", 1, 1]["sacrebleu"] == by["fairseq", 1, 1]["sacrebleu"]
    assert "sacreBLEU signature: nrefs:1" in out
    assert table.read_text().count("\n| ") == len(rows) + 1  # header and one line per cell
    assert (tmp_path / "table.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def autoregressive(tiny_run):
    """fairseq's own transformer trained 60 updates on the toy data."""
    save = tiny_run / "ar"
    run(
        "fairseq-train", tiny_run / "bin", "--user-dir", "cmlm_plugin", "--task", "translation",
        "--arch", "transformer", "--criterion", "cross_entropy", "--max-update", "60",
        "--save-dir", save, *TINY, *QUIET,
    )  # fmt: skip
    return save / "checkpoint_last.pt"


def test_distill_replaces_training_targets_with_the_teachers(tiny_run, autoregressive, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(tiny_run / "bin", data / "bin")
    out = run(
        "bash", ROOT / "examples/translation/distill.sh", data, autoregressive, env={"BEAM": "2"}
    )  # fmt: skip
    distilled = tmp_path / "data-distill"
    sources = (distilled / "text/train.src").read_text().splitlines()
    targets = (distilled / "text/train.tgt").read_text().splitlines()
    originals = dict(zip((tiny_run / "raw/train.src").read_text().splitlines(),
                         (tiny_run / "raw/train.tgt").read_text().splitlines()))  # fmt: skip
    assert "distilled pairs" in out and len(sources) == len(targets) >= 290
    assert set(sources) <= set(originals)  # the sources are the training sources
    assert any(originals[s] != t for s, t in zip(sources, targets))  # the teacher's targets
    # the length report compares the teacher's targets with the originals, in pieces
    ratio = sum(len(t.split()) for t in targets) / sum(len(originals[s].split()) for s in sources)
    assert f"distilled/original target length: {ratio:.4f}" in out
    assert ("warning: the teacher's targets are" in out) == (ratio < 0.97)
    for split in ("valid", "test"):
        assert (distilled / f"bin/{split}.src-tgt.src.bin").exists()
    run(
        "fairseq-train", distilled / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm",
        "--arch", "cmlm_plugin_tiny", "--criterion", "cmlm_plugin_loss", "--optimizer", "adam",
        "--lr", "1e-3", "--max-tokens", "1000", "--max-update", "2", "--cpu",
        "--save-dir", tmp_path / "student", "--no-save",
    )  # fmt: skip


def read_nbest(generate_txt):
    """``{id: [hypothesis pieces, best first]}`` and ``{id: original target}`` of a
    fairseq-generate output."""
    nbest, originals = {}, {}
    for line in generate_txt.read_text().splitlines():
        tag, _, rest = line.partition("\t")
        if tag.startswith("H-"):
            nbest.setdefault(int(tag[2:]), []).append(rest.split("\t", 1)[1])
        elif tag.startswith("T-"):
            originals[int(tag[2:])] = rest
    return nbest, originals


def test_distill_interpolation_keeps_the_hypothesis_closest_to_the_original(
    tiny_run, autoregressive, tmp_path
):
    """INTERPOLATE=1: of the teacher's BEAM best, the target is the one of highest sentence
    BLEU against the original target (Kim & Rush's sequence-level interpolation). The tiny
    teacher's top hypothesis is its training target, so the test trains on targets replaced
    by the teacher's third best: those are then the closest, not the top."""
    from sacrebleu.metrics import BLEU

    script, env = ROOT / "examples/translation/distill.sh", {"BEAM": "3", "INTERPOLATE": "1"}
    first = tmp_path / "first"
    shutil.copytree(tiny_run / "bin", first / "bin")
    run("bash", script, first, autoregressive, env=env)
    nbest, _ = read_nbest(tmp_path / "first-distill/text/generate-train.txt")
    sources = (tiny_run / "raw/train.src").read_text().splitlines()
    assert sorted(nbest) == list(range(len(sources))) and all(len(h) == 3 for h in nbest.values())
    raw = tmp_path / "third"
    raw.mkdir()
    (raw / "train.src").write_text("\n".join(sources) + "\n")
    (raw / "train.tgt").write_text("\n".join(nbest[i][2] for i in sorted(nbest)) + "\n")
    run(
        "fairseq-preprocess", "--source-lang", "src", "--target-lang", "tgt",
        "--trainpref", raw / "train", "--validpref", tiny_run / "raw/valid",
        "--testpref", tiny_run / "raw/test", "--srcdict", tiny_run / "bin/dict.src.txt",
        "--joined-dictionary", "--destdir", tmp_path / "second/bin", "--workers", "1",
    )  # fmt: skip
    out = run("bash", script, tmp_path / "second", autoregressive, env=env)
    text = tmp_path / "second-distill/text"
    nbest, originals = read_nbest(text / "generate-train.txt")
    ids = sorted(i for i in nbest if any(h.strip() for h in nbest[i]))
    targets = (text / "train.tgt").read_text().splitlines()
    assert len(targets) == len(ids) >= 290

    def plain(pieces):  # the toy data has words, no sentencepiece markers
        assert "\u2581" not in pieces and "@@" not in pieces
        return pieces.strip()

    bleu = BLEU(effective_order=True)
    for i, target in zip(ids, targets):
        assert target in nbest[i]
        ref = [plain(originals[i])]
        scores = [bleu.sentence_score(plain(h), ref).score for h in nbest[i]]
        assert bleu.sentence_score(plain(target), ref).score == max(scores)
    changed = sum(target != nbest[i][0] for i, target in zip(ids, targets))
    assert changed > len(ids) // 2  # mostly the third best: the original of this data
    assert f"sequence-level interpolation: {changed} of {len(nbest)} targets" in out


def test_distill_refuses_a_bad_interpolate_value(tiny_run, autoregressive, tmp_path):
    script = ROOT / "examples/translation/distill.sh"
    line = fails("bash", script, tiny_run, autoregressive, env={"INTERPOLATE": "yes"})
    assert line.startswith("error: INTERPOLATE must be 0") and "got 'yes'" in line


def test_distill_with_an_ensemble_translates_with_the_members_together(
    tiny_run, autoregressive, tmp_path
):
    """TEACHER_CKPT ``a.pt:b.pt`` (fairseq's --path syntax): the targets come from the two
    teachers' joint beam search, whose hypotheses and scores are neither member's alone."""
    second = tmp_path / "ar-seed5"
    run(
        "fairseq-train", tiny_run / "bin", "--user-dir", "cmlm_plugin", "--task", "translation",
        "--arch", "transformer", "--criterion", "cross_entropy", "--max-update", "30",
        "--save-dir", second, *TINY, *QUIET, "--seed", "5",
    )  # fmt: skip
    ensemble = f"{autoregressive}:{second / 'checkpoint_last.pt'}"
    data = tmp_path / "data"
    shutil.copytree(tiny_run / "bin", data / "bin")
    out = run("bash", ROOT / "examples/translation/distill.sh", data, ensemble, env={"BEAM": "2"})
    assert "an ensemble of 2 teachers" in out

    def beam_search(path):  # the script's decoding of the training set: {id: score, pieces}
        return tagged(
            run("fairseq-generate", data / "bin", "--user-dir", "cmlm_plugin", "--task",
                "translation", "--path", path, "--gen-subset", "train", "--beam", "2",
                "--max-tokens", "8192", "--required-batch-size-multiple", "1", "--cpu",
                stdout_only=True),
            "H",
        )  # fmt: skip

    distilled = tagged((tmp_path / "data-distill/text/generate-train.txt").read_text(), "H")
    assert len(distilled) >= 290 and distilled == beam_search(ensemble)
    for member in (autoregressive, second / "checkpoint_last.pt"):
        assert beam_search(member) != distilled


def test_distill_refuses_an_ensemble_with_an_empty_or_missing_member(tiny_run, autoregressive):
    script = ROOT / "examples/translation/distill.sh"
    line = fails("bash", script, tiny_run, f"{autoregressive}::{autoregressive}")
    assert line.startswith("error: TEACHER_CKPT") and "has an empty member" in line
    missing = tiny_run / "no-such-teacher.pt"
    line = fails("bash", script, tiny_run, f"{autoregressive}:{missing}")
    assert line == f"error: teacher checkpoint {missing} not found"


def test_decode_speed_benchmark_runs_side_by_side(tiny_run, fairseq_cmlm, autoregressive, tmp_path):
    theirs, ours = fairseq_cmlm
    run(
        sys.executable, ROOT / "benchmarks/decode_speed.py", tiny_run / "bin", "--ours", ours,
        "--fairseq-cmlm", theirs, "--ar", autoregressive, "--configs", "T=1,l=1", "T=3,l=2",
        "--beams", "2", "--batch-sizes", "1,8", "--sentences", "6,20", "--repeats", "1",
        "--lengths", "4,8", "--length-sentences", "2", "--cpu", "--out", tmp_path,
    )  # fmt: skip
    report = json.loads((tmp_path / "decode_speed.json").read_text())
    rows = {(r["system"], r["batch"]): r for r in report["rows"]}
    assert len(rows) == 2 * (2 * 2 + 1)
    # identical weights and, at l=1, identical algorithm: identical BLEU
    assert rows["ours T=1,l=1", 8]["bleu"] == rows["fairseq T=1,l=1", 8]["bleu"]
    assert 1.0 <= rows["fairseq T=3,l=2", 8]["passes_per_sentence"] <= 3.0
    assert all(r["sentences"] == (6 if r["batch"] == 1 else 20) for r in report["rows"])
    assert any("ours / fairseq's generator" in line for line in report["ratios"])
    assert {r["length"] for r in report["length_scaling"]} == {4, 8}
    assert (tmp_path / "decode_speed.png").read_bytes()[:4] == b"\x89PNG"


def test_length_bias_and_learning_curve_benchmarks_run(tiny_run, fairseq_cmlm, tmp_path):
    _, ours = fairseq_cmlm
    out = run(sys.executable, ROOT / "benchmarks/length_bias.py", tiny_run / "bin", "--path", ours,
              "--gen-subset", "test", "--cpu", stdout_only=True)  # fmt: skip
    stats = json.loads(out)
    assert stats["sentences"] == N_TEST
    assert 0 <= stats["exact"] <= stats["within_2"] <= 1
    shares = stats["within_2"] + stats["short_by_more_than_2"] + stats["long_by_more_than_2"]
    assert abs(shares - 1) < 1e-3
    runs = tmp_path / "run"
    runs.mkdir()
    for name in ("checkpoint_1_10.pt", "checkpoint_2_20.pt", "checkpoint_last.pt"):
        shutil.copy(ours, runs / name)  # only the E_U ones are points of the curve
    report = tmp_path / "curve.json"
    run(sys.executable, ROOT / "benchmarks/learning_curve.py", tiny_run / "bin",
        "--cmlm", f"ours={runs}", "--config", "T=2,l=1", "--cpu", "--json", report,
        "--plot", tmp_path / "curve.png")  # fmt: skip
    points = json.loads(report.read_text())
    assert [p["updates"] for p in points] == [10, 20]
    assert points[0]["sacrebleu"] == points[1]["sacrebleu"]  # the same weights twice
    marked = [dict(p, sacrebleu=-1.0) if p["updates"] == 10 else p for p in points]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(marked))  # written after the checkpoints: its points are reused
    (runs / "checkpoint_2_20.pt").touch()  # newer than old.json: decoded again
    proc = invoke(sys.executable, ROOT / "benchmarks/learning_curve.py", tiny_run / "bin",
                  "--cmlm", f"ours={runs}", "--config", "T=2,l=1", "--cpu", "--reuse", old,
                  "--json", tmp_path / "again.json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    again = json.loads((tmp_path / "again.json").read_text())
    assert [p["sacrebleu"] for p in again] == [-1.0, points[1]["sacrebleu"]]
    assert "ours 10: -1.00 (reused)" in proc.stderr and "ours 20: " in proc.stderr
    # the point filters, on points reused from again.json (no decoding)
    reuse = ["--config", "T=2,l=1", "--cpu", "--reuse", tmp_path / "again.json", "--json", report]
    run(sys.executable, ROOT / "benchmarks/learning_curve.py", tiny_run / "bin",
        "--cmlm", f"ours={runs}", "--every", "20", *reuse)  # fmt: skip
    assert [p["updates"] for p in json.loads(report.read_text())] == [20]
    out = run(sys.executable, ROOT / "benchmarks/learning_curve.py", tiny_run / "bin",
              "--cmlm", f"ours={runs}", "--max-updates", "19", *reuse)  # fmt: skip
    assert [p["updates"] for p in json.loads(report.read_text())] == [10]
    assert "ours 10: -1.00 (reused)" in out
    assert (tmp_path / "curve.png").read_bytes()[:4] == b"\x89PNG"


def test_best_recipe_refuses_missing_data_and_bad_budgets(tmp_path):
    script = ROOT / "examples/translation/train-multi30k-best.sh"
    for env, problem in (({}, "preprocess.log not found: run prepare-multi30k.sh first"),
                         ({"MAX_UPDATE": "3k"}, "MAX_UPDATE must be a positive integer"),
                         ({"GLANCING": "yes"}, "GLANCING must be 1 (glancing from MAX_UPDATE/2) or 0"),
                         ({"INIT": "teacher"}, "INIT must be 1 (start the student from the teacher's weights) or 0"),
                         ({"TEACHERS": "0"}, "TEACHERS must be the number of teachers to distil with, 1 to 9"),
                         ({"STUDENT": "ar"}, "STUDENT must be cmlm (Mask-Predict, T=10, l=5) or ctc"),
                         ({"STUDENT": "ctc", "BLANK_PENALTY": "-1"}, "BLANK_PENALTY must be a number >= 0"),
                         ({"SELF_CORRECTION": "1.5"}, "SELF_CORRECTION must be a share of the sentences between 0 (off) and 1"),
                         ({"SELF_CORRECTION": "half"}, "SELF_CORRECTION must be a share of the sentences between 0 (off) and 1"),
                         ({"STUDENT": "ctc", "SELF_CORRECTION": "0.5"}, "does not combine with STUDENT=ctc"),
                         ({"LENGTH_SHIFT": "one"}, "LENGTH_SHIFT must be auto (fitted on valid) or a whole number"),
                         ({"STUDENT": "ctc", "LENGTH_SHIFT": "1"}, "a CTC output has no length candidates")):  # fmt: skip
        proc = invoke("bash", script, tmp_path / "nothing", tmp_path / "work", env=env)
        assert proc.returncode == 1 and problem in proc.stderr
        assert not (tmp_path / "work").exists()  # nothing trained, nothing written


def refusal_of_held_student(tiny_run, tmp_path, env, marker=None):
    """The best recipe run on WORK_DIR/student holding the tiny CMLM (and a distilled-from
    marker): its last stderr line, after checking it stopped before the teacher's training."""
    data, work = tmp_path / "data", tmp_path / "work"
    data.mkdir()
    (data / "bin").symlink_to(tiny_run / "bin")
    (work / "student").mkdir(parents=True)
    shutil.copy(tiny_run / "ckpt/checkpoint_last.pt", work / "student/checkpoint_last.pt")
    if marker is not None:
        (work / "student/distilled-from").write_text(marker + "\n")
    proc = invoke("bash", ROOT / "examples/translation/train-multi30k-best.sh", data, work, env=env)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert not (work / "teacher").exists()  # refused before the teacher's training
    return proc.stderr.strip().splitlines()[-1]


def test_best_recipe_refuses_a_student_of_the_other_objective_before_training(tiny_run, tmp_path):
    """WORK_DIR/student holds a CMLM: STUDENT=ctc would resume it as a CTC model."""
    assert refusal_of_held_student(tiny_run, tmp_path, {"STUDENT": "ctc"}) == (
        f"error: {tmp_path}/work/student holds a cmlm student (--ctc-upsample 0), not "
        "STUDENT=ctc: use that STUDENT, or another WORK_DIR"
    )


def test_best_recipe_refuses_a_student_of_another_distillation_before_training(tiny_run, tmp_path):
    """WORK_DIR/student learnt from two teachers' data: TEACHERS=3 would only decode it."""
    old, new = f"{tmp_path}/data-distill-2teachers", f"{tmp_path}/data-distill-3teachers"
    assert refusal_of_held_student(tiny_run, tmp_path, {"TEACHERS": "3"}, marker=old) == (
        f"error: {tmp_path}/work/student was trained on {old}, not {new} (TEACHERS=3): "
        "use the TEACHERS it was trained with, or another WORK_DIR"
    )


def test_the_small_recipe_decodes_a_ctc_model_with_decode_flags(tiny_run, tmp_path):
    """train-multi30k-small.sh with TRAIN_FLAGS --ctc-upsample 2 and DECODE_FLAGS one pass:
    the recipe trains a CTC model and decodes every test sentence with it."""
    data, save = tmp_path / "data", tmp_path / "ctc"
    data.mkdir()
    (data / "bin").symlink_to(tiny_run / "bin")
    flags = "--arch cmlm_plugin_tiny --max-update 2 --ctc-upsample 2 --no-epoch-checkpoints"
    env = {"TRAIN_FLAGS": flags, "TRAIN_HOURS": "0",
           "DECODE_FLAGS": "--iter-decode-max-iter 1 --iter-decode-with-beam 1 --ctc-blank-penalty 1"}  # fmt: skip
    run("bash", ROOT / "examples/translation/train-multi30k-small.sh", data, save, env=env)
    generated = (save / "generate-test.txt").read_text()
    assert len(hypotheses(generated)) == N_TEST
    assert "BLEU" in generated.strip().splitlines()[-1]
