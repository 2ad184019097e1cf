"""Decode one test set with several samplers and print BLEU and model calls per sentence.

    python examples/translation/sampler_table.py DATA_BIN CKPT [--subset test] [--cpu]
        [--remove-bpe sentencepiece] [--configs "T=1" "T=10" "S=10,b=8" "S=256,c=0.9"]

Each configuration runs ``fairseq-generate`` once, in the plugin's decoding-configuration
language (``cmlm_plugin/cli/decode_config.py``): ``T=k`` is Mask-Predict with k passes,
``S=k`` the masked-diffusion sampler with k steps, ``b=`` its block length, ``c=`` a
confidence threshold (Fast-dLLM), ``l=`` the length candidates (default 1); also
``prune=K``, ``stop`` and ``impl=``. BLEU is sacreBLEU as fairseq-generate prints it; calls
per sentence are the mean of the ``I-`` lines (--print-step: passes for Mask-Predict, NFE
for diffusion). Prints a Markdown table, one row per configuration in its canonical form.
"""

import argparse
import re
import statistics
import subprocess
import sys

from cmlm_plugin.cli.decode_config import argument, parse

DEFAULT = [
    parse(c) for c in ("T=1", "T=4", "T=10", "S=4", "S=10", "S=10,b=4", "S=256", "S=256,c=0.9")
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data")
    parser.add_argument("checkpoint")
    parser.add_argument("--subset", default="test")
    parser.add_argument("--user-dir", default="cmlm_plugin")
    parser.add_argument("--remove-bpe", default=None)
    parser.add_argument("--batch-size", default="128")
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--configs", nargs="+", type=argument, default=DEFAULT)
    args = parser.parse_args()

    print("| sampler | BLEU | model calls / sentence |\n| --- | --- | --- |")
    for config in args.configs:
        command = ["fairseq-generate", args.data, "--user-dir", args.user_dir, "--task", "cmlm",
                   "--path", args.checkpoint, "--gen-subset", args.subset, "--batch-size",
                   args.batch_size, "--scoring", "sacrebleu", "--print-step",
                   *config.flags()]  # fmt: skip
        if args.remove_bpe:
            command += ["--remove-bpe", args.remove_bpe]
        if args.cpu:
            command.append("--cpu")
        proc = subprocess.run(command, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"error: {config} failed:\n{proc.stderr[-2000:]}")
        bleu = re.search(r"BLEU = ([\d.]+)", proc.stdout + proc.stderr)
        calls = [int(m) for m in re.findall(r"^I-\d+\t(\d+)$", proc.stdout, re.M)]
        print(
            f"| {config} | {bleu.group(1) if bleu else '?'} | "
            f"{statistics.mean(calls) if calls else float('nan'):.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
