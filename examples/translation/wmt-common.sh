# shellcheck shell=bash
# What the WMT recipes (prepare-wmt14-en-de.sh, prepare-wmt16-en-ro.sh,
# prepare-wmt17-en-zh.sh) share: the settings they all read from the environment (each
# recipe's header documents them), the folder layout under OUT, and the steps as bash
# functions around wmt_tools.py and sentencepiece_bpe.py. A recipe sets OUT, SRC, TGT and
# HERE (this folder), then runs `. "$HERE/wmt-common.sh" VAR`, VAR the name of its
# variable for a folder of already-downloaded archives (e.g. WMT14_DIR). Sourcing only
# sets variables and defines functions; the recipe creates the folders.

SPM_VOCAB=${SPM_VOCAB:-32000}
SPM_TYPE=${SPM_TYPE:-bpe}
SPM_SAMPLE=${SPM_SAMPLE:-1000000}
MAX_LEN=${MAX_LEN:-250}
RATIO=${RATIO:-1.5}
WORKERS=${WORKERS:-$(nproc)}
ARCHIVES_VAR=${1:?usage: . wmt-common.sh NAME_OF_THE_ARCHIVES_VARIABLE}
ARCHIVES=${!ARCHIVES_VAR:-}
ORIG=$OUT/orig    # downloads
X=$ORIG/extracted # what the recipe takes out of them
RAW=$OUT/raw      # cleaned text
SPM=$OUT/spm      # sentencepiece model and pieces

# tools COMMAND ARG...: wmt_tools.py (pairs, sgm, lenfilter, ...).
tools() { python "$HERE/wmt_tools.py" "$@"; }

# fetch URL NAME [ALIAS...]: print the path of the archive NAME. When the recipe's archive
# variable (ARCHIVES_VAR names it) is set, the archive must already be in that folder, as
# NAME or an ALIAS; otherwise it is downloaded into ORIG, unless an earlier run did. Called as $(fetch ...), so errexit is
# off in here: every failure returns explicitly.
fetch() {
  local url=$1 name=$2 n
  shift
  if [ -n "$ARCHIVES" ]; then
    for n in "$@"; do
      if [ -f "$ARCHIVES/$n" ]; then echo "$ARCHIVES/$n"; return; fi
    done
    echo "error: $ARCHIVES/$name not found ($ARCHIVES_VAR must hold it; it comes from $url)" >&2
    return 1
  fi
  if [ ! -s "$ORIG/$name" ]; then
    echo "downloading $url" >&2
    curl -fL --retry 3 -o "$ORIG/$name.part" "$url" || return 1
    mv "$ORIG/$name.part" "$ORIG/$name" || return 1
  fi
  echo "$ORIG/$name"
}

# find_one NAME: print the path of the one extracted file called NAME (a glob), or fail.
find_one() {
  local found
  found=$(find "$X" -type f -name "$1")
  if [ -z "$found" ] || [ "$(printf '%s\n' "$found" | wc -l)" -ne 1 ]; then
    echo "error: expected one file named $1 under $X, found: ${found:-none}" >&2
    return 1
  fi
  echo "$found"
}

# sgm_text OUT:NAME...: the cleaned segments of each extracted sgm file NAME into RAW/OUT.
sgm_text() {
  local spec f
  for spec in "$@"; do
    f=$(find_one "${spec#*:}")
    tools sgm "$f" "$RAW/${spec%%:*}"
  done
}

# encode MODEL IN OUT: IN as sentencepiece pieces, by WORKERS processes, each on a
# line-aligned chunk of IN.
encode() {
  local model=$1 in=$2 out=$3 chunks c pid pids=()
  chunks=$(mktemp -d "$SPM/parts.XXXXXX")
  split -n "l/$WORKERS" -d -a 4 "$in" "$chunks/in."
  for c in "$chunks"/in.*; do
    python "$HERE/sentencepiece_bpe.py" encode --model "$model" < "$c" > "$chunks/out.${c##*/in.}" &
    pids+=("$!")
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
  cat "$chunks"/out.* > "$out"
  rm -rf "$chunks"
}

# spm_train PREFIX INPUT...: learn the joint sentencepiece model PREFIX.model from the
# INPUT files. This default is sentencepiece_bpe.py's (character coverage 1.0, NFKC
# normalisation). A recipe that trains differently redefines spm_train after sourcing
# this file and extends spm_about, the model's description in the progress message.
spm_train() {
  local prefix=$1
  shift
  python "$HERE/sentencepiece_bpe.py" train --input "$@" --model-prefix "$prefix" \
    --vocab-size "$SPM_VOCAB" --model-type "$SPM_TYPE"
}
spm_about="$SPM_TYPE, $SPM_VOCAB pieces"

# spm_binarize VALID TEST...: the last steps, once RAW holds train, VALID and each TEST
# (.SRC and .TGT). Learn the model with spm_train on every k-th training pair (k chosen
# for about SPM_SAMPLE lines per language), encode everything into SPM, keep the
# training pairs of 1..MAX_LEN pieces per side whose piece counts differ by a factor of
# at most RATIO, and binarize into OUT/bin with one joined dictionary.
spm_binarize() {
  local valid=$1 lines step lang split tests=
  shift
  lines=$(wc -l < "$RAW/train.$SRC")
  step=$(( lines / SPM_SAMPLE ))
  [ "$step" -ge 1 ] || step=1
  for lang in "$SRC" "$TGT"; do
    awk -v k="$step" 'NR % k == 0' "$RAW/train.$lang" > "$SPM/sample.$lang"
  done
  echo "learning a joint sentencepiece model ($spm_about) on 1 in $step training pairs"
  spm_train "$SPM/spm" "$SPM/sample.$SRC" "$SPM/sample.$TGT" > "$SPM/train.log" 2>&1 \
    || { tail -n 20 "$SPM/train.log" >&2; exit 1; }

  echo "encoding with $WORKERS processes"
  for lang in "$SRC" "$TGT"; do
    encode "$SPM/spm.model" "$RAW/train.$lang" "$SPM/train.all.$lang"
    for split in "$valid" "$@"; do
      encode "$SPM/spm.model" "$RAW/$split.$lang" "$SPM/$split.$lang"
    done
  done
  tools lenfilter "$SRC" "$TGT" "$SPM/train.all" "$SPM/train" "$MAX_LEN" "$RATIO"
  rm -f "$SPM/train.all.$SRC" "$SPM/train.all.$TGT" "$SPM/sample.$SRC" "$SPM/sample.$TGT"

  for split in "$@"; do tests+=${tests:+,}$SPM/$split; done
  rm -rf "${OUT:?}/bin"  # fairseq-preprocess refuses to overwrite a dictionary
  fairseq-preprocess --source-lang "$SRC" --target-lang "$TGT" \
    --trainpref "$SPM/train" --validpref "$SPM/$valid" --testpref "$tests" \
    --destdir "$OUT/bin" --joined-dictionary --workers "$WORKERS"
}
