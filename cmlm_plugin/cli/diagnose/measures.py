"""The numbers of the report for one configuration (``diagnose``): consecutive repeats,
the length error (mean, shares, histogram, sacreBLEU per error bucket, the
``--length-shift`` that cancels its mean: ``fitted_length_shift``), the share of
low-confidence pieces, passes per sentence, and from ``--retain-iter-history`` the
oscillation between passes and sacreBLEU after each pass (``history_report``).
"""

import math
import statistics
from typing import Dict, List, Optional, Tuple

from .reading import Generated, detect_scheme, to_words

MASK = "<mask>"
BUCKETS = (
    ("< -5", -math.inf, -6),
    ("-5..-3", -5, -3),
    ("-2..+2", -2, 2),
    ("+3..+5", 3, 5),
    ("> +5", 6, math.inf),
)


def repeat_rate(texts: List[str]) -> Tuple[float, int, int]:
    """(rate, repeats, tokens): tokens equal to the one before them, over all tokens."""
    repeats = tokens = 0
    for text in texts:
        t = text.split()
        tokens += len(t)
        repeats += sum(a == b for a, b in zip(t, t[1:]))
    return (repeats / tokens if tokens else 0.0), repeats, tokens


def length_stats(errors: List[int]) -> Dict:
    """Mean, |error| <= 2 share, > 5 short share, > 5 long share of output - reference."""
    n = len(errors)
    return {
        "mean": statistics.mean(errors) if n else 0.0,
        "within_2": sum(abs(e) <= 2 for e in errors) / n if n else 0.0,
        "short_over_5": sum(e < -5 for e in errors) / n if n else 0.0,
        "long_over_5": sum(e > 5 for e in errors) / n if n else 0.0,
    }


def fitted_length_shift(mean_error: float) -> int:
    """The ``--length-shift K`` that cancels a mean length error expressed in the output's
    pieces (``output_pieces_error``): -mean rounded to the nearest whole piece, halves away
    from zero, so that |K + mean| <= 0.5. Not in the paper: a calibration of the length
    candidates fitted on the validation set."""
    k = math.floor(abs(mean_error) + 0.5)
    return -k if mean_error > 0 else k


def output_pieces_error(word_errors: List[int], hyp_pieces: int, hyp_words: int) -> float:
    """The mean length error in words (output minus reference, what BLEU's brevity penalty
    counts) converted into pieces at the output's own pieces per word.

    Counting pieces on both sides misleads: references split rare words into more pieces
    than a model's outputs do (Multi30k valid, 2026-12-04: 1.40 against 1.27 pieces per
    word), so an output one word short looked three pieces short."""
    if not word_errors or not hyp_words:
        return 0.0
    return statistics.mean(word_errors) * hyp_pieces / hyp_words


def bucket_of(error: int) -> str:
    for name, low, high in BUCKETS:
        if low <= error <= high:
            return name
    raise AssertionError(error)


def oscillation(passes: List[List[str]]) -> Tuple[int, int]:
    """(changes, reversions) over one sentence's outputs after each pass.

    A change is a position whose token differs from the pass before; a reversion is a
    change to a token the position held at an earlier pass than that one. ``<mask>`` is no
    token: filling a masked position (the diffusion sampler's reveal) is no change, and a
    mask is no earlier value. Passes of different lengths are compared up to the shorter.
    """
    changes = reversions = 0
    seen: List[set] = []
    for k, tokens in enumerate(passes):
        for j, token in enumerate(tokens):
            if j == len(seen):
                seen.append(set())
            before = passes[k - 1][j] if k > 0 and j < len(passes[k - 1]) else MASK
            if MASK not in (token, before) and token != before:  # a reveal is no change
                changes += 1
                reversions += token in seen[j]
            if k > 0 and j < len(passes[k - 1]) and passes[k - 1][j] != MASK:
                seen[j].add(passes[k - 1][j])
    return changes, reversions


def bleu(hyps: List[str], refs: List[str], tokenize: str) -> Optional[float]:
    if not hyps:
        return None
    import sacrebleu

    return round(sacrebleu.metrics.BLEU(tokenize=tokenize).corpus_score(hyps, [refs]).score, 2)


