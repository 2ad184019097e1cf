#!/usr/bin/env bash
# The GPU check of issue 14: on one CUDA machine, in about 8 minutes, show that training
# and decoding run on a GPU and measure decoding speed, everything written under $OUT.
#
#   OUT=DIR bash benchmarks/gpu_check.sh            (a CUDA machine)
#   OUT=DIR bash benchmarks/gpu_check.sh --smoke    (any CPU, tiny sizes, under a minute)
#
# Phases (each bounded by `timeout`, logged to $OUT/<phase>.log; a failed phase is
# recorded in $OUT/summary.txt and the script goes on, exiting 1 at the end):
#   install   the README's command, `pip install -e ".[test]"` (keeps the CUDA torch
#             already installed); SKIP_INSTALL=1 skips it, --smoke never runs it
#   env       nvidia-smi, torch / CUDA / fairseq versions
#   tests     `pytest -m cuda tests` (tests/test_cuda.py: fast and compiled against
#             modules on CUDA, fp16/bf16 finite scores, int8 refused, syncs per batch)
#   data      Multi30k EN-DE via examples/translation/prepare-multi30k.sh (MULTI30K_DIR:
#             a folder of its .gz files, else download; DATA_BIN: an existing binarized
#             folder); --smoke: generated toy data (tests/toydata.py)
#   train     three trainings at once on the one GPU, TRAIN_MINUTES (default 2) each, all
#             with --fp16: ours (cmlm_plugin_base), fairseq's cmlm_transformer of the same
#             size (its generator's weights) and fairseq's autoregressive `transformer`;
#             their last logged loss goes to the summary (finite or not)
#   convert   fairseq's CMLM -> our format (cmlm-convert), identical weights
#   decode    benchmarks/decode_speed.py at batch 1 (SENTENCES_B1, default 60) and 128
#             (SENTENCES_B128, default 256): ours fast and compiled at T=10, l=5 and T=4,
#             l=1, fairseq's generator on the same weights, AR beam 1 and 5; then ours in
#             fp16 (fast and compiled); full warm-up (compiles before timing), 3 repeats
#   generate  fairseq-generate --fp16 with our own trained model on the test set (BLEU;
#             --smoke too: fairseq-generate halves the model on a CPU as well)
# The tests phase runs beside data + train (they are not timed); decoding runs alone.
# At the end (PACK=1, the default on a GPU) $OUT holds summary.txt and gpu-check.tar.gz
# with everything else (the device tool brings back at most 8 files). A GPU machine
# without network needs the environment installed already (SKIP_INSTALL=1) and Multi30k
# in MULTI30K_DIR (default: the checkout's shared/data/multi30k when it exists).
# Phase time limits (seconds): LIMIT_INSTALL 240, LIMIT_TESTS 240, LIMIT_TRAIN from
# TRAIN_MINUTES, LIMIT_DECODE 150 per decode_speed run.
set -uo pipefail

SMOKE=0
case "${1:-}" in
  --smoke) SMOKE=1 ;;
  "") ;;
  *) echo "gpu_check error: unknown argument '$1' (use --smoke or nothing)" >&2; exit 2 ;;
esac
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
OUT=${OUT:-$ROOT/benchmarks/results/gpu-check-$(date +%Y-%m-%d-%H%M)}
mkdir -p "$OUT" || { echo "gpu_check error: cannot create OUT=$OUT: set OUT to a writable folder" >&2; exit 2; }
OUT=$(cd "$OUT" && pwd)
WORK=$OUT/work
mkdir -p "$WORK"
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
FAILED=0
PY=${PYTHON:-python}

log() { echo "[gpu_check $(date +%H:%M:%S)] $*" | tee -a "$SUMMARY"; }

phase() {  # phase NAME LIMIT_S COMMAND...: run, log to $OUT/NAME.log, record the outcome
  local name=$1 limit=$2 start=$SECONDS code
  shift 2
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  code=$?
  if [ $code -eq 0 ]; then
    log "$name: ok in $((SECONDS - start)) s"
  else
    [ $code -eq 124 ] && log "$name: FAILED, over its ${limit} s limit" || log "$name: FAILED (exit $code) after $((SECONDS - start)) s, see $name.log"
    FAILED=1
  fi
  return $code
}

