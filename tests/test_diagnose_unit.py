"""Unit tests of ``cmlm-diagnose`` on hand-written fairseq-generate output, and one run of the
installed console command on a generated file.

The sample below has known numbers (words = pieces, no sentencepiece):

* output repeats 4 of 15 tokens (``a a``, ``m m m``, ``o o``), reference repeats 1 of 19;
* length errors +1, -1, -7, +3: mean -1, |error| <= 2 for 2 of 4, more than 5 short 1 of 4;
* P- values (base 2) below p = 0.5: -2, -3, -4, -1.5, 4 of 15 (-1 is p = 0.5 exactly);
* passes 2, 1, 1, 4; fewer than ceil(log2 n) for sentences 0 (n=5) and 1 (n=3);
* history of sentence 0: one change; of sentence 3: changes 4, 1 and 2, of which 1 and 2
  go back to an earlier value: 8 changes, 3 reversions over 5 + 6 output pieces.
"""

import json
import math
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cmlm_plugin.cli import diagnose
from cmlm_plugin.errors import CMLMPluginError

SAMPLE = "\n".join(
    [
        "2026-12-01 | INFO | fairseq_cli.generate | loading model(s)",
        "S-0\tsource zero",
        "T-0\ta b c d",
        "H-0\t-0.2\ta a b c d",
        "D-0\t-0.2\ta a b c d",
        "P-0\t0 -1 -2 -0.5 -3",
        "I-0\t2",
        "E-0_0\ta b b c d",
        "E-0_1\ta a b c d",
        "T-1\tx y y z",
        "H-1\t-0.1\tx y z",
        "D-1\t-0.1\tx y z",
        "P-1\t-0.1 -0.1 -4",
        "I-1\t1",
        "T-2\tp q r s t u v w",
        "D-2\t-1\tp",
        "P-2\t-1.5",
        "I-2\t1",
        "T-3\tm n o",
        "D-3\t0\tm m m n o o",
        "D-3\t-9\tsecond best of --nbest",
        "P-3\t0 0 0 0 0 0",
        "I-3\t4",
        "E-3_0\tm m m m m m",
        "E-3_1\tm n m n o o",
        "E-3_2\tm n m n o m",
        "E-3_3\tm m m n o o",
        "2026-12-01 | INFO | fairseq_cli.generate | Translated 4 sentences (19 tokens) in 0.5s "
        "(8.00 sentences/s, 38.00 tokens/s)",
        "",
    ]
)


def args(*extra):
    return diagnose.build_parser().parse_args(["unused", *extra])


def report(text=SAMPLE, *extra):
    return diagnose.diagnose(diagnose.read_generate(text, "cfg", "gen.out"), args(*extra))


def test_reads_every_line_kind_and_keeps_the_best_hypothesis():
    gen = diagnose.read_generate(SAMPLE, "cfg", "gen.out")
    assert sorted(gen.hyps) == sorted(gen.refs) == [0, 1, 2, 3]
    assert gen.hyps[3] == "m m m n o o"  # the first D- line of --nbest
    assert gen.logprobs[0] == [0.0, -1.0, -2.0, -0.5, -3.0]
    assert gen.passes == {0: 2, 1: 1, 2: 1, 3: 4}
    assert gen.history[3][2] == "m n m n o m" and sorted(gen.history) == [0, 3]
    assert gen.sentences_per_s == 8.0


def test_h_lines_stand_in_for_missing_d_lines():
    gen = diagnose.read_generate("T-0\ta b\nH-0\t-1\ta b b\n", "cfg", "gen.out")
    assert gen.hyps == {0: "a b b"}
    gen = diagnose.read_generate("T-0\ta b\nH-0\t-1\n", "cfg", "gen.out")  # empty output
    assert gen.hyps == {0: ""}


def test_repeat_rates_are_exact():
    rep = report()["repeats"]
    assert (rep["output_repeats"], rep["output_tokens"]) == (4, 15)
    assert (rep["reference_repeats"], rep["reference_tokens"]) == (1, 19)
    assert rep["output"] == pytest.approx(4 / 15) and rep["reference"] == pytest.approx(1 / 19)


