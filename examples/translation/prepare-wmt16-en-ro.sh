#!/usr/bin/env bash
# WMT'16 English-Romanian, as in the Mask-Predict paper -> joint sentencepiece -> fairseq
# binary data.
#
#   bash examples/translation/prepare-wmt16-en-ro.sh [OUT_DIR]     (default: work/wmt16-en-ro)
#
# Data:
#   train  Europarl v8 (ro-en) + SETIMES2 (en-ro), about 610k pairs
#            data.statmt.org/wmt16/translation-task/training-parallel-ep-v8.tgz
#            object.pouta.csc.fi/OPUS-SETIMES/v2/moses/en-ro.txt.zip (OPUS)
#   valid  newsdev2016 (en-ro), from data.statmt.org/wmt16/translation-task/dev.tgz
#   test   newstest2016 (en-ro), from data.statmt.org/wmt16/translation-task/test.tgz;
#          test1 is the ro-en release of newstest2016 (src ro, ref en), for RO->EN
# A few hundred MB to download (estimate). Disk: about 2 GB free (estimate). Time, on a
# CPU with 8 cores (estimate, not measured): 10-20 minutes after the download.
# Needs curl, GNU tar and coreutils (split -n), python with sentencepiece, fairseq-preprocess.
#
# Steps: those of prepare-wmt14-en-de.sh (extract with GNU tar and Python's zipfile,
# clean lines, one joint sentencepiece model, encode, keep training pairs of 1..MAX_LEN
# pieces per side with a piece-count ratio <= RATIO, fairseq-preprocess
# --joined-dictionary), plus the optional Romanian normalisation below.
#
# Outputs: OUT_DIR/bin (train, valid, test, test1), OUT_DIR/spm/spm.model,
# OUT_DIR/raw/{valid,test,test1}.{en,ro} (cleaned references for sacreBLEU; normalised
# like the training data when RO_NORMALIZE is set), OUT_DIR/orig (archives, extracted
# files). RO->EN: train from the same bin with SRC=ro TGT=en (train-paper.sh) and
# decode --gen-subset test1.
#
# Romanian normalisation (RO_NORMALIZE, Romanian side of every split):
#   0      (default) the text as distributed
#   comma  s/t with cedilla (U+015E/F, U+0162/3) become s/t with comma below
#          (U+0218/9, U+021A/B), the spelling the two encodings share
#   1      comma, then remove every diacritic (ș ț ă â î -> s t a a i, capitals alike):
#          what Sennrich et al.'s WMT16 system did (wmt16-scripts normalise-romanian.py
#          and remove-diacritics.py); implemented here inline
# The paper (Ghazvininejad et al. 2019) used the preprocessed EN-RO data of Lee et al.
# (2018) with joint BPE; whether that data kept the diacritics is not stated in the
# Mask-Predict paper, so no setting here is known to match it. With RO_NORMALIZE=1 the
# references are normalised too: scores are then against diacritic-free references
# and are not comparable with scores against the official newstest2016.
#
# How this differs from the paper: no Moses tokenisation; sentencepiece (BPE by
# default) on raw text instead of subword-nmt BPE, so tokenized BLEU is not strictly
# comparable (see prepare-wmt14-en-de.sh).
#
# Environment:
#   WMT16_DIR    a folder that already holds training-parallel-ep-v8.tgz, en-ro.txt.zip
#                (or SETIMES2.en-ro.txt.zip / SETIMES2.ro-en.txt.zip), dev.tgz and
#                test.tgz: nothing is downloaded. Unset: download into OUT_DIR/orig.
#   RO_NORMALIZE 0 (default), comma or 1, see above
#   SPM_VOCAB    sentencepiece vocabulary size (default 32000)
#   SPM_TYPE     bpe (default) or unigram
#   SPM_SAMPLE   training lines per language fed to sentencepiece (default 1000000,
#                i.e. all of this corpus)
#   MAX_LEN      longest training side kept, in pieces (default 250)
#   RATIO        largest piece-count ratio between the sides (default 1.5)
#   WORKERS      parallel encoders and fairseq-preprocess workers (default: nproc)
set -euo pipefail

OUT=${1:-work/wmt16-en-ro}
SRC=en
TGT=ro
SPM_VOCAB=${SPM_VOCAB:-32000}
SPM_TYPE=${SPM_TYPE:-bpe}
SPM_SAMPLE=${SPM_SAMPLE:-1000000}
MAX_LEN=${MAX_LEN:-250}
RATIO=${RATIO:-1.5}
WORKERS=${WORKERS:-$(nproc)}
export RO_NORMALIZE=${RO_NORMALIZE:-0}
case $RO_NORMALIZE in
  0|comma|1) ;;
  *) echo "error: RO_NORMALIZE must be 0, comma or 1, got '$RO_NORMALIZE'" >&2; exit 1 ;;
esac
ARCHIVES=${WMT16_DIR:-}
HERE=$(cd "$(dirname "$0")" && pwd)
ORIG=$OUT/orig
X=$ORIG/extracted
RAW=$OUT/raw
SPM=$OUT/spm
mkdir -p "$ORIG" "$X" "$RAW" "$SPM"