if [ $SMOKE -eq 1 ]; then
  DEVICE=(--cpu)
  HALF=()                     # fairseq-train --fp16 needs CUDA
  TRAIN_LIMIT=${LIMIT_TRAIN:-120}
  STOP=(--max-update 3)
  SIZE_OURS=(--arch cmlm_plugin_tiny)
  SIZE_FAIRSEQ=(--encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 32 --decoder-embed-dim 32
    --encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64 --encoder-attention-heads 2
    --decoder-attention-heads 2)
  SENTENCES_B1=${SENTENCES_B1:-6}
  SENTENCES_B128=${SENTENCES_B128:-12}
  BIG_BATCH=4
  REPEATS=1
  CONFIGS=(T=2,l=2)
  [ "${SMOKE_COMPILED:-0}" = 1 ] && CONFIGS+=(T=2,l=2,impl=compiled)  # ~30 s of compiling
  HALF_CONFIGS=()             # no half-precision decoding rows on a CPU
  BEAMS=1
  LIMIT_DECODE=${LIMIT_DECODE:-120}
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
else
  DEVICE=()
  HALF=(--fp16)
  MINUTES=${TRAIN_MINUTES:-2}
  TRAIN_LIMIT=${LIMIT_TRAIN:-$(( MINUTES * 60 + 90 ))}
  STOP=(--stop-time-hours "$($PY -c "print($MINUTES / 60)")" --max-update 100000)
  SIZE_OURS=(--arch cmlm_plugin_base)
  SIZE_FAIRSEQ=(--encoder-layers 6 --decoder-layers 6 --encoder-embed-dim 512 --decoder-embed-dim 512
    --encoder-ffn-embed-dim 2048 --decoder-ffn-embed-dim 2048 --encoder-attention-heads 8
    --decoder-attention-heads 8)
  SENTENCES_B1=${SENTENCES_B1:-60}
  SENTENCES_B128=${SENTENCES_B128:-256}
  BIG_BATCH=128
  REPEATS=3
  CONFIGS=(T=10,l=5 T=10,l=5,impl=compiled T=4,l=1 T=4,l=1,impl=compiled)
  HALF_CONFIGS=(T=10,l=5 T=10,l=5,impl=compiled)
  BEAMS=1,5
  LIMIT_DECODE=${LIMIT_DECODE:-150}
fi
log "mode: $([ $SMOKE -eq 1 ] && echo smoke, CPU || echo GPU); OUT=$OUT"

# --- install ------------------------------------------------------------------------------
if [ $SMOKE -eq 0 ] && [ "${SKIP_INSTALL:-0}" != 1 ]; then
  phase install "${LIMIT_INSTALL:-240}" $PY -m pip install -e ".[test]"
fi

# --- env ----------------------------------------------------------------------------------
{
  date -u
  nvidia-smi 2>&1 || echo "nvidia-smi: not available"
  $PY - << 'EOF'
import importlib.metadata as metadata

import torch

print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    print(torch.cuda.get_device_name())
for name in ("ve-fairseq", "fairseq-fixed", "fairseq"):
    try:
        print(name, metadata.version(name))
    except metadata.PackageNotFoundError:
        pass
EOF
} > "$OUT/env.log" 2>&1
if [ $SMOKE -eq 0 ] && ! $PY -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
  log "no CUDA device: run with --smoke on a CPU"
  exit 1
fi
USER_DIR=$ROOT/cmlm_plugin

# --- tests (beside data + train) ----------------------------------------------------------
phase tests "${LIMIT_TESTS:-240}" $PY -m pytest -q -m cuda tests/test_cuda.py -p no:cacheprovider &
TESTS_PID=$!

# --- data ---------------------------------------------------------------------------------
DATA=$WORK/data
BIN=${DATA_BIN:-$DATA/bin}
if [ -n "${DATA_BIN:-}" ]; then
  log "data: using DATA_BIN=$DATA_BIN"
