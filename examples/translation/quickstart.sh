#!/usr/bin/env bash
# One command for the quickstart: prepare Multi30k EN-DE, train the CPU-sized CMLM for a
# fixed number of updates, decode test_2016_flickr with Mask-Predict (T=10, l=5) and print
# sacreBLEU with its signature.
#
#   bash examples/translation/quickstart.sh [WORK_DIR]          (default: work)
#   QUICK=1 bash examples/translation/quickstart.sh [WORK_DIR]  (the same steps in ~1 minute)
#
# Steps, each an existing script: prepare-multi30k.sh (MULTI30K_DIR: a local folder of the
# Multi30k task1/raw .gz files, else download) into WORK_DIR/multi30k, then
# train-multi30k-small.sh (its flags, plus --max-update MAX_UPDATE instead of a time budget
# so that runs are comparable whatever else the machine runs) into
# WORK_DIR/checkpoints/quickstart, whose fairseq-generate output is scored with sacreBLEU
# on the raw references.
#
#   MAX_UPDATE  updates to train (default 1933, the count the quickstart figures of
#               docs/reproducing.md and train-multi30k-ar.sh use; about 30-35 min on a 2-core CPU)
#   QUICK=1     the same steps as a smoke run, not a usable model: cmlm_plugin_tiny,
#               MAX_UPDATE default 40, SPM_VOCAB default 1000, the first QUICK_TRAIN
#               (default 5000) training and QUICK_EVAL (default 250) val/test pairs, in
#               WORK_DIR/multi30k-quick and WORK_DIR/checkpoints/quickstart-tiny
#   SPM_VOCAB, DEVICE_FLAGS, TRAIN_FLAGS are passed on to the two scripts (TRAIN_FLAGS
#   last, so they override).
#   RECIPE=best the best recipe measured (train-multi30k-best.sh: three autoregressive
#               teachers, distillation by the three together, student started from the
#               first teacher's weights with glancing and self-correction from half its
#               updates on; BEST_STUDENT_FLAGS adds student flags, GLANCING=0 or
#               SELF_CORRECTION=0 drops a method, INIT=0 starts from random weights,
#               TEACHERS=1 or 2 distils with fewer teachers), MAX_UPDATE default 3000 per
#               training, into WORK_DIR/checkpoints/best; about 2.5 h on a 2-core CPU (2 h
#               with TEACHERS=2, 1.5 h with TEACHERS=1; 36.08 and 36.16 sacreBLEU on test
#               at T=10, l=5 from the ensemble of three teachers, 0.59 and 0.32 below the
#               first teacher's beam 5 (36.67, 36.48), against 23.73 for RECIPE=single at
#               the same 3000 updates; README).
#               Not with QUICK=1 (a 40-update teacher distils nothing worth testing).
#               STUDENT=ctc trains the student with CTC instead and decodes it in one
#               pass (train-multi30k-best.sh; 35.99 on test in one pass from the three
#               teachers' targets, 0.68 below the first teacher, against 27.50 for the
#               CMLM's single pass and 36.08 for its T=10, l=5; 2026-12-05).
#
# Resumable: data already prepared is kept (delete WORK_DIR/multi30k to redo it), training
# continues from checkpoint_last.pt, and a checkpoint that already holds MAX_UPDATE updates
# is only decoded again (raise MAX_UPDATE to train on).
set -euo pipefail

die() {
  echo "quickstart error: $*" >&2
  exit 1
}

prepare_failed() {  # $1: the data folder prepare-multi30k.sh was writing
  local most
  most=$(grep -oE "Vocabulary size too high \([0-9]+\). Please set it to a value <= [0-9]+" \
    "$1/spm/train.log" 2> /dev/null | grep -oE "[0-9]+$" || true)
  [ -z "$most" ] || die "the training text allows at most $most sentencepiece pieces: set SPM_VOCAB=$most or lower"
  die "data preparation failed (see above); without network access set MULTI30K_DIR to a folder of the Multi30k .gz files"
}

WORK=${1:-work}
QUICK=${QUICK:-0}
RECIPE=${RECIPE:-single}
STUDENT=${STUDENT:-cmlm}
# the student's extra flags in the best recipe: none beyond train-multi30k-best.sh's own
# (the teacher's weights, glancing and self-correction from MAX_UPDATE/2, the best measured
# at 3000 updates)
BEST_STUDENT_FLAGS=${BEST_STUDENT_FLAGS:-}
case $RECIPE in
  single) ;;
  best) [ "$QUICK" = 0 ] || die "RECIPE=best has no QUICK=1 smoke run: drop QUICK=1 (the best recipe trains three teachers and a student, about 2.5 h on a 2-core CPU)" ;;
  *) die "RECIPE must be single or best, got '$RECIPE'" ;;
