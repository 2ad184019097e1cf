"""What ``cmlm-diagnose`` prints and draws: the table of measured numbers, one column per
configuration (``text_table`` and its cells), the symptoms found with their causes,
remedies and flags (``symptom_text``), and the length-error histogram with BLEU after
each pass (``plot``, needs matplotlib).
"""

from typing import Dict, List, Optional, Tuple

from ..plotting import pyplot
from .measures import BUCKETS


def percent(x: Optional[float], digits: int = 1) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f} %"


def shift_cell(r: Dict) -> str:
    k = r["length_error"].get("fitted_shift")
    return "- (lines in words)" if k is None else f"{k:+d}"


def text_table(reports: List[Dict]) -> str:
    """The measured numbers, one column per configuration."""
    rows: List[Tuple[str, List[str]]] = [("", [r["label"] for r in reports])]

    def row(name: str, fn) -> None:
        rows.append((name, [fn(r) for r in reports]))

    row("sentences", lambda r: str(r["sentences"]))
    row("sacreBLEU", lambda r: "-" if r["sacrebleu"] is None else f"{r['sacrebleu']:.2f}")
    row("repeated tokens, output", lambda r: percent(r["repeats"]["output"], 2))
    row("repeated tokens, reference", lambda r: percent(r["repeats"]["reference"], 2))
    row("length error mean (out - ref)", lambda r: f"{r['length_error']['mean']:+.2f}")
    row("|length error| <= 2", lambda r: percent(r["length_error"]["within_2"]))
    row("more than 5 short", lambda r: percent(r["length_error"]["short_over_5"]))
    row("more than 5 long", lambda r: percent(r["length_error"]["long_over_5"]))
    row("--length-shift fitted (word error x pieces/word)", lambda r: shift_cell(r))
    for name, _, _ in BUCKETS:
        row(f"BLEU, length error {name}", lambda r, n=name: bucket_cell(r, n))
    row("pieces with p < level", lambda r: confidence_cell(r))
    row("passes / sentence (min-max)", lambda r: passes_cell(r))
    row("passes < ceil(log2 n)", lambda r: percent((r["passes"] or {}).get("below_log2_n")))
    row("changes between passes", lambda r: str(r["oscillation"]["changes"])
        if r["oscillation"] else "-")  # fmt: skip
    row("changes back, per 100 pieces", lambda r: oscillation_cell(r))
    row("BLEU per pass", lambda r: " ".join(f"{b:.1f}" for b in r["bleu_per_pass"])
        if r["bleu_per_pass"] else "-")  # fmt: skip
    row("sentences/s", lambda r: "-" if not r["sentences_per_s"] else f"{r['sentences_per_s']:.1f}")
    if any("bleu_gap_to_ar" in r or "speedup_over_ar" in r for r in reports):
        row("BLEU below AR", lambda r: str(r.get("bleu_gap_to_ar", "-")))
        row("speed-up over AR", lambda r: str(r.get("speedup_over_ar", "-")))
    width = max(len(name) for name, _ in rows)
    cols = [max(len(r[k]) for _, r in rows) for k in range(len(reports))]
    return "\n".join(
        f"{name:<{width}}  " + "  ".join(f"{v:>{w}}" for v, w in zip(values, cols))
        for name, values in rows
    )


def bucket_cell(r: Dict, name: str) -> str:
    b = r["bleu_by_length_error"][name]
    return "- (0)" if b["sacrebleu"] is None else f"{b['sacrebleu']:.2f} ({b['sentences']})"


def confidence_cell(r: Dict) -> str:
    c = r["confidence"]
    return "-" if c is None else f"{percent(c['below'])} (p<{c['level']:g})"


def passes_cell(r: Dict) -> str:
    p = r["passes"]
    return "-" if p is None else f"{p['mean']:.2f} ({p['min']}-{p['max']})"


def oscillation_cell(r: Dict) -> str:
    o = r["oscillation"]
    return "-" if o is None else f"{100 * o['per_piece']:.2f} ({o['reversions']})"


def symptom_text(reports: List[Dict]) -> str:
    lines = []
    for r in reports:
        if not r["symptoms"]:
            lines.append(f"{r['label']}: no symptom above its threshold")
        for s in r["symptoms"]:
            lines += [
                f"{r['label']}: {s['name']}: {s['evidence']}",
                f"    source's cause: {s['cause']}",
                f"    remedy: {s['remedy']}",
                *(f"    flag: {flag}" for flag in s["flags"]),
            ]
    return "\n".join(lines)


def plot(reports: List[Dict], path: str) -> None:
    plt = pyplot()
    fig, (hist, passes) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, r in enumerate(reports):
        counts = r["length_error"]["histogram"]
        errors = [int(e) for e in counts]
        xs = list(range(min(errors) - 1, max(errors) + 2))  # every integer, zeros too
        shares = [counts.get(str(e), 0) / r["sentences"] for e in xs]
        hist.step(xs, shares, where="mid", color=f"C{i % 10}", label=r["label"])
        if r["bleu_per_pass"]:
            ys = r["bleu_per_pass"]
            passes.plot(range(1, len(ys) + 1), ys, "o-", color=f"C{i % 10}", label=r["label"])
    unit = reports[0]["unit"].split(" (")[0]
    hist.axvspan(-2.5, 2.5, color="0.9")  # |error| <= 2
    hist.set(xlabel=f"output - reference length ({unit})", ylabel="share of sentences",
             title="length error")  # fmt: skip
    hist.set_ylim(bottom=0)
    passes.set(xlabel="pass", ylabel="sacreBLEU", title="BLEU after each pass")
    passes.xaxis.get_major_locator().set_params(integer=True)
    if not any(r["bleu_per_pass"] for r in reports):
        passes.text(0.5, 0.5, "no E- lines (--retain-iter-history)", ha="center",
                    transform=passes.transAxes)  # fmt: skip
    for ax in (hist, passes):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
