# shellcheck shell=bash
# What the Multi30k recipes (prepare-multi30k.sh, prepare-multi30k-tagged.sh) share, as
# bash functions: fetching the task1/raw files and encoding them with sentencepiece.
# A recipe sets HERE (this folder) and sources this file; sourcing only defines functions.

MULTI30K_URL=https://github.com/multi30k/dataset/raw/master/data/task1/raw
MULTI30K_SPLITS="train val test_2016_flickr"

# fetch_multi30k RAW LANG...: RAW/{train,val,test_2016_flickr}.LANG as plain text, from
# MULTI30K_DIR when set (a folder of the task1/raw .gz files), else downloaded
fetch_multi30k() {
  local raw=$1 split lang file
  shift
  mkdir -p "$raw"
  for split in $MULTI30K_SPLITS; do
    for lang in "$@"; do
      file=$split.$lang.gz
      if [ -n "${MULTI30K_DIR:-}" ]; then
        [ -f "$MULTI30K_DIR/$file" ] || { echo "error: $MULTI30K_DIR/$file not found (MULTI30K_DIR must hold the task1/raw .gz files)" >&2; exit 1; }
        gunzip -c "$MULTI30K_DIR/$file" > "$raw/$split.$lang"
      else
        echo "downloading $MULTI30K_URL/$file"
        curl -fsSL "$MULTI30K_URL/$file" | gunzip -c > "$raw/$split.$lang"
      fi
    done
  done
}

# learn_and_encode RAW SPM_DIR VOCAB LANG...: one sentencepiece model SPM_DIR/spm.model on
# the training text of every LANG, then SPM_DIR/{split}.LANG as space-separated pieces
learn_and_encode() {
  local raw=$1 spm=$2 vocab=$3 split lang inputs=()
  shift 3
  mkdir -p "$spm"
  for lang in "$@"; do inputs+=("$raw/train.$lang"); done
  echo "learning a joint sentencepiece model ($vocab pieces) on $*"
  python "$HERE/sentencepiece_bpe.py" train --input "${inputs[@]}" \
    --model-prefix "$spm/spm" --vocab-size "$vocab" > "$spm/train.log" 2>&1
  for split in $MULTI30K_SPLITS; do
    for lang in "$@"; do
      python "$HERE/sentencepiece_bpe.py" encode --model "$spm/spm.model" \
        < "$raw/$split.$lang" > "$spm/$split.$lang"
    done
  done
}