# Line tools (as in prepare-wmt14-en-de.sh, plus the Romanian normalisation and unzip).
# Files are read with newline="\n" so that a stray carriage return never splits a line.
PYTOOLS=$(cat <<'PY'
import fnmatch, itertools, os, re, sys, zipfile

ODD = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]")
MODE = os.environ.get("RO_NORMALIZE", "0")
# s/t with cedilla -> s/t with comma below; then (mode 1) drop the diacritics
COMMA = str.maketrans("\u015e\u015f\u0162\u0163", "\u0218\u0219\u021a\u021b")
PLAIN = str.maketrans("\u0218\u0219\u021a\u021b\u0102\u0103\u00c2\u00e2\u00ce\u00ee", "SsTtAaAaIi")

def clean(line, lang):
    line = " ".join(ODD.sub(" ", line).split())
    if lang == "ro" and MODE != "0":
        line = line.translate(COMMA)
        if MODE == "1":
            line = line.translate(PLAIN)
    return line

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
                    x, y = clean(x, src), clean(y, tgt)
                    if x and y:
                        fs.write(x + "\n")
                        ft.write(y + "\n")
                        kept += 1
    print(f"{out}: {kept} of {total} pairs kept (both sides non-empty)", file=sys.stderr)
    if kept == 0:
        sys.exit("error: no training pair left")
    if bad > total / 100:
        sys.exit(f"error: {bad} of {total} pairs hold bytes that are not UTF-8: convert the files (iconv)")

def sgm(lang, inp, out):
    seg = re.compile(r"<seg[^>]*>(.*)</seg>")
    n = 0
    with read(inp) as f, open(out, "w", encoding="utf-8") as g:
        for line in f:
            m = seg.search(line)
            if m:
                g.write(clean(m.group(1), lang) + "\n")
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

def unzip(archive, dest, *patterns):
    with zipfile.ZipFile(archive) as z:
        names = [n for n in z.namelist() if any(fnmatch.fnmatch(os.path.basename(n), p) for p in patterns)]
        if not names:
            sys.exit(f"error: nothing in {archive} matches {' '.join(patterns)}")
        z.extractall(dest, names)

{"pairs": pairs, "sgm": sgm, "lenfilter": lenfilter, "unzip": unzip}[sys.argv[1]](*sys.argv[2:])
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
    echo "error: $ARCHIVES/$name not found (WMT16_DIR must hold it; it comes from $url)" >&2
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

wmt16=https://data.statmt.org/wmt16/translation-task
ep=$(fetch $wmt16/training-parallel-ep-v8.tgz training-parallel-ep-v8.tgz)
setimes=$(fetch https://object.pouta.csc.fi/OPUS-SETIMES/v2/moses/en-ro.txt.zip en-ro.txt.zip \
  SETIMES2.en-ro.txt.zip SETIMES2.ro-en.txt.zip)
dev=$(fetch $wmt16/dev.tgz dev.tgz)
test=$(fetch $wmt16/test.tgz test.tgz)

echo "extracting into $X"
tar -xzf "$ep" -C "$X" --wildcards '*europarl-v8.ro-en.en' '*europarl-v8.ro-en.ro'
tools unzip "$setimes" "$X" '*.en-ro.en' '*.en-ro.ro'
tar -xzf "$dev" -C "$X" --wildcards '*newsdev2016-enro-src.en.sgm' '*newsdev2016-enro-ref.ro.sgm'
tar -xzf "$test" -C "$X" --wildcards '*newstest2016-enro-src.en.sgm' '*newstest2016-enro-ref.ro.sgm' \
  '*newstest2016-roen-src.ro.sgm' '*newstest2016-roen-ref.en.sgm'

ep_en=$(find_one europarl-v8.ro-en.en)
se_en=$(find_one 'SETIMES*.en-ro.en')
echo "Romanian normalisation: RO_NORMALIZE=$RO_NORMALIZE"
tools pairs "$SRC" "$TGT" "$RAW/train" "${ep_en%.en}" "${se_en%.en}"
for spec in valid.en:newsdev2016-enro-src.en.sgm valid.ro:newsdev2016-enro-ref.ro.sgm \
    test.en:newstest2016-enro-src.en.sgm test.ro:newstest2016-enro-ref.ro.sgm \
    test1.en:newstest2016-roen-ref.en.sgm test1.ro:newstest2016-roen-src.ro.sgm; do
  out=${spec%%:*}
  f=$(find_one "${spec#*:}")
  tools sgm "${out##*.}" "$f" "$RAW/$out"
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
  for split in valid test test1; do
    encode "$SPM/spm.model" "$RAW/$split.$lang" "$SPM/$split.$lang"
  done
done
tools lenfilter "$SRC" "$TGT" "$SPM/train.all" "$SPM/train" "$MAX_LEN" "$RATIO"
rm -f "$SPM/train.all.$SRC" "$SPM/train.all.$TGT" "$SPM/sample.$SRC" "$SPM/sample.$TGT"

rm -rf "${OUT:?}/bin"  # fairseq-preprocess refuses to overwrite a dictionary
fairseq-preprocess --source-lang "$SRC" --target-lang "$TGT" \
  --trainpref "$SPM/train" --validpref "$SPM/valid" --testpref "$SPM/test,$SPM/test1" \
  --destdir "$OUT/bin" --joined-dictionary --workers "$WORKERS"
echo "binarized data in $OUT/bin (sentencepiece model: $SPM/spm.model; references: $RAW/test.$TGT, $RAW/test1.$SRC)"
echo "the archives and extracted files in $ORIG are no longer needed"
