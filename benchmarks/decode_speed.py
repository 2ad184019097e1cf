"""Decoding speed, side by side: our Mask-Predict generator, fairseq's
IterativeRefinementGenerator on the same weights, and autoregressive beam search.

    python benchmarks/decode_speed.py DATA_BIN --ours CONVERTED.pt --fairseq-cmlm FAIRSEQ.pt \
        --ar AR.pt [--configs T=1,l=1 T=4,l=1 T=10,l=5] [--beams 1,5] [--batch-sizes 1,128]
        [--sentences 100,256] [--repeats 3] [--threads 2] [--cpu] [--out benchmarks/results]

``--configs`` are decoding configurations of ``cmlm_plugin/cli/decode_config.py``, e.g.
``T=10,l=5`` (T decoder passes, l length candidates), ``T=10,l=5,prune=1`` (keep the best
length candidate after 1 pass), ``T=10,l=5,stop`` (``--stop-unchanged``), ``S=10`` and
``S=10,c=0.9`` (the masked-diffusion sampler, 10 steps, a confidence threshold; their passes
are model calls, NFE), ``impl=int8`` or ``impl=modules`` (our ``--decoder-impl``, default
``fast``). Every system is built as ``fairseq-generate`` builds it: its flags (the
configuration's; ``--beam`` for AR) parsed by fairseq's generation parser, the task set up
from them, the checkpoint loaded into that task, ``task.build_generator(models,
cfg.generation)``. fairseq's generator runs once per T and l of the configurations it can
run (no S, prune or stop) with ``--iter-decode-max-iter T-1``, its count of passes after
the first. ``--ours`` is ``cmlm-convert fairseq-cmlm FAIRSEQ.pt CONVERTED.pt``: the same
network as ``--fairseq-cmlm``, so both generators decode identical weights.

Every system decodes the same first N test sentences (N from ``--sentences``, one per
batch size), batched in the same order (by source length, as fairseq does). After one
warm-up batch per run, the runs are interleaved (A B C ... A B C ...) ``--repeats`` times;
reported: median sentences/s and output tokens/s, latency per sentence at batch 1 (median
and p90 over all sentences of all repeats), decoder passes per sentence, peak GPU memory
(CUDA only; not measured on CPU), sacreBLEU of the outputs, and the ratios ours / fairseq's
generator at the same T (or S) and l and ours / AR beam. ``--lengths 10,20,40,80`` adds a
table of seconds per sentence at forced target lengths (ours: an all-``<mask>`` template
of that length; AR: ``min_len = max_len``). Writes JSON, Markdown and a PNG.

``--fairseq-cmlm`` and ``--ar`` may be left out (no fairseq or AR rows). ``impl=compiled``
and other non-``fast`` paths are also compared with ``fast`` at the same configuration
(ratio, outputs that differ); ``--full-warmup`` warms up on every batch, so that a
compiled path has compiled every shape before timing, and each row's ``warmup_s`` (the
first run, compiling included) gives the compile cost. ``--half fp16|bf16`` decodes every
system in half precision (``--fp16``; bf16 by casting the model: fairseq's commands have
no bf16 decoding).
"""

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from typing import Dict, List

import torch

from cmlm_plugin.cli.decode_config import argument, parse