def diagnose(gen: Generated, args) -> Dict:
    """Every number of the report for one configuration (no symptoms yet)."""
    ids = sorted(set(gen.hyps) & set(gen.refs))
    hyps, refs = [gen.hyps[i] for i in ids], [gen.refs[i] for i in ids]
    scheme = args.bpe if args.bpe != "auto" else detect_scheme(hyps + refs)
    hyp_words = [to_words(h, scheme) for h in hyps]
    ref_words = [to_words(r, scheme) for r in refs]
    if scheme == "none":
        unit = "words (whitespace-separated tokens of the D-/T- lines)"
    elif args.words:
        unit = f"words ({scheme} pieces of the D-/T- lines joined)"
    else:
        unit = f"{scheme} pieces (D-/T- lines as printed; --words counts words)"
    measured_h, measured_r = (hyp_words, ref_words) if args.words else (hyps, refs)
    out_rate, out_rep, out_tok = repeat_rate(measured_h)
    ref_rate, ref_rep, ref_tok = repeat_rate(measured_r)
    errors = [len(h.split()) - len(r.split()) for h, r in zip(measured_h, measured_r)]
    word_errors = (
        errors
        if args.words
        else [len(h.split()) - len(r.split()) for h, r in zip(hyp_words, ref_words)]
    )
    shift_error = output_pieces_error(
        word_errors, sum(len(h.split()) for h in hyps), sum(len(h.split()) for h in hyp_words)
    )
    buckets = {}
    for name, _, _ in BUCKETS:
        members = [k for k, e in enumerate(errors) if bucket_of(e) == name]
        buckets[name] = {
            "sentences": len(members),
            "sacrebleu": bleu([hyp_words[k] for k in members], [ref_words[k] for k in members],
                              args.tokenize),  # fmt: skip
        }
    report = {
        "label": gen.label,
        "path": gen.path,
        "sentences": len(ids),
        "unit": unit,
        "sacrebleu": bleu(hyp_words, ref_words, args.tokenize),
        "repeats": {"output": out_rate, "reference": ref_rate, "output_repeats": out_rep,
                    "output_tokens": out_tok, "reference_repeats": ref_rep,
                    "reference_tokens": ref_tok},  # fmt: skip
        "length_error": {
            **length_stats(errors),
            "histogram": histogram(errors),
            # --length-shift counts pieces: fitted only where the outputs are printed as pieces
            "fitted_shift": None if scheme == "none" else fitted_length_shift(shift_error),
        },
        "bleu_by_length_error": buckets,
        "confidence": None,
        "passes": None,
        "oscillation": None,
        "bleu_per_pass": None,
        "sentences_per_s": gen.sentences_per_s,
    }
    probs = [2.0**v for i in ids for v in gen.logprobs.get(i, [])]
    if probs:
        low = sum(p < args.confidence for p in probs)
        report["confidence"] = {"level": args.confidence, "below": low / len(probs),
                                "positions": len(probs)}  # fmt: skip
    passes = [gen.passes[i] for i in ids if i in gen.passes]
    if passes:
        few = [
            gen.passes[i] < math.ceil(math.log2(len(h.split())))
            for i, h in zip(ids, measured_h)
            if i in gen.passes and h.split()
        ]
        report["passes"] = {
            "mean": statistics.mean(passes),
            "min": min(passes),
            "max": max(passes),
            "below_log2_n": sum(few) / len(few) if few else 0.0,
        }
    if gen.history:
        report.update(history_report(gen, ids, ref_words, hyp_words, args.tokenize))
    return report


def histogram(errors: List[int]) -> Dict[str, int]:
    counts: Dict[int, int] = {}
    for e in errors:
        counts[e] = counts.get(e, 0) + 1
    return {str(e): counts[e] for e in sorted(counts)}


def history_report(gen: Generated, ids, ref_words, hyp_words, tokenize) -> Dict:
    """Oscillation counts and sacreBLEU after each pass, from the E- lines."""
    changes = reversions = pieces = oscillating = 0
    runs: List[Optional[List[str]]] = []
    for i in ids:
        steps = gen.history.get(i)
        if not steps:
            runs.append(None)
            continue
        run = [steps[k] for k in sorted(steps)]
        c, r = oscillation([p.split() for p in run])
        changes, reversions, oscillating = changes + c, reversions + r, oscillating + (r > 0)
        pieces += len(run[-1].split())
        runs.append(run)
    if not any(runs):
        return {}
    scheme = detect_scheme([run[-1] for run in runs if run])
    depth = max(len(run) for run in runs if run)
    per_pass = []
    for k in range(depth):  # a sentence that stopped early keeps its last output
        hyps = [hyp_words[n] if run is None else to_words(run[min(k, len(run) - 1)], scheme)
                for n, run in enumerate(runs)]  # fmt: skip
        per_pass.append(bleu(hyps, ref_words, tokenize))
    return {
        "oscillation": {
            "changes": changes,
            "reversions": reversions,
            "pieces": pieces,
            "per_piece": reversions / pieces if pieces else 0.0,
            "share_of_changes": reversions / changes if changes else 0.0,
            "sentences_with_reversion": oscillating,
        },
        "bleu_per_pass": per_pass,
    }
