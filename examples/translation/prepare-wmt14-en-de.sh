#!/usr/bin/env bash
# WMT'14 English-German, the Mask-Predict paper's main benchmark -> joint sentencepiece
# -> fairseq binary data.
#
#   bash examples/translation/prepare-wmt14-en-de.sh [OUT_DIR]     (default: work/wmt14-en-de)
#
# Data (the corpora of fairseq's examples/translation/prepare-wmt14en2de.sh, the usual
# rebuild of the Vaswani et al. data that the paper used):
#   train  Europarl v7 + Common Crawl + News Commentary v12 (de-en), about 4.5M pairs
#            statmt.org/wmt13/training-parallel-europarl-v7.tgz     (~0.6 GB)
#            statmt.org/wmt13/training-parallel-commoncrawl.tgz     (~0.9 GB)
#            data.statmt.org/wmt17/translation-task/training-parallel-nc-v12.tgz (~0.2 GB)
#   valid  newstest2013 (3000 sentences), from statmt.org/wmt13/test.tgz
#   test   newstest2014, the "full" version (3003 sentences), statmt.org/wmt14/test-full.tgz
# About 1.7 GB to download (archive sizes are approximate). Disk: about 10 GB free for
# archives, extracted text, pieces and binaries (estimate). Time, on a CPU with 8 cores
# (estimate, not measured): 15-30 min to download at ordinary speeds, 20-40 min for
# sentencepiece, 20-40 min to encode and binarize.
# Needs curl, GNU tar and coreutils (split -n), python with sentencepiece, fairseq-preprocess.
#
# Steps: extract the needed files (GNU tar), clean each line (control characters,
# zero-width marks and runs of whitespace become one space; pairs with an empty side are
# dropped), learn one joint sentencepiece model on a sample of the training text,
# encode everything, drop training pairs whose sides are longer than MAX_LEN pieces or
# whose piece counts differ by more than RATIO (fairseq's script: Moses
# clean-corpus-n.perl -ratio 1.5 ... 1 250 on BPE tokens; the same rule here on pieces),
# binarize with fairseq-preprocess --joined-dictionary. The task `cmlm` adds <mask>.
#
# Outputs: OUT_DIR/bin (fairseq data: train, valid, test), OUT_DIR/spm/spm.model,
# OUT_DIR/raw/{valid,test}.{en,de} (the cleaned references, for sacreBLEU), OUT_DIR/orig
# (archives and extracted files; delete it when done). Train DE->EN from the same bin
# with --source-lang de --target-lang en (SRC=de TGT=en for train-paper.sh).
#
# How this differs from the paper (so tokenized BLEU is not strictly comparable):
# the paper used the data of Vaswani et al. (2017): Moses tokenisation, then joint BPE
# (a shared vocabulary of about 37000 tokens there; fairseq's script adds Moses
# punctuation normalisation and learns 40000 subword-nmt merges). Here there is no Moses step: sentencepiece (BPE by default, SPM_VOCAB
# pieces, NFKC normalisation) runs on the raw text, so outputs are detokenized text;
# sacreBLEU on them is the clean comparison. For a "tokenized BLEU" like the paper's,
# Moses-tokenize hypotheses and references the same way before scoring, and expect
# small differences from the different segmentation and filtering. fairseq's own
# script validates on 1% of the training pairs instead; this one uses newstest2013,
# as Vaswani et al. do.
#
# Environment:
#   WMT14_DIR    a folder that already holds the five archives, under the names above
#                (newstest2013's archive as test.tgz or wmt13-test.tgz): nothing is
#                downloaded. Unset: download into OUT_DIR/orig (existing files are reused).
#   SPM_VOCAB    sentencepiece vocabulary size (default 32000)
#   SPM_TYPE     bpe (default, closest to the paper) or unigram
#   SPM_SAMPLE   training lines per language fed to sentencepiece (default 1000000,
#                every k-th line of the cleaned corpus; sentencepiece_bpe.py keeps
#                character_coverage 1.0, so a larger sample admits more rare characters)
#   MAX_LEN      longest training side kept, in pieces (default 250)
#   RATIO        largest piece-count ratio between the sides (default 1.5)
#   WORKERS      parallel encoders and fairseq-preprocess workers (default: nproc)
set -euo pipefail

