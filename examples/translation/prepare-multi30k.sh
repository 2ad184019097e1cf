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
HERE=$(cd "$(dirname "$0")" && pwd)
RAW=$OUT/raw
. "$HERE/multi30k-common.sh"

fetch_multi30k "$RAW" "$SRC" "$TGT"
wc -l "$RAW"/*.$SRC
learn_and_encode "$RAW" "$OUT/spm" "$SPM_VOCAB" "$SRC" "$TGT"

fairseq-preprocess --source-lang "$SRC" --target-lang "$TGT" \
  --trainpref "$OUT/spm/train" --validpref "$OUT/spm/val" --testpref "$OUT/spm/test_2016_flickr" \
  --destdir "$OUT/bin" --joined-dictionary --workers 2
echo "binarized data in $OUT/bin (sentencepiece model: $OUT/spm/spm.model)"
