"""The source's troubleshooting table as data: one ``Symptom`` per row (``SYMPTOMS``: the
source's cause and remedy and the plugin flags that implement it), the thresholds above
which each is reported (``THRESHOLDS``, the command's flags and defaults), and
``symptoms``, which compares one configuration's numbers with them.
"""

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple


@dataclass
class Symptom:
    """One row of the source's troubleshooting table, with the plugin's flags for its remedy."""

    name: str
    cause: str  # the source's cause
    remedy: str  # the source's remedy, and what the plugin offers for it
    flags: Tuple[str, ...]  # how to use the plugin flags (cmlm-flags lists them) that apply


SYMPTOMS = {
    "repeats": Symptom(
        "repeated tokens",
        "training mask ratio too low (the model never saw heavily masked targets), "
        "over-confident probabilities",
        "retrain with a wide mask-ratio range (the default 0..1 covers the source's 10-90 %); "
        "temperature-scale the confidences; give the repeated positions more passes; rank "
        "positions by agreement between passes",
        (
            "--mask-ratio-min / --mask-ratio-max (training: a wide range, the default 0 and 1 "
            "or the source's 0.1 and 0.9)",
            "--remask-confidence calibrated --calibration-temperature K (K from cmlm-calibrate)",
            "--iter-decode-max-iter T (more passes)",
            "--remask-confidence consistency",
        ),
    ),
    "short": Symptom(
        "omissions: outputs too short",
        "length predicted too short",
        "compare predicted and reference lengths (this report) and tune the length "
        "prediction on its own",
        (
            "--iter-decode-with-beam 5 (more length candidates)",
            "--length-prior-weight W (rank candidates with the length head too; 0, the "
            "paper's rule, favours short ones)",
            "--length-shift K (add K pieces to every length candidate; fit K on the "
            "validation set: this report's K, on its output printed as pieces)",
            "--length-loss-factor (training: weight of the length loss)",
            "--length-offset (training: predict the offset from the source length)",
        ),
    ),
    "long": Symptom(
        "outputs too long",
        "length predicted too long",
        "compare predicted and reference lengths (this report) and tune the length "
        "prediction on its own",
        (
            "--iter-decode-with-beam 5 (more length candidates)",
            "--length-shift -K (take K pieces off every length candidate)",
            "--length-loss-factor (training: weight of the length loss)",
            "--length-offset (training: predict the offset from the source length)",
        ),
    ),
    "oscillation": Symptom(
        "oscillation between passes",
        "tokens already fixed are not kept",
        "keep the fixed tokens",
        (
            "--monotone (never re-mask a token that survived a re-masking round)",
            "--remask-confidence consistency (tokens re-predicted unchanged rank first)",
        ),
    ),
    "low_confidence": Symptom(
        "many low-confidence positions",
        "the model has not learned well (training mask strategy, too little training)",
        "check the training mask distribution; train longer (fairseq's --max-update)",
        ("--mask-ratio-min / --mask-ratio-max (training)",),
    ),
    "few_passes": Symptom(
        "too few passes",
        "iterations insufficient (the source: T from ceil(log2 n) to ceil(log2 n) + 2)",
        "compare BLEU at several T (cmlm-table) and raise T",
        (
            "--iter-decode-max-iter T",
            "--iter-decode-force-max-iter (if sentences stop early)",
        ),
    ),
    "below_ar": Symptom(
        "quality far below the autoregressive model",
        "iterations insufficient, model under-trained",
        "compare BLEU at several T (cmlm-table), raise T; train longer (fairseq's "
        "--max-update), distil from the AR model (examples/translation/distill.sh)",
        ("--iter-decode-max-iter T", "--iter-decode-with-beam 5"),
    ),
    "slow": Symptom(
        "low speed-up over the autoregressive model",
        "Python loops, kernel launch overhead",
        "profile the stages (the plugin's decoding loop is batched already)",
        (
            "--decoder-impl fast (the default) or int8 (CPU)",
            "--length-prune-after 1 (keep one length candidate after pass 1)",
            "--stop-unchanged (stop sentences whose pass changed nothing)",
        ),
    ),
}