OUT=${1:-work/wmt14-en-de}
SRC=en
TGT=de
SPM_VOCAB=${SPM_VOCAB:-32000}
SPM_TYPE=${SPM_TYPE:-bpe}
SPM_SAMPLE=${SPM_SAMPLE:-1000000}
MAX_LEN=${MAX_LEN:-250}
RATIO=${RATIO:-1.5}
WORKERS=${WORKERS:-$(nproc)}
ARCHIVES=${WMT14_DIR:-}
HERE=$(cd "$(dirname "$0")" && pwd)
ORIG=$OUT/orig
X=$ORIG/extracted
RAW=$OUT/raw
SPM=$OUT/spm
mkdir -p "$ORIG" "$X" "$RAW" "$SPM"

# Line tools: clean and pair corpora, read WMT's sgm files, filter by length.
# Files are read with newline="\n": a stray carriage return inside a sentence must not
# split it (that would shift one side of a parallel corpus against the other).
PYTOOLS=$(cat <<'PY'
import itertools, re, sys

ODD = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]")

def clean(line):
    return " ".join(ODD.sub(" ", line).split())

def read(path):
    return open(path, encoding="utf-8", errors="replace", newline="\n")

def pairs(src, tgt, out, *prefixes):
    total = kept = bad = 0
    with open(f"{out}.{src}", "w", encoding="utf-8") as fs, open(f"{out}.{tgt}", "w", encoding="utf-8") as ft:
        for prefix in prefixes:
            with read(f"{prefix}.{src}") as a, read(f"{prefix}.{tgt}") as b:
                for x, y in itertools.zip_longest(a, b):
                    if x is None or y is None:
                        sys.exit(f"error: {prefix}.{src} and {prefix}.{tgt} have different line counts")
                    total += 1
                    bad += "\ufffd" in x or "\ufffd" in y
                    x, y = clean(x), clean(y)
                    if x and y:
                        fs.write(x + "\n")
                        ft.write(y + "\n")
                        kept += 1
    print(f"{out}: {kept} of {total} pairs kept (both sides non-empty)", file=sys.stderr)
    if kept == 0:
        sys.exit("error: no training pair left")
    if bad > total / 100:
        sys.exit(f"error: {bad} of {total} pairs hold bytes that are not UTF-8: convert the files (iconv)")

def sgm(inp, out):
    seg = re.compile(r"<seg[^>]*>(.*)</seg>")
    n = 0
    with read(inp) as f, open(out, "w", encoding="utf-8") as g:
        for line in f:
            m = seg.search(line)
            if m:
                g.write(clean(m.group(1)) + "\n")
                n += 1
    print(f"{out}: {n} segments from {inp}", file=sys.stderr)

def lenfilter(src, tgt, inp, out, max_len, ratio):
    max_len, ratio = int(max_len), float(ratio)
    total = kept = 0
    with read(f"{inp}.{src}") as a, read(f"{inp}.{tgt}") as b, \
            open(f"{out}.{src}", "w", encoding="utf-8") as fs, open(f"{out}.{tgt}", "w", encoding="utf-8") as ft:
        for x, y in zip(a, b):
            total += 1
            n, m = len(x.split()), len(y.split())
            if 1 <= n <= max_len and 1 <= m <= max_len and n <= ratio * m and m <= ratio * n:
                fs.write(x)
                ft.write(y)
                kept += 1
    print(f"{out}: {kept} of {total} pairs kept (1..{max_len} pieces, ratio <= {ratio})", file=sys.stderr)
    if kept == 0:
        sys.exit("error: the length filter kept no training pair")

{"pairs": pairs, "sgm": sgm, "lenfilter": lenfilter}[sys.argv[1]](*sys.argv[2:])
PY
)
tools() { python -c "$PYTOOLS" "$@"; }

# fetch URL NAME [OTHER_NAME...]: prints the archive's path; from ARCHIVES when set.
fetch() {
  local url=$1 name=$2 n
  shift 2
  if [ -n "$ARCHIVES" ]; then
    for n in "$name" "$@"; do
      if [ -f "$ARCHIVES/$n" ]; then echo "$ARCHIVES/$n"; return; fi
    done
    echo "error: $ARCHIVES/$name not found (WMT14_DIR must hold it; it comes from $url)" >&2
    return 1
  fi
  if [ ! -s "$ORIG/$name" ]; then
    echo "downloading $url" >&2
    curl -fL --retry 3 -o "$ORIG/$name.part" "$url"
    mv "$ORIG/$name.part" "$ORIG/$name"
  fi
  echo "$ORIG/$name"
}

# find_one NAME: the single extracted file called NAME.
find_one() {
  local hits
  hits=$(find "$X" -type f -name "$1")
  if [ -z "$hits" ] || [ "$(printf '%s\n' "$hits" | wc -l)" -ne 1 ]; then
    echo "error: expected one file named $1 under $X, found: ${hits:-none}" >&2
    return 1
  fi
  echo "$hits"
}

