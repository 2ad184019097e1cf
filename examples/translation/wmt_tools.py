"""Line tools of the WMT recipes (prepare-wmt14-en-de.sh, prepare-wmt16-en-ro.sh,
prepare-wmt17-en-zh.sh): clean and pair corpora, read WMT's sgm files, filter encoded
pairs by length, and the few extras one recipe needs.

    python wmt_tools.py pairs SRC TGT OUT PREFIX... [--per-corpus]
    python wmt_tools.py sgm IN OUT
    python wmt_tools.py lenfilter SRC TGT IN OUT MAX_LEN RATIO
    python wmt_tools.py ro-normalize {comma,1} FILE...
    python wmt_tools.py unzip ARCHIVE DEST PATTERN...
    python wmt_tools.py spm-train --input A B --model-prefix P --vocab-size N ...

Cleaning turns control characters, zero-width marks and runs of whitespace into one
space. Input is read as UTF-8 with newline="\\n": a stray carriage return inside a
sentence must not split it (that would shift one side of a parallel corpus against the
other); undecodable bytes become U+FFFD, and `pairs` stops when more than 1% of the pairs
hold one (a corpus in another encoding). Progress goes to stderr.
"""

import argparse
import fnmatch
import itertools
import os
import re
import sys
import zipfile

ODD = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]")
SEG = re.compile(r"<seg[^>]*>(.*)</seg>")
# Romanian: s/t with cedilla -> s/t with comma below; then (mode 1) no diacritics at all
RO_COMMA = str.maketrans("\u015e\u015f\u0162\u0163", "\u0218\u0219\u021a\u021b")
RO_PLAIN = str.maketrans(
    "\u0218\u0219\u021a\u021b\u0102\u0103\u00c2\u00e2\u00ce\u00ee", "SsTtAaAaIi"
)


def clean(line):
    return " ".join(ODD.sub(" ", line).split())


def read(path):
    return open(path, encoding="utf-8", errors="replace", newline="\n")


def write(path):
    return open(path, "w", encoding="utf-8")


def log(message):
    print(message, file=sys.stderr)


def pairs(src, tgt, out, prefixes, per_corpus=False):
    """Clean PREFIX.SRC/PREFIX.TGT line pairs into OUT.SRC/OUT.TGT, dropping pairs with an
    empty side. The undecodable-bytes check covers all corpora together, or (per_corpus)
    each corpus on its own, with its size reported."""

    def check(bad, n, what, fix):
        if bad > n / 100:
            sys.exit(
                f"error: {bad} of {n} pairs{what} hold bytes that are not UTF-8: {fix} (iconv)"
            )

    total = kept = total_bad = 0
    with write(f"{out}.{src}") as fs, write(f"{out}.{tgt}") as ft:
        for prefix in prefixes:
            n = bad = 0
            with read(f"{prefix}.{src}") as a, read(f"{prefix}.{tgt}") as b:
                for x, y in itertools.zip_longest(a, b):
                    if x is None or y is None:
                        sys.exit(
                            f"error: {prefix}.{src} and {prefix}.{tgt} have different line counts"
                        )
                    n += 1
                    bad += "\ufffd" in x or "\ufffd" in y
                    x, y = clean(x), clean(y)
                    if x and y:
                        fs.write(x + "\n")
                        ft.write(y + "\n")
                        kept += 1
            if per_corpus:
                log(f"{prefix}: {n} pairs")
                check(bad, n, f" of {prefix}", "convert it")
            total += n
            total_bad += bad
    log(f"{out}: {kept} of {total} pairs kept (both sides non-empty)")
    if kept == 0:
        sys.exit("error: no training pair left")
    if not per_corpus:
        check(total_bad, total, "", "convert the files")


def sgm(inp, out):
    """The cleaned text of every <seg> of an sgm file, one per line."""
    n = 0
    with read(inp) as f, write(out) as g:
        for line in f:
            m = SEG.search(line)
            if m:
                g.write(clean(m.group(1)) + "\n")
                n += 1
    log(f"{out}: {n} segments from {inp}")


