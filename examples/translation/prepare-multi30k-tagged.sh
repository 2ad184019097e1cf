#!/usr/bin/env bash
# Multi30k EN->DE and EN->FR as one tagged multi-task dataset for one CMLM
# (cmlm_plugin/task_tags.py): every source starts with its task tag, <2de> or <2fr>.
#
#   bash examples/translation/prepare-multi30k-tagged.sh [OUT_DIR]   (default: work/multi30k-tagged)
#
# Reads train/val/test_2016_flickr of English and each target language from
# MULTI30K_DIR when set (a folder with train.en.gz, train.de.gz, train.fr.gz, val.*.gz,
# test_2016_flickr.*.gz), or downloads them from the public Multi30k repository
# (github.com/multi30k/dataset, data/task1/raw). TGTS (default "de fr") names the
# target languages, one task each. Learns one sentencepiece model on the English text
# and every target's (SPM_VOCAB pieces, default 8000), encodes, puts the tag <2LANG>
# in front of each source (after sentencepiece, so the tag stays one symbol), and
# binarizes with fairseq-preprocess --joined-dictionary as the pair src -> tgt:
#   train, valid  every task's sentence pairs, concatenated;
#   test, test1, ...  test_2016_flickr of each task, in the order of TGTS (OUT/bin/tasks.txt).
# The tags become symbols of the dictionary; decode with the tag in the input line
# or --target-tag (docs/training.md, "Task tags").
set -euo pipefail

OUT=${1:-work/multi30k-tagged}
SRC=${SRC:-en}
TGTS=${TGTS:-de fr}
SPM_VOCAB=${SPM_VOCAB:-8000}
HERE=$(cd "$(dirname "$0")" && pwd)
RAW=$OUT/raw
SPM=$OUT/spm
. "$HERE/multi30k-common.sh"
read -r -a TASKS <<< "$TGTS"
[ "${#TASKS[@]}" -ge 1 ] || { echo "error: TGTS names no target language (e.g. TGTS=\"de fr\")" >&2; exit 1; }
for lang in "${TASKS[@]}"; do
  [ "$lang" != "$SRC" ] || { echo "error: TGTS holds the source language $SRC" >&2; exit 1; }
done

fetch_multi30k "$RAW" "$SRC" "${TASKS[@]}"
wc -l "$RAW"/*."$SRC"
learn_and_encode "$RAW" "$SPM" "$SPM_VOCAB" "$SRC" "${TASKS[@]}"

: > "$SPM/train.src"; : > "$SPM/train.tgt"; : > "$SPM/valid.src"; : > "$SPM/valid.tgt"
testprefs=()
: > "$SPM/tasks.txt"
for i in "${!TASKS[@]}"; do
  lang=${TASKS[$i]}
  tag="<2$lang>"
  sed "s/^/$tag /" "$SPM/train.$SRC" >> "$SPM/train.src"
  cat "$SPM/train.$lang" >> "$SPM/train.tgt"
  sed "s/^/$tag /" "$SPM/val.$SRC" >> "$SPM/valid.src"
  cat "$SPM/val.$lang" >> "$SPM/valid.tgt"
  sed "s/^/$tag /" "$SPM/test_2016_flickr.$SRC" > "$SPM/test_$lang.src"
  cp "$SPM/test_2016_flickr.$lang" "$SPM/test_$lang.tgt"
  testprefs+=("$SPM/test_$lang")
  split=test; [ "$i" -eq 0 ] || split=test$i
  printf '%s\t%s\t%s->%s\t%s\n' "$split" "$tag" "$SRC" "$lang" "$RAW/test_2016_flickr.$lang" >> "$SPM/tasks.txt"
done

fairseq-preprocess --source-lang src --target-lang tgt \
  --trainpref "$SPM/train" --validpref "$SPM/valid" \
  --testpref "$(IFS=,; echo "${testprefs[*]}")" \
  --destdir "$OUT/bin" --joined-dictionary --workers 2
cp "$SPM/tasks.txt" "$OUT/bin/tasks.txt"
for tag in $(cut -f2 "$SPM/tasks.txt"); do
  grep -q "^$tag " "$OUT/bin/dict.src.txt" || { echo "error: $tag is not in $OUT/bin/dict.src.txt" >&2; exit 1; }
done
echo "binarized data in $OUT/bin (sentencepiece model: $SPM/spm.model); test splits:"
cat "$OUT/bin/tasks.txt"