# encode MODEL IN OUT: sentencepiece pieces, WORKERS processes on line-aligned chunks.
encode() {
  local model=$1 in=$2 out=$3 parts f pids=()
  parts=$(mktemp -d "$SPM/parts.XXXXXX")
  split -n "l/$WORKERS" -d -a 4 "$in" "$parts/in."
  for f in "$parts"/in.*; do
    python "$HERE/sentencepiece_bpe.py" encode --model "$model" < "$f" > "$parts/out.${f##*/in.}" &
    pids+=("$!")
  done
  for f in "${pids[@]}"; do wait "$f"; done
  cat "$parts"/out.* > "$out"
  rm -rf "$parts"
}

base=https://statmt.org
ep=$(fetch $base/wmt13/training-parallel-europarl-v7.tgz training-parallel-europarl-v7.tgz)
cc=$(fetch $base/wmt13/training-parallel-commoncrawl.tgz training-parallel-commoncrawl.tgz)
nc=$(fetch https://data.statmt.org/wmt17/translation-task/training-parallel-nc-v12.tgz training-parallel-nc-v12.tgz)
dev=$(fetch $base/wmt13/test.tgz wmt13-test.tgz test.tgz)
test=$(fetch $base/wmt14/test-full.tgz test-full.tgz)

echo "extracting into $X"
tar -xzf "$ep" -C "$X" --wildcards '*europarl-v7.de-en.*'
tar -xzf "$cc" -C "$X" --wildcards '*commoncrawl.de-en.*'
tar -xzf "$nc" -C "$X" --wildcards '*news-commentary-v12.de-en.*'
tar -xzf "$dev" -C "$X" --wildcards '*newstest2013-src.en.sgm' '*newstest2013-src.de.sgm'
tar -xzf "$test" -C "$X" --wildcards '*newstest2014-deen-src.en.sgm' '*newstest2014-deen-ref.de.sgm'

corpora=()
for name in europarl-v7.de-en commoncrawl.de-en news-commentary-v12.de-en; do
  f=$(find_one "$name.$SRC")
  corpora+=("${f%."$SRC"}")
done
tools pairs "$SRC" "$TGT" "$RAW/train" "${corpora[@]}"
for spec in valid.en:newstest2013-src.en.sgm valid.de:newstest2013-src.de.sgm \
    test.en:newstest2014-deen-src.en.sgm test.de:newstest2014-deen-ref.de.sgm; do
  f=$(find_one "${spec#*:}")
  tools sgm "$f" "$RAW/${spec%%:*}"
done
wc -l "$RAW"/*."$SRC"

lines=$(wc -l < "$RAW/train.$SRC")
step=$(( lines / SPM_SAMPLE ))
[ "$step" -ge 1 ] || step=1
for lang in "$SRC" "$TGT"; do
  awk -v k="$step" 'NR % k == 0' "$RAW/train.$lang" > "$SPM/sample.$lang"
done
echo "learning a joint sentencepiece model ($SPM_TYPE, $SPM_VOCAB pieces) on 1 in $step training pairs"
python "$HERE/sentencepiece_bpe.py" train --input "$SPM/sample.$SRC" "$SPM/sample.$TGT" \
  --model-prefix "$SPM/spm" --vocab-size "$SPM_VOCAB" --model-type "$SPM_TYPE" > "$SPM/train.log" 2>&1 \
  || { tail -n 20 "$SPM/train.log" >&2; exit 1; }

echo "encoding with $WORKERS processes"
for lang in "$SRC" "$TGT"; do
  encode "$SPM/spm.model" "$RAW/train.$lang" "$SPM/train.all.$lang"
  for split in valid test; do
    encode "$SPM/spm.model" "$RAW/$split.$lang" "$SPM/$split.$lang"
  done
done
tools lenfilter "$SRC" "$TGT" "$SPM/train.all" "$SPM/train" "$MAX_LEN" "$RATIO"
rm -f "$SPM/train.all.$SRC" "$SPM/train.all.$TGT" "$SPM/sample.$SRC" "$SPM/sample.$TGT"

rm -rf "${OUT:?}/bin"  # fairseq-preprocess refuses to overwrite a dictionary
fairseq-preprocess --source-lang "$SRC" --target-lang "$TGT" \
  --trainpref "$SPM/train" --validpref "$SPM/valid" --testpref "$SPM/test" \
  --destdir "$OUT/bin" --joined-dictionary --workers "$WORKERS"
echo "binarized data in $OUT/bin (sentencepiece model: $SPM/spm.model; references: $RAW/test.$TGT)"
echo "the archives and extracted files in $ORIG are no longer needed"