def test_length_error_shares_and_buckets_are_exact():
    r = report()
    le = r["length_error"]
    assert le["mean"] == -1.0
    assert (le["within_2"], le["short_over_5"], le["long_over_5"]) == (0.5, 0.25, 0.0)
    assert le["histogram"] == {"-7": 1, "-1": 1, "1": 1, "3": 1}
    counts = {name: b["sentences"] for name, b in r["bleu_by_length_error"].items()}
    assert counts == {"< -5": 1, "-5..-3": 0, "-2..+2": 2, "+3..+5": 1, "> +5": 0}
    assert r["bleu_by_length_error"]["-5..-3"]["sacrebleu"] is None


def test_bucket_edges():
    assert [diagnose.bucket_of(e) for e in (-6, -5, -3, -2, 2, 3, 5, 6)] == [
        "< -5", "-5..-3", "-5..-3", "-2..+2", "-2..+2", "+3..+5", "+3..+5", "> +5",
    ]  # fmt: skip


def test_oscillation_on_a_built_history():
    osc = report()["oscillation"]
    assert (osc["changes"], osc["reversions"], osc["pieces"]) == (8, 3, 11)
    assert osc["per_piece"] == pytest.approx(3 / 11)
    assert osc["sentences_with_reversion"] == 1


def test_oscillation_rules():
    split = [p.split() for p in ("m m m m m m", "m n m n o o", "m n m n o m", "m m m n o o")]
    assert diagnose.oscillation(split) == (7, 3)
    assert diagnose.oscillation([["a", "b"], ["c", "b"], ["a", "b"]]) == (2, 1)
    assert diagnose.oscillation([["a"], ["b"], ["b"], ["a"]]) == (2, 1)  # back after 2 passes
    masked = [["<mask>", "<mask>", "c"], ["a", "<mask>", "c"], ["a", "b", "c"]]
    assert diagnose.oscillation(masked) == (0, 0)  # revealing a mask is no change
    assert diagnose.oscillation([["a", "b", "c"], ["a", "x"]]) == (1, 0)  # up to the shorter
    assert diagnose.oscillation([["a"]]) == (0, 0)


def test_bleu_per_pass_keeps_the_last_output_of_sentences_that_stopped():
    r = report()
    assert len(r["bleu_per_pass"]) == 4
    assert r["bleu_per_pass"][-1] == r["sacrebleu"]  # the last pass is the output


def test_confidence_share_is_exact():
    conf = report()["confidence"]
    assert (conf["level"], conf["positions"]) == (0.5, 15)
    assert conf["below"] == pytest.approx(4 / 15)  # p = 2 ** -1 = 0.5 is not below 0.5
    assert report(SAMPLE, "--confidence", "0.6")["confidence"]["below"] == pytest.approx(5 / 15)


def test_passes_per_sentence():
    p = report()["passes"]
    assert (p["mean"], p["min"], p["max"]) == (2, 1, 4)
    assert p["below_log2_n"] == 0.5  # 2 < ceil(log2 5) = 3 and 1 < ceil(log2 3) = 2


def test_without_history_steps_or_scores_those_numbers_are_absent():
    plain = "T-0\ta b\nD-0\t-1\ta b\n"
    r = report(plain)
    assert r["oscillation"] is r["bleu_per_pass"] is r["confidence"] is r["passes"] is None
    assert diagnose.symptoms(r, args()) == []