elif [ $SMOKE -eq 1 ]; then
  phase data 120 $PY -c "
import sys; sys.path.insert(0, 'tests')
from pathlib import Path
from toydata import write_transduction
write_transduction(Path('$DATA/raw'), {'train': 200, 'valid': 16, 'test': 16}, seed=3)
" && phase preprocess 120 fairseq-preprocess --source-lang src --target-lang tgt \
    --trainpref "$DATA/raw/train" --validpref "$DATA/raw/valid" --testpref "$DATA/raw/test" \
    --destdir "$BIN" --joined-dictionary --workers 1
else
  if [ -z "${MULTI30K_DIR:-}" ] && [ -d "$ROOT/shared/data/multi30k" ]; then
    export MULTI30K_DIR=$ROOT/shared/data/multi30k  # a checkout's shared/ travels to a GPU machine
  fi
  phase data 300 bash examples/translation/prepare-multi30k.sh "$DATA"
fi
if [ -f "$BIN/dict.en.txt" ]; then LANGS=(-s en -t de); else LANGS=(-s src -t tgt); fi
REMOVE_BPE=()
[ $SMOKE -eq 0 ] && REMOVE_BPE=(--remove-bpe sentencepiece)

# --- train: three at once -----------------------------------------------------------------
COMMON=(--optimizer adam --adam-betas '(0.9, 0.98)' --weight-decay 0.01 --clip-norm 1.0
  --lr 5e-4 --lr-scheduler inverse_sqrt --warmup-updates 1000 --warmup-init-lr 1e-7
  --max-tokens 8192 --dropout 0.1 --label-smoothing 0.1 --log-format simple --log-interval 50
  --no-epoch-checkpoints --disable-validation --seed 1 "${STOP[@]}" "${HALF[@]}" "${DEVICE[@]}")
if [ -f "$BIN/dict.${LANGS[1]}.txt" ]; then
  phase train-ours "$TRAIN_LIMIT" fairseq-train "$BIN" --user-dir "$USER_DIR" --task cmlm \
    "${LANGS[@]}" "${SIZE_OURS[@]}" --criterion cmlm_plugin_loss --save-dir "$WORK/ours" \
    "${COMMON[@]}" &
  P1=$!
  phase train-fairseq-cmlm "$TRAIN_LIMIT" fairseq-train "$BIN" --user-dir "$USER_DIR" \
    --task translation_lev --noise random_mask "${LANGS[@]}" --arch cmlm_transformer \
    "${SIZE_FAIRSEQ[@]}" --encoder-learned-pos --decoder-learned-pos --activation-fn gelu \
    --apply-bert-init --share-all-embeddings --criterion nat_loss --length-loss-factor 0.1 \
    --save-dir "$WORK/fairseq-cmlm" "${COMMON[@]}" &
  P2=$!
  phase train-ar "$TRAIN_LIMIT" fairseq-train "$BIN" --user-dir "$USER_DIR" --task translation \
    "${LANGS[@]}" --arch transformer "${SIZE_FAIRSEQ[@]}" --share-all-embeddings \
    --criterion label_smoothed_cross_entropy --save-dir "$WORK/ar" "${COMMON[@]}" &
  P3=$!
  wait $P1 $P2 $P3
  for name in ours fairseq-cmlm ar; do  # fairseq's log: "| train | epoch 001 | loss 7.55 | ..."
    last=$(grep -E "\| (train|train_inner) \|" "$OUT/train-$name.log" | tail -1)
    loss=$(grep -oE "\| loss [^ |]+" <<< "$last" | head -1)
    updates=$(grep -oE "num_updates [0-9]+" <<< "$last" | head -1)
    log "train-$name: last ${loss#| }, ${updates:-no update logged}"
  done
else
  log "train: skipped, no binarized data in $BIN"
  FAILED=1
fi
wait $TESTS_PID 2> /dev/null
grep -E "passed|failed|skipped|error" "$OUT/tests.log" | tail -1 | sed 's/^/  tests: /' | tee -a "$SUMMARY"

