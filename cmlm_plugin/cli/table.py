"""``cmlm-table``: the Mask-Predict paper's BLEU table (Ghazvininejad et al., 2019, Table 1).

    cmlm-table DATA_BIN --cmlm [LABEL=]CKPT [--fairseq-cmlm [LABEL=]CKPT] [--ar [LABEL=]CKPT]
        [--iters 1,2,4,10] [--length-beams 1,2,3,5] [--configs CONFIG...] [--beams 1,5]
        [--pair wmt14-en-de]
        [--remove-bpe sentencepiece] [--tokenized-bleu] [--compound-split] [--cpu]
        [--markdown OUT.md] [--json OUT.json] [--plot OUT.png]

Every cell is one run of the real ``fairseq-generate`` on the test set: our models
(``--task cmlm``) at each decoding configuration (``cli/decode_config.py``: ``--configs
T=10,l=5 S=10,b=4 ...``; ``--iters`` x ``--length-beams`` is the grid of ``T=t,l=n``, the
default when ``--configs`` is not given); fairseq's own ``cmlm_transformer`` (``--task
translation_lev``) at the same T and l for every configuration it can run (T and l only),
passed to it as ``--iter-decode-max-iter T-1`` because fairseq counts its first pass apart;
an autoregressive fairseq ``transformer`` at each beam size. For each cell: sacreBLEU on
detokenized text (signature printed; ``--tokenize zh`` for Chinese), optionally tokenized
BLEU (``--tokenized-bleu``: sacreBLEU's 13a tokens scored without further tokenization,
with ``##AT##-##AT##`` compound splitting under ``--compound-split`` -- close to, not
identical with, the paper's Moses tokenizer + multi-bleu), sentences/s and tokens/s as
fairseq-generate times them (model loading excluded), sacreBLEU's brevity penalty, the
length error in words (output minus reference, whitespace-separated words of the
detokenized text: its mean, and the shares exactly right and within +-2), decoder passes
per sentence
(``--print-step``), and the outputs that still hold ``<mask>`` or ``<unk>``. Cells beyond
plain T and l get a ``config`` column. The paper's numbers are printed beside ours where
``--pair`` names one of its language pairs (plain T and l cells only).
"""

import argparse
import json
import re
import statistics
import subprocess
import sys
from typing import Dict, List, Optional

from ..errors import CMLMPluginError
from .decode_config import argument, grid, parse
from .plotting import pyplot

# Table 1, CMLM-base with mask-predict, T=10, l=5, distilled data. These four cells
# are the ones this project could check (the figures, the same values quoted
# for the paper by the Mask-Predict repository's issues and benchmark listings);
# the T=4, EN-ZH and autoregressive cells are not printed until checked.
PAPER = {
    ("wmt14-en-de", 10, 5): 27.03,
    ("wmt14-de-en", 10, 5): 30.53,
    ("wmt16-en-ro", 10, 5): 33.08,
    ("wmt16-ro-en", 10, 5): 33.31,
}
PAIRS = sorted({pair for pair, _, _ in PAPER})
_TRANSLATED = re.compile(
    r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s "
    r"\(([\d.]+) sentences/s, ([\d.]+) tokens/s\)"
)