def test_sentencepiece_units():
    text = "T-0\t\u2581ein \u2581Haus\nD-0\t-1\t\u2581ein \u2581Ha us \u2581Haus\n"
    pieces, words = report(text), report(text, "--words")
    assert pieces["unit"].startswith("sentencepiece pieces") and words["unit"].startswith("words")
    assert pieces["length_error"]["mean"] == 2 and words["length_error"]["mean"] == 1
    # one word long (Haus Haus against Haus) at 4 pieces for 3 words: -1.33 pieces -> -1,
    # whether lengths are counted in pieces or in words
    assert pieces["length_error"]["fitted_shift"] == words["length_error"]["fitted_shift"] == -1
    assert report()["length_error"]["fitted_shift"] is None  # no pieces: the lines may be words
    assert pieces["repeats"]["output_repeats"] == 0
    assert pieces["sacrebleu"] == words["sacrebleu"]  # BLEU always on words
    assert diagnose.to_words("\u2581ein \u2581Ha us", "sentencepiece") == "ein Haus"
    assert diagnose.to_words("ein Ha@@ us", "subword_nmt") == "ein Haus"
    assert diagnose.detect_scheme(["ein Ha@@ us"]) == "subword_nmt"
    assert diagnose.detect_scheme(["ein Haus"]) == "none"


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=-60, max_value=60, allow_nan=False))
def test_fitted_length_shift_cancels_the_mean_to_within_half_a_piece(mean):
    k = diagnose.fitted_length_shift(mean)
    assert isinstance(k, int) and abs(k + mean) <= 0.5
    assert diagnose.fitted_length_shift(-mean) == -k  # as far for long outputs as for short


def test_the_error_is_counted_in_words_and_converted_at_the_outputs_pieces_per_word():
    # references in more pieces per word than the output: two words short is 2.5 output pieces
    assert diagnose.output_pieces_error([-2, -3, -1], hyp_pieces=25, hyp_words=20) == -2.5
    assert diagnose.output_pieces_error([], 0, 0) == 0.0


def test_fitted_length_shift_examples():
    # whole pieces to the nearest, halves away from zero
    means = (-1.07, -1.058, -0.219, -0.124, 0.0, 0.49, -0.5, 0.5, 2.6)
    assert [diagnose.fitted_length_shift(m) for m in means] == [1, 1, 0, 0, 0, 0, 1, -1, -3]


def symptom_keys(r, *extra, ar=None):
    return [s["symptom"] for s in diagnose.symptoms(r, args(*extra), ar)]


def test_remedy_selection_follows_the_thresholds():
    r = report()
    assert symptom_keys(r) == ["repeats", "short", "oscillation", "low_confidence"]
    loose = ["--repeat-margin", "0.3", "--far-share", "0.3", "--oscillation", "0.3"]
    assert symptom_keys(r, *loose, "--low-confidence-share", "0.3") == []
    assert symptom_keys(r, *loose, "--low-confidence-share", "0.3", "--few-passes-share",
                        "0.4") == ["few_passes"]  # fmt: skip
    r["length_error"].update(mean=1.5, short_over_5=0.0)
    assert "long" in symptom_keys(r) and "short" not in symptom_keys(r)
    r["bleu_per_pass"] = [10.0, 11.0, 12.0]
    few = diagnose.symptoms(r, args("--rising-bleu", "0.9"))
    assert any(s["symptom"] == "few_passes" and "rose by 1.00" in s["evidence"] for s in few)
    shown = diagnose.symptom_text([{**r, "label": "cfg", "symptoms": few}])
    assert "flag: --monotone" in shown and "source's cause: tokens already fixed" in shown


def test_ar_baseline_gives_the_gap_and_the_speed_up():
    r = report()
    ar = {"label": "AR", "sacrebleu": r["sacrebleu"] + 6, "sentences_per_s": 6.0}
    keys = symptom_keys(r, ar=ar)
    assert "below_ar" in keys and "slow" in keys  # 6 BLEU > 5; 8 / 6 = 1.33x < 2x
    assert r["bleu_gap_to_ar"] == 6.0 and r["speedup_over_ar"] == pytest.approx(1.333)
    assert "slow" not in symptom_keys(r, "--min-speedup", "1.3", ar=ar)
    assert "below_ar" not in symptom_keys(r, "--ar-gap", "6.5", ar=ar)
    assert "slow" not in symptom_keys(r, ar={**ar, "sentences_per_s": None})  # no timing


def test_every_remedy_names_flags_that_exist():
    from cmlm_plugin.cli.flags import all_flags

    known = {flag.flag.split()[0] for flag in all_flags() if flag.where != "arch"}
    named = {
        word
        for symptom in diagnose.SYMPTOMS.values()
        for usage in symptom.flags
        for word in usage.split()
        if word.startswith("--")
    }
    assert named and named <= known, named - known