esac
case $STUDENT in
  cmlm) DECODED="Mask-Predict T=10, l=5" ;;
  ctc)
    [ "$RECIPE" = best ] || die "STUDENT=ctc belongs to RECIPE=best (the distilled student): add RECIPE=best"
    DECODED="CTC, one pass, --ctc-blank-penalty ${BLANK_PENALTY:-1.0}" ;;
  *) die "STUDENT must be cmlm or ctc, got '$STUDENT'" ;;
esac
export STUDENT
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=resume-common.sh
. "$HERE/resume-common.sh"
export SRC=en TGT=de

# Reference training rates for the time estimate when no earlier run of this save dir
# left a log (a rerun uses the rate fairseq logged in SAVE/train.log instead), both on a
# 2-core AMD EPYC CPU, 2026-12-01:
# full: cmlm_plugin_small, Multi30k, --max-tokens 2048 (train-multi30k-small.sh), beside
#   one other training: 200 updates in 186 s (fairseq's log, updates 1-200);
# quick: QUICK=1 defaults on Multi30k with OMP_NUM_THREADS=1, beside two trainings and
#   other jobs: fairseq's epoch summary, ups 5.86 over the 40 updates.
case $QUICK in
  0)
    ARCH=cmlm_plugin_small
    if [ "$RECIPE" = best ]; then MAX_UPDATE=${MAX_UPDATE:-3000}; else MAX_UPDATE=${MAX_UPDATE:-1933}; fi
    DATA=$WORK/multi30k
    SAVE=$WORK/checkpoints/quickstart
    RATE=1.08
    RATE_SOURCE="measured on a 2-core AMD EPYC CPU beside one other training, 2026-12-01; a busier CPU is slower"
    EXTRA_FLAGS=""
    ;;
  1)
    ARCH=cmlm_plugin_tiny
    MAX_UPDATE=${MAX_UPDATE:-40}
    QUICK_SPM_VOCAB=${SPM_VOCAB:-1000}
    QUICK_TRAIN=${QUICK_TRAIN:-5000}
    QUICK_EVAL=${QUICK_EVAL:-250}
    for n in "$QUICK_TRAIN" "$QUICK_EVAL"; do
      [[ $n =~ ^[1-9][0-9]*$ ]] || die "QUICK_TRAIN and QUICK_EVAL must be positive integers, got '$n'"
    done
    DATA=$WORK/multi30k-quick
    SAVE=$WORK/checkpoints/quickstart-tiny
    RATE=5.86
    RATE_SOURCE="measured on a 2-core AMD EPYC CPU, 2026-12-01"
    EXTRA_FLAGS="--log-interval 10"
    # one thread per process unless told otherwise: the tiny model gains nothing from a
    # second one, and on a busy 2-core CPU two threads trained 10-25x slower (0.2-0.5
    # against 5.9-6.1 updates/s, 2026-12-01, beside two other trainings)
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
    ;;
  *) die "QUICK must be 0 or 1, got '$QUICK'" ;;
esac

[[ $MAX_UPDATE =~ ^[1-9][0-9]*$ ]] || die "MAX_UPDATE must be a positive integer, got '$MAX_UPDATE'"
for tool in cmlm-plugin-dir fairseq-train fairseq-generate sacrebleu; do
  command -v "$tool" > /dev/null \
    || die "$tool not found: activate the environment that has cmlm_plugin installed (pip install -e .)"
done
if [ -n "${MULTI30K_DIR:-}" ]; then
  [ -d "$MULTI30K_DIR" ] || die "MULTI30K_DIR=$MULTI30K_DIR is not a folder: point it at the Multi30k task1/raw .gz files, or unset it to download them"
  for split in train val test_2016_flickr; do
    for lang in $SRC $TGT; do
      [ -f "$MULTI30K_DIR/$split.$lang.gz" ] \
        || die "$MULTI30K_DIR/$split.$lang.gz not found: MULTI30K_DIR must hold train, val and test_2016_flickr .en.gz/.de.gz (Multi30k data/task1/raw)"
    done
  done
fi

# --- time estimate ------------------------------------------------------------------------
if [ "$RECIPE" = best ]; then
  SAVE=$WORK/checkpoints/best/student
  echo "quickstart: RECIPE=best, MAX_UPDATE=$MAX_UPDATE per training, data $DATA, checkpoints $WORK/checkpoints/best"
  TEACHERS=${TEACHERS:-3}  # train-multi30k-best.sh's default
  echo "time estimate: $TEACHERS teacher(s) and the student, $MAX_UPDATE updates each, at about" \
    "0.75 updates/s (one-thread trainings on a 2-core AMD EPYC CPU, 2026-12-01), plus about" \
    "7 min of distillation per teacher:" \
    "$(awk -v n="$MAX_UPDATE" -v t="$TEACHERS" 'BEGIN { printf "%.0f", (t + 1) * n / 0.75 / 60 + 7 * t }') min;" \
    "a finished step is skipped on a rerun"
