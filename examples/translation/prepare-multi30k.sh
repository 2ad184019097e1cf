#!/usr/bin/env bash
# Multi30k EN-DE (task 1, raw) -> joint sentencepiece -> fairseq binary data.
#
#   bash examples/translation/prepare-multi30k.sh [OUT_DIR]     (default: work/multi30k)
#
# Downloads train/val/test_2016_flickr from the public Multi30k repository
# (github.com/multi30k/dataset, data/task1/raw, about 3 MB gzipped), or reads them
# from MULTI30K_DIR when set (a folder with train.en.gz, train.de.gz, val.*.gz,
# test_2016_flickr.*.gz). Then learns one sentencepiece model on the English and
# German training text (SPM_VOCAB pieces, default 8000) and binarizes with
# fairseq-preprocess --joined-dictionary. The task `cmlm` adds <mask> itself.
set -euo pipefail

OUT=${1:-work/multi30k}
SRC=${SRC:-en}
TGT=${TGT:-de}
SPM_VOCAB=${SPM_VOCAB:-8000}
URL=https://github.com/multi30k/dataset/raw/master/data/task1/raw
HERE=$(cd "$(dirname "$0")" && pwd)
RAW=$OUT/raw
mkdir -p "$RAW" "$OUT/spm"

for split in train val test_2016_flickr; do
  for lang in "$SRC" "$TGT"; do
    file=$split.$lang.gz
    if [ -n "${MULTI30K_DIR:-}" ]; then
      [ -f "$MULTI30K_DIR/$file" ] || { echo "error: $MULTI30K_DIR/$file not found (MULTI30K_DIR must hold the task1/raw .gz files)" >&2; exit 1; }
      gunzip -c "$MULTI30K_DIR/$file" > "$RAW/$split.$lang"
    else
      echo "downloading $URL/$file"
      curl -fsSL "$URL/$file" | gunzip -c > "$RAW/$split.$lang"
    fi
  done
done
wc -l "$RAW"/*.$SRC

echo "learning a joint sentencepiece model ($SPM_VOCAB pieces)"
python "$HERE/sentencepiece_bpe.py" train --input "$RAW/train.$SRC" "$RAW/train.$TGT" \
  --model-prefix "$OUT/spm/spm" --vocab-size "$SPM_VOCAB" > "$OUT/spm/train.log" 2>&1
for split in train val test_2016_flickr; do
  for lang in "$SRC" "$TGT"; do
    python "$HERE/sentencepiece_bpe.py" encode --model "$OUT/spm/spm.model" \
      < "$RAW/$split.$lang" > "$OUT/spm/$split.$lang"
  done
done

fairseq-preprocess --source-lang "$SRC" --target-lang "$TGT" \
  --trainpref "$OUT/spm/train" --validpref "$OUT/spm/val" --testpref "$OUT/spm/test_2016_flickr" \
  --destdir "$OUT/bin" --joined-dictionary --workers 2
echo "binarized data in $OUT/bin (sentencepiece model: $OUT/spm/spm.model)"