@pytest.mark.parametrize(
    "text, message",
    [
        ("S-0\tsource only\nTranslated 0 sentences\n", "holds no H-/D- lines"),
        ("D-0\t-1\toutput without reference\n", "holds no T- lines"),
    ],
)
def test_bad_input_is_one_clear_error(tmp_path, text, message):
    path = tmp_path / "gen.out"
    path.write_text(text)
    with pytest.raises(CMLMPluginError, match=message):
        diagnose.main([str(path)])


def test_bad_arguments(tmp_path):
    path = tmp_path / "gen.out"
    path.write_text(SAMPLE)
    with pytest.raises(CMLMPluginError, match="no such file.*LABEL=PATH"):
        diagnose.main([str(tmp_path / "missing.out")])
    with pytest.raises(CMLMPluginError, match="no such file"):
        diagnose.main([f"A={tmp_path / 'missing.out'}"])
    with pytest.raises(CMLMPluginError, match="two inputs are labelled 'A'"):
        diagnose.main([f"A={path}", f"A={path}"])
    with pytest.raises(CMLMPluginError, match="--ar B names no input: the labels are A"):
        diagnose.main([f"A={path}", "--ar", "B"])
    with pytest.raises(CMLMPluginError, match="--confidence"):
        diagnose.main([str(path), "--confidence", "0"])


def test_console_command_end_to_end(tmp_path):
    """The installed ``cmlm-diagnose`` on a generated file: table, JSON, PNG, one-line error."""
    from cli import invoke, run

    gen = tmp_path / "gen.out"
    gen.write_text(SAMPLE)
    ar_out = tmp_path / "ar.out"  # an AR run: same references, exact outputs, slower
    ar_lines = [line for line in SAMPLE.splitlines() if line.startswith(("T-", "S-"))]
    ar_lines += [f"D-{line[2:].split(chr(9))[0]}\t-0.1\t{line.split(chr(9))[1]}"
                 for line in SAMPLE.splitlines() if line.startswith("T-")]  # fmt: skip
    ar_lines.append("Translated 4 sentences (19 tokens) in 1s (2.00 sentences/s, 19.0 tokens/s)")
    ar_out.write_text("\n".join(ar_lines) + "\n")
    out = run("cmlm-diagnose", f"T4={gen}", f"AR={ar_out}", "--ar", "AR",
              "--json", tmp_path / "d.json", "--plot", tmp_path / "d.png", stdout_only=True)  # fmt: skip
    assert "lengths and repeats in words" in out
    assert "repeated tokens, output" in out and "26.67 %" in out and "5.26 %" in out
    assert "changes back, per 100 pieces" in out and "27.27 (3)" in out
    assert "T4: oscillation between passes" in out and "flag: --monotone" in out
    assert "T4: quality far below the autoregressive model" in out
    assert "AR: no symptom above its threshold" in out
    rows = json.loads((tmp_path / "d.json").read_text())
    assert [r["label"] for r in rows] == ["T4", "AR"]
    assert rows[0]["speedup_over_ar"] == 4.0 and rows[1]["sacrebleu"] == 100.0
    assert math.isclose(rows[0]["confidence"]["below"], 4 / 15)
    assert (tmp_path / "d.png").read_bytes()[:4] == b"\x89PNG"

    empty = tmp_path / "empty.out"
    empty.write_text("2026 | INFO | nothing decoded\n")
    proc = invoke("cmlm-diagnose", empty)
    assert proc.returncode == 1
    last = [line for line in proc.stderr.splitlines() if line.strip()][-1]
    assert last.startswith("cmlm_plugin error: ") and "holds no H-/D- lines" in last
    assert "Traceback" not in proc.stderr


def test_plot_without_matplotlib_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    with pytest.raises(CMLMPluginError, match="--plot needs matplotlib: pip install matplotlib"):
        diagnose.plot([report()], str(tmp_path / "d.png"))