# --- convert ------------------------------------------------------------------------------
GENERATE=(fairseq-generate "$BIN" --user-dir "$USER_DIR" --task cmlm "${LANGS[@]}"
  --path "$WORK/ours/checkpoint_last.pt" --gen-subset test --batch-size 128
  --required-batch-size-multiple 1 --iter-decode-max-iter 10 --iter-decode-with-beam 5
  "${REMOVE_BPE[@]}" --fp16 "${DEVICE[@]}")  # fairseq-generate --fp16 runs on a CPU too
if [ $SMOKE -eq 1 ]; then  # nothing is timed for real: generate beside convert and decode
  phase generate 180 "${GENERATE[@]}" &
  GENERATE_PID=$!
fi
CONVERTED=$WORK/converted.pt
phase convert 120 cmlm-convert fairseq-cmlm "$WORK/fairseq-cmlm/checkpoint_last.pt" "$CONVERTED" --data "$BIN"

# --- decode: one run at a time ------------------------------------------------------------
decode() {  # decode NAME BATCH SENTENCES EXTRA...
  local name=$1 batch=$2 count=$3
  shift 3
  phase "decode-$name" "$LIMIT_DECODE" $PY benchmarks/decode_speed.py "$BIN" --ours "$CONVERTED" \
    --batch-sizes "$batch" --sentences "$count" --repeats "$REPEATS" --full-warmup \
    "${REMOVE_BPE[@]}" "${DEVICE[@]}" --out "$OUT/decode-$name" "$@"
}
SYSTEMS=(--fairseq-cmlm "$WORK/fairseq-cmlm/checkpoint_last.pt" --ar "$WORK/ar/checkpoint_last.pt"
  --beams "$BEAMS" --configs "${CONFIGS[@]}")
if [ $SMOKE -eq 1 ]; then  # both batch sizes in one run
  decode "b1-b$BIG_BATCH" "1,$BIG_BATCH" "$SENTENCES_B1,$SENTENCES_B128" "${SYSTEMS[@]}"
  wait $GENERATE_PID
else
  decode b1 1 "$SENTENCES_B1" "${SYSTEMS[@]}"
  decode "b$BIG_BATCH" "$BIG_BATCH" "$SENTENCES_B128" "${SYSTEMS[@]}"
  decode fp16-b1 1 "$SENTENCES_B1" --half fp16 --beams "" --configs "${HALF_CONFIGS[@]}"
  decode "fp16-b$BIG_BATCH" "$BIG_BATCH" "$SENTENCES_B128" --half fp16 --beams "" \
    --configs "${HALF_CONFIGS[@]}"
  phase generate 180 "${GENERATE[@]}"  # our own trained model, fp16, the whole test set
fi
for f in "$OUT"/decode-*/decode_speed.md; do
  [ -f "$f" ] && { echo "== $(basename "$(dirname "$f")")"; cat "$f"; } >> "$SUMMARY"
done

grep -E "^Generate|BLEU" "$OUT/generate.log" | tail -2 | sed 's/^/  generate: /' | tee -a "$SUMMARY"

grep -q FAILED "$SUMMARY" && FAILED=1  # phases run in the background log there too
[ "${KEEP_WORK:-0}" = 1 ] || rm -rf "$WORK"  # data and weights are not results (KEEP_WORK=1 keeps them)
log "done: $([ $FAILED -eq 0 ] && echo 'every phase ok' || echo 'some phase FAILED'); results in $OUT"
if [ "${PACK:-$((1 - SMOKE))}" = 1 ]; then  # PACK=1 (GPU default): summary.txt + one archive
  archive=${TMPDIR:-/tmp}/gpu-check.$$.tar.gz
  (cd "$OUT" && tar czf "$archive" --exclude=./summary.txt . && mv "$archive" gpu-check.tar.gz &&
    find . -mindepth 1 ! -name summary.txt ! -name gpu-check.tar.gz -delete)
fi
exit $FAILED