def lenfilter(src, tgt, inp, out, max_len, ratio):
    """Keep the pairs of IN.SRC/IN.TGT (space-separated pieces) whose sides have 1..max_len
    pieces and piece counts within a factor ratio of each other."""
    total = kept = 0
    with (
        read(f"{inp}.{src}") as a,
        read(f"{inp}.{tgt}") as b,
        write(f"{out}.{src}") as fs,
        write(f"{out}.{tgt}") as ft,
    ):
        for x, y in zip(a, b):
            total += 1
            n, m = len(x.split()), len(y.split())
            if 1 <= n <= max_len and 1 <= m <= max_len and n <= ratio * m and m <= ratio * n:
                fs.write(x)
                ft.write(y)
                kept += 1
    log(f"{out}: {kept} of {total} pairs kept (1..{max_len} pieces, ratio <= {ratio})")
    if kept == 0:
        sys.exit("error: the length filter kept no training pair")


def ro_normalize(mode, files):
    """Rewrite Romanian files in place: cedilla s/t -> comma below; mode "1" then drops
    every diacritic (Sennrich et al.'s WMT16 normalise-romanian.py + remove-diacritics.py)."""
    for path in files:
        with read(path) as f, write(path + ".tmp") as g:
            for line in f:
                line = line.translate(RO_COMMA)
                g.write(line.translate(RO_PLAIN) if mode == "1" else line)
        os.replace(path + ".tmp", path)


def unzip(archive, dest, patterns):
    """Extract the members of a zip whose base names match one of the glob patterns."""
    with zipfile.ZipFile(archive) as z:
        names = [
            n
            for n in z.namelist()
            if any(fnmatch.fnmatch(os.path.basename(n), p) for p in patterns)
        ]
        if not names:
            sys.exit(f"error: nothing in {archive} matches {' '.join(patterns)}")
        z.extractall(dest, names)


def spm_train(args):
    """A joint sentencepiece model with the special-symbol settings of sentencepiece_bpe.py
    (fairseq adds its own specials; <mask> stays whole) but a chosen character coverage
    and normalisation rule."""
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        input=",".join(args.input),
        model_prefix=args.model_prefix,
        vocab_size=args.vocab_size,
        model_type=args.model_type,
        character_coverage=args.character_coverage,
        normalization_rule_name=args.normalization,
        num_threads=args.threads,
        bos_id=-1,
        eos_id=-1,
        pad_id=-1,
        unk_id=0,
        user_defined_symbols=["<mask>"],
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pairs", help="clean and concatenate parallel corpora")
    p.add_argument("src")
    p.add_argument("tgt")
    p.add_argument("out", help="output prefix: writes OUT.SRC and OUT.TGT")
    p.add_argument("prefixes", nargs="+", metavar="PREFIX", help="corpus PREFIX.SRC/PREFIX.TGT")
    p.add_argument("--per-corpus", action="store_true", help="report and check each corpus")
    p = sub.add_parser("sgm", help="the cleaned segments of an sgm file")
    p.add_argument("inp", metavar="IN")
    p.add_argument("out")
    p = sub.add_parser("lenfilter", help="length and ratio filter on encoded pairs")
    p.add_argument("src")
    p.add_argument("tgt")
    p.add_argument("inp", metavar="IN")
    p.add_argument("out")
    p.add_argument("max_len", type=int)
    p.add_argument("ratio", type=float)
    p = sub.add_parser("ro-normalize", help="Romanian cedilla/diacritic normalisation in place")
    p.add_argument("mode", choices=["comma", "1"])
    p.add_argument("files", nargs="+", metavar="FILE")
    p = sub.add_parser("unzip", help="extract matching members of a zip archive")
    p.add_argument("archive")
    p.add_argument("dest")
    p.add_argument("patterns", nargs="+", metavar="PATTERN")
    p = sub.add_parser("spm-train", help="learn a joint sentencepiece model")
    p.add_argument("--input", nargs="+", required=True)
    p.add_argument("--model-prefix", required=True)
    p.add_argument("--vocab-size", type=int, required=True)
    p.add_argument("--model-type", default="bpe", help="bpe, unigram, ... (sentencepiece's)")
    p.add_argument("--character-coverage", type=float, default=1.0)
    p.add_argument("--normalization", default="nmt_nfkc", help="sentencepiece rule name")
    p.add_argument("--threads", type=int, default=1)
    a = parser.parse_args()

    if a.command == "pairs":
        pairs(a.src, a.tgt, a.out, a.prefixes, a.per_corpus)
    elif a.command == "sgm":
        sgm(a.inp, a.out)
    elif a.command == "lenfilter":
        lenfilter(a.src, a.tgt, a.inp, a.out, a.max_len, a.ratio)
    elif a.command == "ro-normalize":
        ro_normalize(a.mode, a.files)
    elif a.command == "unzip":
        unzip(a.archive, a.dest, a.patterns)
    else:
        spm_train(a)


if __name__ == "__main__":
    main()