def numbers(text: str, flag: str) -> List[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise CMLMPluginError(f"{flag} takes positive integers separated by commas, got {text!r}")
    return values


def parse_generate(stdout: str, stderr: str) -> Dict:
    """Hypotheses, references, passes and timing from fairseq-generate's output."""
    hyps, refs, steps = {}, {}, {}
    for line in stdout.splitlines():
        tag, _, rest = line.partition("\t")
        kind, _, index = tag.partition("-")
        if not index.isdigit():
            continue
        if kind == "D":
            hyps[int(index)] = rest.split("\t", 1)[1] if "\t" in rest else ""
        elif kind == "T":
            refs[int(index)] = rest
        elif kind == "I":
            steps[int(index)] = int(rest)
    timing = _TRANSLATED.search(stdout + stderr)
    if timing is None or not hyps:
        raise CMLMPluginError("fairseq-generate printed no translations: see its log above")
    ids = sorted(hyps)
    return {
        "hyps": [hyps[i] for i in ids],
        "refs": [refs.get(i, "") for i in ids],
        "passes": statistics.mean(steps.values()) if steps else None,
        "sentences": int(timing.group(1).replace(",", "")),
        "seconds": float(timing.group(3)),
        "sentences_per_s": float(timing.group(4)),
        "tokens_per_s": float(timing.group(5)),
    }


def split_compounds(text: str) -> str:
    """``a-b`` -> ``a ##AT##-##AT## b``, the compound splitting of WMT EN-DE scoring."""
    return re.sub(r"(?<=\S)-(?=\S)", " ##AT##-##AT## ", text)


def scores(
    hyps: List[str], refs: List[str], tokenized: bool, compound: bool, tokenize: str
) -> Dict:
    import sacrebleu
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    bleu = sacrebleu.metrics.BLEU(tokenize=tokenize)
    corpus = bleu.corpus_score(hyps, [refs])
    out = {
        "sacrebleu": round(corpus.score, 2),
        "brevity_penalty": round(corpus.bp, 3),
        "signature": str(bleu.get_signature()),
        "with_mask_or_unk": sum("<mask>" in h or "<unk>" in h for h in hyps),
        "distinct_outputs": len(set(hyps)),  # far below the sentences: the source is ignored
        **length_errors(hyps, refs),
    }
    if tokenized:
        tok = Tokenizer13a()
        prep = (lambda s: split_compounds(tok(s))) if compound else tok
        score = sacrebleu.metrics.BLEU(tokenize="none").corpus_score(
            [prep(h) for h in hyps], [[prep(r) for r in refs]]
        )
        out["tokenized_bleu"] = round(score.score, 2)
    return out


def length_errors(hyps: List[str], refs: List[str]) -> Dict:
    """Output minus reference length in words: mean, share exact, share within +-2."""
    errors = [len(h.split()) - len(r.split()) for h, r in zip(hyps, refs)]
    return {
        "length_error_mean": round(statistics.mean(errors), 3),
        "length_exact": round(sum(e == 0 for e in errors) / len(errors), 4),
        "length_within_2": round(sum(abs(e) <= 2 for e in errors) / len(errors), 4),
    }


def configs(args) -> List:
    """The configurations: the --iters x --length-beams grid, then --configs, once each."""
    chosen = list(args.configs or [])
    if args.iters or args.length_beams or not chosen:
        iters = numbers(args.iters or "1,2,4,10", "--iters")
        chosen = grid(iters, numbers(args.length_beams or "1,2,3,5", "--length-beams")) + chosen
    return list(dict.fromkeys(chosen))


def cells(args) -> List[Dict]:
    """The runs to make: one dict per table cell."""
    out = []
    for kind, values in (("cmlm", args.cmlm), ("fairseq-cmlm", args.fairseq_cmlm), ("ar", args.ar)):
        for value in values or []:
            label, _, path = value.rpartition("=")
            label = label or kind
            if kind == "ar":
                out += [dict(kind=kind, label=label, path=path, beam=b) for b in args.beams]
                continue
            chosen = args.configs
            if kind == "fairseq-cmlm":  # its generator runs T and l only (impl is ours)
                chosen = dict.fromkeys(c.baseline() for c in chosen if c.fairseq_comparable)
            for config in chosen:
                cell = dict(kind=kind, label=label, path=path, config=str(config))
                out.append({**cell, "T": config.calls, "l": config.length_beams,
                            "plain": config.plain})  # fmt: skip
    return out


def command(cell: Dict, args) -> List[str]:
    # --user-dir also for fairseq's own models: the plugin's weights-only allow-list
    base = [sys.executable, "-m", "fairseq_cli.generate", args.data, "--user-dir", args.user_dir]
    base += [
        "--path",
        cell["path"],
        "--gen-subset",
        args.subset,
        "--batch-size",
        str(args.batch_size),
    ]
    base += ["--required-batch-size-multiple", "1"]  # else fairseq drops the last sentences
    if args.remove_bpe:
        base += ["--remove-bpe", args.remove_bpe]
    if args.cpu:
        base.append("--cpu")
    if cell["kind"] == "ar":
        return base + ["--task", "translation", "--beam", str(cell["beam"])]
    config = parse(cell["config"])
    if cell["kind"] == "cmlm":
        return base + ["--task", "cmlm", *config.flags(), "--print-step"]
    # fairseq's generator: --iter-decode-max-iter T-1 (it counts the passes after the first)
    return base + ["--task", "translation_lev", *config.fairseq_flags(), "--print-step"]


def run_cell(cell: Dict, args) -> Dict:
    proc = subprocess.run(command(cell, args), capture_output=True, text=True)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise CMLMPluginError(f"fairseq-generate failed for {describe(cell)}: {tail[0]}")
    found = parse_generate(proc.stdout, proc.stderr)
    if found["passes"] is not None and cell["kind"] == "fairseq-cmlm":
        found["passes"] += 1  # fairseq reports the index of its last pass
    found.update(scores(found["hyps"], found["refs"], args.tokenized_bleu, args.compound_split,
                        args.tokenize))  # fmt: skip
    del found["hyps"], found["refs"]
    return {**cell, **found}


def describe(cell: Dict) -> str:
    if cell["kind"] == "ar":
        return f"{cell['label']} beam {cell['beam']}"
    return f"{cell['label']} {cell['config']}"


def markdown(rows: List[Dict], pair: Optional[str], tokenized: bool) -> str:
    configs = any(not r.get("plain", True) for r in rows if r["kind"] != "ar")
    head = ["system", "T", "l / beam"] + (["config"] * configs) + ["sacreBLEU"]
    head += ["tok. BLEU"] * tokenized
    head += ["BP", "len. exact / ±2", "len. error"]
    head += ["sent/s", "tokens/s", "passes/sent", "with <mask>/<unk>"] + (["paper"] if pair else [])
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        ar = r["kind"] == "ar"
        cols = [r["label"], "AR" if ar else str(r["T"]), str(r["beam"] if ar else r["l"])]
        if configs:
            cols.append("-" if ar else r["config"])
        cols.append(f"{r['sacrebleu']:.2f}")
        if tokenized:
            cols.append(f"{r['tokenized_bleu']:.2f}")
        cols.append(f"{r['brevity_penalty']:.3f}")
        cols.append(f"{100 * r['length_exact']:.1f} / {100 * r['length_within_2']:.1f} %")
        cols.append(f"{r['length_error_mean']:+.2f}")
        cols += [f"{r['sentences_per_s']:.1f}", f"{r['tokens_per_s']:.0f}"]
        cols.append("-" if r["passes"] is None else f"{r['passes']:.2f}")
        cols.append(f"{r['with_mask_or_unk']} / {r['sentences']}")
        if pair:
            plain = not ar and r.get("plain", True)
            paper = PAPER.get((pair, r["T"], r["l"])) if plain else None
            cols.append("-" if paper is None else f"{paper:.2f}")
        lines.append("| " + " | ".join(cols) + " |")
    return "\n".join(lines)


def series(row: Dict) -> str:
    """A row's configuration without its T (or S): one line of the BLEU-vs-T plot."""
    config = parse(row["config"])
    rest = ",".join(config.items()[1:])
    return f"diffusion {rest}" if config.diffusion else rest


def plot(rows: List[Dict], path: str) -> None:
    plt = pyplot()
    fig, (by_t, by_speed) = plt.subplots(1, 2, figsize=(11, 4.2))
    groups: Dict = {}
    for r in rows:
        key = (r["label"], "AR" if r["kind"] == "ar" else series(r))
        groups.setdefault(key, []).append(r)
    for i, ((label, sub), members) in enumerate(groups.items()):
        name = f"{label} (beams)" if sub == "AR" else f"{label} {sub}"
        style = dict(color=f"C{i % 10}", label=name)  # one colour per group in both panels
        xs, ys = [m["sentences_per_s"] for m in members], [m["sacrebleu"] for m in members]
        if members[0]["kind"] != "ar":
            by_t.plot([m["T"] for m in members], ys, "o-", **style)
        by_speed.plot(xs, ys, "o-" if members[0]["kind"] != "ar" else "s--", **style)
    by_t.set(xlabel="decoder passes T (steps S)", ylabel="sacreBLEU", xscale="log",
             title="BLEU vs T")  # fmt: skip
    by_speed.set(xlabel="sentences / s", ylabel="sacreBLEU", xscale="log", title="BLEU vs speed")
    for ax in (by_t, by_speed):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cmlm-table", description=__doc__.split("\n\n")[0])
    p.add_argument("data", help="binarized data dir (its test set is decoded)")
    p.add_argument("--cmlm", action="append", metavar="[LABEL=]CKPT", help="our model (repeatable)")
    p.add_argument("--fairseq-cmlm", action="append", metavar="[LABEL=]CKPT",
                   help="fairseq's cmlm_transformer (task translation_lev)")  # fmt: skip
    p.add_argument("--ar", action="append", metavar="[LABEL=]CKPT",
                   help="autoregressive fairseq transformer (task translation)")  # fmt: skip
    p.add_argument("--iters", help="grid of decoder passes T (default 1,2,4,10)")
    p.add_argument("--length-beams", help="grid of length candidates l (default 1,2,3,5)")
    p.add_argument("--configs", nargs="+", type=argument, metavar="CONFIG",
                   help="decoding configurations, e.g. T=10,l=5 T=10,l=5,prune=1 S=10,b=4 "
                   "(cli/decode_config.py; added to the --iters x --length-beams grid when "
                   "those are given)")  # fmt: skip
    p.add_argument("--beams", default="1,5", help="beam sizes of --ar models")
    p.add_argument("--pair", choices=PAIRS, help="print the paper's numbers for this pair")
    p.add_argument("--subset", default="test")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--remove-bpe", default=None, help="e.g. sentencepiece (fairseq's flag)")
    p.add_argument("--tokenize", default="13a", choices=("13a", "intl", "zh", "char", "none"),
                   help="sacreBLEU tokenizer (zh for Chinese targets)")  # fmt: skip
    p.add_argument("--tokenized-bleu", action="store_true", help="also tokenized BLEU")
    p.add_argument("--compound-split", action="store_true", help="EN-DE compound splitting")
    p.add_argument("--user-dir", default=None, help="plugin folder (default: the installed one)")
    p.add_argument("--cpu", action="store_true")
    p.add_argument("--markdown", help="write the table here too")
    p.add_argument("--json", help="write every cell's numbers here")
    p.add_argument("--plot", help="PNG: BLEU vs T per l, and BLEU vs sentences/s")
    return p


def main(argv=None) -> None:
    from ..errors import install_excepthook

    install_excepthook()
    args = build_parser().parse_args(argv)
    if not (args.cmlm or args.fairseq_cmlm or args.ar):
        raise CMLMPluginError("nothing to decode: give --cmlm, --fairseq-cmlm or --ar CKPT")
    if args.compound_split and not args.tokenized_bleu:
        raise CMLMPluginError("--compound-split applies to tokenized BLEU: add --tokenized-bleu")
    args.configs = configs(args)
    args.beams = numbers(args.beams, "--beams")
    if args.user_dir is None:
        import os

        import cmlm_plugin

        args.user_dir = os.path.dirname(cmlm_plugin.__file__)
    rows = []
    todo = cells(args)
    for i, cell in enumerate(todo, 1):
        row = run_cell(cell, args)
        rows.append(row)
        print(f"[{i}/{len(todo)}] {describe(cell)}: sacreBLEU {row['sacrebleu']:.2f}, "
              f"{row['sentences_per_s']:.1f} sent/s", file=sys.stderr, flush=True)  # fmt: skip
    table = markdown(rows, args.pair, args.tokenized_bleu)
    print(table)
    print(f"\nsacreBLEU signature: {rows[0]['signature']}")
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(table + f"\n\nsacreBLEU signature: {rows[0]['signature']}\n")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