def generate_cfg(data, path, flags):
    """The configuration ``fairseq-generate DATA --path PATH FLAGS`` runs with."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    import cmlm_plugin

    user_dir = os.path.dirname(cmlm_plugin.__file__)  # the plugin's allow-list, also for fairseq's
    argv = [data, "--path", path, "--user-dir", user_dir, *[str(f) for f in flags]]
    args = options.parse_args_and_arch(options.get_generation_parser(), argv)
    return convert_namespace_to_omegaconf(args)


def load(cfg):
    """The model and task of ``cfg``, loaded as fairseq-generate loads them."""
    from fairseq import checkpoint_utils, tasks

    task = tasks.setup_task(cfg.task)
    models, _ = checkpoint_utils.load_model_ensemble([cfg.common_eval.path], task=task)
    models[0].prepare_for_inference_(cfg)  # eval mode, as fairseq-generate sets it
    return models[0], task


def build(data, path, flags, device):
    """Model, task and generator of ``fairseq-generate DATA --path PATH FLAGS``."""
    cfg = generate_cfg(data, path, flags)
    model, task = load(cfg)
    if cfg.common.fp16:  # as fairseq-generate: the whole model in float16
        model.half()
    elif cfg.common.bf16:
        model.to(torch.bfloat16)
    model.to(device)
    return model, task, task.build_generator([model], cfg.generation)


def batches(task, subset, count, size, device):
    """The first ``count`` sentences of ``subset``, sorted by source length, in batches."""
    from fairseq import utils

    task.load_dataset(subset)
    data = task.dataset(subset)
    ids = sorted(range(min(count, len(data))), key=lambda i: (data.src_sizes[i], i))
    out = []
    for start in range(0, len(ids), size):
        sample = data.collater([data[i] for i in ids[start : start + size]])
        out.append(utils.move_to_cuda(sample) if device == "cuda" else sample)
    return out


class System:
    """One model + generator, and the batches of its own task (same sentence ids)."""

    def __init__(self, name, model, task, generator, samples, pass_offset=0):
        self.name, self.model, self.task = name, model, task
        self.generator, self.samples = generator, samples
        self.pass_offset = pass_offset  # fairseq reports the index of its last pass

    def run(self, synchronize):
        latencies, outputs, passes = [], {}, []
        start = time.perf_counter()
        for sample in self.samples:
            t0 = time.perf_counter()
            hypos = self.task.inference_step(self.generator, [self.model], sample)
            synchronize()
            latencies.append((time.perf_counter() - t0) / len(hypos))
            for i, sid in enumerate(sample["id"].tolist()):
                outputs[sid] = hypos[i][0]["tokens"].cpu()
                if "steps" in hypos[i][0]:
                    passes.append(hypos[i][0]["steps"] + self.pass_offset)
        seconds = time.perf_counter() - start
        return seconds, latencies, outputs, passes


DEFAULT_CONFIGS = [parse(c) for c in ("T=1,l=1", "T=4,l=1", "T=10,l=5")]
REMOVE_BPE = None  # --remove-bpe: fairseq's post-processing name, e.g. sentencepiece


def detok(dictionary, tokens):
    ignore = {dictionary.bos(), dictionary.eos(), dictionary.pad()}
    return dictionary.string(tokens, REMOVE_BPE, extra_symbols_to_ignore=ignore)


def bleu(system, outputs, references):
    import sacrebleu

    ids = sorted(outputs)
    hyps = [detok(system.task.target_dictionary, outputs[i]) for i in ids]
    return round(sacrebleu.corpus_bleu(hyps, [[references[i] for i in ids]]).score, 2)


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def build_systems(args, size, count, device):
    systems = []
    fairseq_done = set()
    half = [f"--{args.half}"] if args.half else []  # --fp16 / --bf16 for every system
    for config in args.configs:
        runs = [("ours", args.ours, ["--task", "cmlm", *config.flags(), *half], config)]
        comparable = args.fairseq_cmlm and config.fairseq_comparable
        if comparable and config.baseline() not in fairseq_done:
            baseline = config.baseline()  # fairseq once per T and l; it runs T-1 more passes
            fairseq_done.add(baseline)
            flags = ["--task", "translation_lev", *baseline.fairseq_flags(), *half]
            runs.append(("fairseq", args.fairseq_cmlm, flags, baseline))
        for kind, path, flags, shown in runs:
            model, task, generator = build(args.data, path, flags, device)
            samples = batches(task, args.subset, count, size, device)
            offset = 1 if kind == "fairseq" else 0
            system = System(f"{kind} {shown}", model, task, generator, samples, offset)
            system.config = shown
            systems.append(system)
    for beam in args.beams if args.ar else []:
        flags = ["--task", "translation", "--beam", beam, *half]
        model, task, generator = build(args.data, args.ar, flags, device)
        samples = batches(task, args.subset, count, size, device)
        systems.append(System(f"AR beam {beam}", model, task, generator, samples))
        systems[-1].config = None
    return systems


def measure(systems, repeats, synchronize, device, full_warmup=False):
    results = {s.name: {"seconds": [], "latencies": []} for s in systems}
    for system in systems:  # warm-up: one batch each (all with --full-warmup: compiles)
        warm = System(system.name, system.model, system.task, system.generator,
                      system.samples if full_warmup else system.samples[:1])  # fmt: skip
        results[system.name]["warmup_s"] = warm.run(synchronize)[0]
    for _ in range(repeats):
        for system in systems:  # interleaved: A B C ... A B C ...
            if device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            seconds, latencies, outputs, passes = system.run(synchronize)
            entry = results[system.name]
            entry["seconds"].append(seconds)
            entry["latencies"] += latencies
            entry["outputs"], entry["passes"] = outputs, passes
            if device == "cuda":
                entry["peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return results


def summarise(systems, results, references, size) -> List[Dict]:
    rows = []
    for system in systems:
        entry = results[system.name]
        count = len(entry["outputs"])
        tokens = sum(int(t.numel()) for t in entry["outputs"].values())
        median = statistics.median(entry["seconds"])
        rows.append(
            {
                "system": system.name,
                "config": None if system.config is None else str(system.config),  # AR: None
                "batch": size,
                "sentences": count,
                "repeats": len(entry["seconds"]),
                "sentences_per_s": round(count / median, 2),
                "tokens_per_s": round(tokens / median, 1),
                "latency_ms_median": round(1000 * statistics.median(entry["latencies"]), 2),
                "latency_ms_p90": round(1000 * percentile(entry["latencies"], 0.9), 2),
                "passes_per_sentence": (
                    round(statistics.mean(entry["passes"]), 2) if entry["passes"] else None
                ),
                "peak_gpu_mib": round(entry["peak_mib"], 1) if "peak_mib" in entry else None,
                "warmup_s": round(entry["warmup_s"], 2),  # first run: includes compiling
                "bleu": bleu(system, entry["outputs"], references),
            }
        )
    return rows


def ratios(rows) -> List[str]:
    by = {(r["system"], r["batch"]): r for r in rows}
    lines = []
    for (name, batch), row in by.items():
        if not name.startswith("ours"):
            continue
        theirs = by.get((f"fairseq {parse(row['config']).baseline()}", batch))
        if theirs:
            lines.append(
                f"batch {batch}, {name[5:]}: ours / fairseq's generator = "
                f"{row['sentences_per_s'] / theirs['sentences_per_s']:.2f}x sentences/s "
                f"(BLEU {row['bleu']} vs {theirs['bleu']})"
            )
        for beam in (1, 5):
            ar = by.get((f"AR beam {beam}", batch))
            if ar:
                lines.append(
                    f"batch {batch}, {name[5:]}: ours / AR beam {beam} = "
                    f"{row['sentences_per_s'] / ar['sentences_per_s']:.2f}x sentences/s"
                )
    return lines


def against_fast(systems, results, size) -> List[str]:
    """Each of our non-``fast`` paths against ``fast`` at the same configuration: the
    ratio of sentences/s and how many outputs differ (same tokens expected at fp32)."""
    by = {s.name: s for s in systems}
    lines = []
    for system in systems:
        config = system.config
        if not system.name.startswith("ours") or config is None or config.impl == "fast":
            continue
        fast = by.get(f"ours {dataclasses.replace(config, impl='fast')}")
        if fast is None:
            continue
        mine, theirs = results[system.name], results[fast.name]
        differ = sum(
            not torch.equal(mine["outputs"][i], theirs["outputs"][i]) for i in mine["outputs"]
        )
        speed = statistics.median(theirs["seconds"]) / statistics.median(mine["seconds"])
        lines.append(
            f"batch {size}, {config}: {config.impl} / fast = {speed:.2f}x sentences/s, "
            f"{differ} of {len(mine['outputs'])} outputs differ; warm-up "
            f"{mine['warmup_s']:.1f} s against {theirs['warmup_s']:.1f} s"
        )
    return lines


def markdown(rows) -> str:
    head = ["system", "batch", "sent/s", "tokens/s", "latency ms (median / p90)",
            "passes/sent", "peak GPU MiB", "sacreBLEU"]  # fmt: skip
    out = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        passes = "-" if r["passes_per_sentence"] is None else f"{r['passes_per_sentence']:.2f}"
        peak = "-" if r["peak_gpu_mib"] is None else f"{r['peak_gpu_mib']:.0f}"
        out.append(
            f"| {r['system']} | {r['batch']} | {r['sentences_per_s']:.1f} | "
            f"{r['tokens_per_s']:.0f} | {r['latency_ms_median']:.1f} / {r['latency_ms_p90']:.1f} "
            f"| {passes} | {peak} | {r['bleu']:.2f} |"
        )
    return "\n".join(out)


def plot(rows, path):
    from cmlm_plugin.cli.plotting import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for r in rows:
        marker = "s" if r["system"].startswith("AR") else ("o" if "ours" in r["system"] else "^")
        ax.scatter(r["sentences_per_s"], r["bleu"], marker=marker)
        ax.annotate(f"{r['system']} b{r['batch']}", (r["sentences_per_s"], r["bleu"]), fontsize=6)
    ax.set(xscale="log", xlabel="sentences / s", ylabel="sacreBLEU", title="BLEU vs speed")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def length_scaling(args, device, synchronize) -> List[Dict]:
    """Seconds per sentence when the output is forced to each length (batch 1)."""
    from fairseq import utils

    config = parse("T=10,l=1")
    ours, ours_task, gen = build(args.data, args.ours, ["--task", "cmlm", *config.flags()], device)
    ar_flags = ["--task", "translation", "--beam", 5]
    ar, ar_task, _ = build(args.data, args.ar, ar_flags, device)
    mask = ours_task.target_dictionary.index("<mask>")
    samples = batches(ours_task, args.subset, args.length_sentences, 1, device)
    ar_samples = batches(ar_task, args.subset, args.length_sentences, 1, device)
    rows = []
    for length in args.lengths:
        template = torch.tensor([[1] + [mask] * length + [0]])  # fairseq's packed constraints
        template = utils.move_to_cuda(template) if device == "cuda" else template
        forced = ["--min-len", length, "--max-len-a", 0, "--max-len-b", length]
        ar_cfg = generate_cfg(args.data, args.ar, ar_flags + forced)
        ar_gen = ar_task.build_generator([ar], ar_cfg.generation)
        for name, model, task, generator, data, extra in (
            (f"ours {config}", ours, ours_task, gen, samples, {"constraints": template}),
            ("AR beam 5", ar, ar_task, ar_gen, ar_samples, {}),
        ):
            times = []
            for rep in range(args.repeats + 1):
                start = time.perf_counter()
                for sample in data:
                    task.inference_step(generator, [model], sample, **extra)
                synchronize()
                if rep:  # the first round warms up
                    times.append((time.perf_counter() - start) / len(data))
            ms = round(1000 * statistics.median(times), 2)
            rows.append({"system": name, "length": length, "ms_per_sentence": ms})
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data")
    p.add_argument("--ours", required=True, help="cmlm_plugin checkpoint (converted)")
    p.add_argument("--fairseq-cmlm", help="the same weights, fairseq's format (omit: none)")
    p.add_argument("--ar", help="autoregressive fairseq transformer (omit: no AR rows)")
    p.add_argument("--configs", nargs="+", type=argument, default=DEFAULT_CONFIGS,
                   help="decoding configurations, e.g. T=10,l=5 T=10,l=5,prune=1,impl=int8 "
                   "S=10,c=0.9 (cmlm_plugin/cli/decode_config.py)")  # fmt: skip
    p.add_argument("--beams", default="1,5")
    p.add_argument("--batch-sizes", default="1,128")
    p.add_argument("--sentences", default="100,256", help="sentences decoded per batch size")
    p.add_argument("--lengths", default="", help="forced target lengths, e.g. 10,20,40,80")
    p.add_argument("--length-sentences", type=int, default=20)
    p.add_argument("--subset", default="test")
    p.add_argument("--remove-bpe", default=None, help="e.g. sentencepiece, for BLEU")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--cpu", action="store_true")
    p.add_argument("--half", choices=["fp16", "bf16"], help="decode every system in half precision")
    p.add_argument("--full-warmup", action="store_true",
                   help="warm up on all batches, not one (compiled paths see every shape first)")  # fmt: skip
    p.add_argument("--out", default="benchmarks/results")
    args = p.parse_args(argv)
    global REMOVE_BPE
    REMOVE_BPE = args.remove_bpe
    args.beams = [int(b) for b in args.beams.split(",") if b]
    args.lengths = [int(n) for n in args.lengths.split(",") if n]
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    counts = [int(n) for n in args.sentences.split(",")]
    if len(counts) != len(sizes):
        sys.exit("error: give one --sentences count per --batch-sizes entry")
    if args.lengths and not args.ar:
        sys.exit("error: --lengths compares with AR beam 5: give --ar AR.pt")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() and not args.cpu else "cpu"
    synchronize = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    os.makedirs(args.out, exist_ok=True)

    rows, versus_fast = [], []
    for size, count in zip(sizes, counts):
        systems = build_systems(args, size, count, device)
        ref_task = systems[0].task  # ours: references without BOS
        references = {}
        for sample in systems[0].samples:
            for i, sid in enumerate(sample["id"].tolist()):
                references[sid] = detok(ref_task.target_dictionary, sample["target"][i].cpu())
        results = measure(systems, args.repeats, synchronize, device, args.full_warmup)
        rows += summarise(systems, results, references, size)
        versus_fast += against_fast(systems, results, size)
        print(markdown([r for r in rows if r["batch"] == size]), flush=True)
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "device": (
            torch.cuda.get_device_name() if device == "cuda" else f"cpu ({os.cpu_count()} cores)"
        ),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "rows": rows,
        "ratios": ratios(rows) + versus_fast,
    }
    if args.lengths:
        report["length_scaling"] = length_scaling(args, device, synchronize)
    text = markdown(rows) + "\n\n" + "\n".join(f"- {line}" for line in report["ratios"])
    if args.lengths:
        text += "\n\n| system | forced length | ms / sentence (batch 1) |\n| --- | --- | --- |\n"
        text += "\n".join(
            f"| {r['system']} | {r['length']} | {r['ms_per_sentence']:.1f} |"
            for r in report["length_scaling"]
        )
    print("\n".join(f"- {line}" for line in report["ratios"]))
    with open(os.path.join(args.out, "decode_speed.json"), "w") as f:
        json.dump(report, f, indent=1)
    with open(os.path.join(args.out, "decode_speed.md"), "w") as f:
        f.write(text + "\n")
    plot(rows, os.path.join(args.out, "decode_speed.png"))
    print(f"wrote {args.out}/decode_speed.{{json,md,png}}")


if __name__ == "__main__":
    main()