else
  mkdir -p "$SAVE"
  resume_point "$SAVE/checkpoint_last.pt" "$MAX_UPDATE" || exit 1  # sets DONE and STOP
  if [ -f "$SAVE/train.log" ] && grep -qE "ups[= ][0-9.]+" "$SAVE/train.log"; then
    RATE=$(grep -oE "ups[= ][0-9.]+" "$SAVE/train.log" | tail -n 1 | grep -oE "[0-9.]+$")
    RATE_SOURCE="measured by fairseq in the previous run, $SAVE/train.log"
  fi
  TODO=$((MAX_UPDATE > DONE ? MAX_UPDATE - DONE : 0))
  echo "quickstart: $ARCH, MAX_UPDATE=$MAX_UPDATE ($DONE done), data $DATA, checkpoints $SAVE"
  echo "time estimate: $TODO updates at $RATE updates/s ($RATE_SOURCE):" \
    "$(awk -v n="$TODO" -v r="$RATE" 'BEGIN { printf "%.1f", n / r / 60 }') min of training," \
    "plus data preparation and decoding"
fi

# --- data ---------------------------------------------------------------------------------
if [ -f "$DATA/bin/test.$SRC-$TGT.$TGT.idx" ] && [ -f "$DATA/raw/test_2016_flickr.$TGT" ]; then
  echo "data: $DATA already prepared (delete it to prepare again)"
elif [ "$QUICK" = 0 ]; then
  bash "$HERE/prepare-multi30k.sh" "$DATA" || prepare_failed "$DATA"
else
  # the first QUICK_TRAIN training and QUICK_EVAL val/test pairs, as .gz files for
  # prepare-multi30k.sh; without MULTI30K_DIR they come from the full data, downloaded
  # and prepared first into WORK_DIR/multi30k (which the full run then reuses)
  FULL=$WORK/multi30k
  if [ -z "${MULTI30K_DIR:-}" ] && [ ! -f "$FULL/raw/test_2016_flickr.$TGT" ]; then
    echo "data: QUICK=1 without MULTI30K_DIR: downloading and preparing the full data into $FULL first"
    env -u SPM_VOCAB bash "$HERE/prepare-multi30k.sh" "$FULL" || prepare_failed "$FULL"
  fi
  mkdir -p "$DATA/source"
  for split in train val test_2016_flickr; do
    lines=$([ "$split" = train ] && echo "$QUICK_TRAIN" || echo "$QUICK_EVAL")
    for lang in $SRC $TGT; do
      if [ -n "${MULTI30K_DIR:-}" ]; then
        (set +o pipefail; gunzip -c "$MULTI30K_DIR/$split.$lang.gz" | head -n "$lines")
      else
        head -n "$lines" "$FULL/raw/$split.$lang"
      fi | gzip > "$DATA/source/$split.$lang.gz"
    done
  done
  echo "data: QUICK=1 uses the first $QUICK_TRAIN training and $QUICK_EVAL val/test pairs ($DATA/source)"
  MULTI30K_DIR=$DATA/source SPM_VOCAB=$QUICK_SPM_VOCAB bash "$HERE/prepare-multi30k.sh" "$DATA" \
    || prepare_failed "$DATA"
fi

score() {  # $1: the save dir whose generate-test.txt is scored, $2: what was decoded
  local ref=$DATA/raw/test_2016_flickr.$TGT
  grep "^D-" "$1/generate-test.txt" | sed "s/^D-//" | sort -t$'\t' -k1,1n | cut -f3 > "$1/test.hyp"
  [ "$(wc -l < "$1/test.hyp")" -eq "$(wc -l < "$ref")" ] \
    || die "$1/generate-test.txt has $(wc -l < "$1/test.hyp") hypotheses for $(wc -l < "$ref") references: decoding was cut short; rerun"
  echo "sacreBLEU, test_2016_flickr ($(wc -l < "$ref") sentences), $DECODED, $2:"
  sacrebleu "$ref" -i "$1/test.hyp" -m bleu -f text -w 2
}

if [ "$RECIPE" = best ]; then
  MAX_UPDATE=$MAX_UPDATE STUDENT_FLAGS="$BEST_STUDENT_FLAGS ${TRAIN_FLAGS:-}" \
    bash "$HERE/train-multi30k-best.sh" "$DATA" "$WORK/checkpoints/best"
  score "$SAVE" "the distilled student ($ARCH) at $MAX_UPDATE updates"
  exit 0
fi

# --- train and decode (train-multi30k-small.sh) ---------------------------------------------
FLAGS="--arch $ARCH --max-update $MAX_UPDATE --stop-time-hours 0 --log-file $SAVE/train.log $EXTRA_FLAGS $STOP"
TRAIN_FLAGS="$FLAGS ${TRAIN_FLAGS:-}" bash "$HERE/train-multi30k-small.sh" "$DATA" "$SAVE"

# --- sacreBLEU on the raw references --------------------------------------------------------
score "$SAVE" "$ARCH at $((DONE > MAX_UPDATE ? DONE : MAX_UPDATE)) updates"