# (flag, default, what is compared with it): the levels above which a symptom is reported
THRESHOLDS = (
    ("--repeat-margin", 0.005, "repeats: output repeat rate above the reference rate by more"),
    ("--mean-length-error", 1.0, "short / long: mean length error beyond -/+ this"),
    ("--far-share", 0.05, "short / long: share of sentences more than 5 short / long"),
    ("--oscillation", 0.02, "oscillation: changes back to an earlier value per output piece"),
    ("--low-confidence-share", 0.25, "low confidence: share of pieces below --confidence"),
    ("--few-passes-share", 0.5, "too few passes: share of sentences with < ceil(log2 n) passes"),
    ("--rising-bleu", 0.5, "too few passes: BLEU gain of the last pass (needs history)"),
    ("--ar-gap", 5.0, "far below AR: BLEU gap to the --ar input"),
    ("--min-speedup", 2.0, "low speed-up: sentences/s over the --ar input's, reported below"),
)


def symptoms(report: Dict, args, ar: Optional[Dict] = None) -> List[Dict]:
    """The symptoms above their thresholds, each with its evidence and remedy."""
    found = []

    def add(key: str, evidence: str) -> None:
        s = SYMPTOMS[key]
        found.append({"symptom": key, "name": s.name, "evidence": evidence, "cause": s.cause,
                      "remedy": s.remedy, "flags": list(s.flags)})  # fmt: skip

    rep = report["repeats"]
    if rep["output"] - rep["reference"] > args.repeat_margin:
        add("repeats", f"{100 * rep['output']:.2f} % of output tokens repeat the one before, "
            f"references {100 * rep['reference']:.2f} % (threshold: reference + "
            f"{100 * args.repeat_margin:.2f} points)")  # fmt: skip
    le = report["length_error"]
    for key, share, sign in (("short", "short_over_5", -1), ("long", "long_over_5", 1)):
        if le[share] > args.far_share or sign * le["mean"] > args.mean_length_error:
            add(key, f"mean error {le['mean']:+.2f}, {100 * le[share]:.1f} % more than 5 "
                f"{key} (thresholds: mean {sign * args.mean_length_error:+.2f}, "
                f"{100 * args.far_share:.1f} %)")  # fmt: skip
    osc = report["oscillation"]
    if osc and osc["per_piece"] > args.oscillation:
        add("oscillation", f"{osc['reversions']} changes back to an earlier value over "
            f"{osc['pieces']} output pieces ({100 * osc['per_piece']:.2f} per 100; threshold "
            f"{100 * args.oscillation:.2f})")  # fmt: skip
    conf = report["confidence"]
    if conf and conf["below"] > args.low_confidence_share:
        add("low_confidence", f"{100 * conf['below']:.1f} % of output pieces have p < "
            f"{conf['level']} (threshold {100 * args.low_confidence_share:.1f} %)")  # fmt: skip
    passes, per_pass = report["passes"], report["bleu_per_pass"]
    evidence = []
    if passes and passes["below_log2_n"] > args.few_passes_share:
        evidence.append(
            f"{100 * passes['below_log2_n']:.1f} % of sentences got fewer than "
            f"ceil(log2 n) passes (threshold {100 * args.few_passes_share:.1f} %)"
        )
    if per_pass and len(per_pass) > 1 and None not in per_pass[-2:]:
        gain = per_pass[-1] - per_pass[-2]
        if gain > args.rising_bleu:
            evidence.append(f"BLEU still rose by {gain:.2f} at the last pass (threshold "
                            f"{args.rising_bleu:.2f})")  # fmt: skip
    if evidence:
        add("few_passes", "; ".join(evidence))
    if ar is not None and ar is not report:
        gap = None
        if ar["sacrebleu"] is not None and report["sacrebleu"] is not None:
            gap = ar["sacrebleu"] - report["sacrebleu"]
            report["bleu_gap_to_ar"] = round(gap, 2)
        if gap is not None and gap > args.ar_gap:
            add("below_ar", f"{gap:.2f} BLEU below {ar['label']} (threshold {args.ar_gap:.2f})")
        if report["sentences_per_s"] and ar["sentences_per_s"]:
            speedup = report["sentences_per_s"] / ar["sentences_per_s"]
            report["speedup_over_ar"] = round(speedup, 3)
            if speedup < args.min_speedup:
                add("slow", f"{speedup:.2f}x the sentences/s of {ar['label']} (threshold "
                    f"{args.min_speedup:.2f}x)")  # fmt: skip
    return found
