#!/usr/bin/env bash
# Train the CPU-sized CMLM (cmlm_plugin_small: 3+3 layers, d=256) on Multi30k EN-DE
# for a wall-clock budget, then decode test_2016_flickr with Mask-Predict.
#
#   bash examples/translation/train-multi30k-small.sh [DATA_DIR] [SAVE_DIR]
#
# DATA_DIR is the output of prepare-multi30k.sh (default work/multi30k).
# TRAIN_HOURS (default 0.6) bounds the training time; on a GPU, drop --cpu and
# raise the budget. These are quickstart settings, not the paper's (see docs/reproducing.md).
# TRAIN_FLAGS adds or overrides training flags, e.g. the masked-diffusion objective:
#   TRAIN_FLAGS="--objective diffusion --label-smoothing 0" bash ... work/multi30k work/checkpoints/diff
# DECODE_FLAGS replaces the decoding flags (default Mask-Predict T=10, l=5:
# "--iter-decode-max-iter 10 --iter-decode-with-beam 5"); a CTC model (--ctc-upsample)
# decodes in one pass: DECODE_FLAGS="--iter-decode-max-iter 1 --iter-decode-with-beam 1".
set -euo pipefail
DATA=${1:-work/multi30k}
SAVE=${2:-work/checkpoints/multi30k-small}
TRAIN_HOURS=${TRAIN_HOURS:-0.6}
USER_DIR=${USER_DIR:-$(cmlm-plugin-dir)}
DEVICE_FLAGS=${DEVICE_FLAGS:---cpu}
TRAIN_FLAGS=${TRAIN_FLAGS:-}
DECODE_FLAGS=${DECODE_FLAGS:---iter-decode-max-iter 10 --iter-decode-with-beam 5}

fairseq-train "$DATA/bin" --user-dir "$USER_DIR" --task cmlm \
  --arch cmlm_plugin_small --criterion cmlm_plugin_loss --label-smoothing 0.1 \
  --optimizer adam --adam-betas '(0.9, 0.98)' --weight-decay 0.01 --clip-norm 1.0 \
  --lr 1e-3 --lr-scheduler inverse_sqrt --warmup-updates 500 --warmup-init-lr 1e-7 \
  --max-tokens 2048 --stop-time-hours "$TRAIN_HOURS" --max-epoch 200 \
  --save-dir "$SAVE" --keep-last-epochs 5 --log-interval 100 --seed 1 $DEVICE_FLAGS $TRAIN_FLAGS

fairseq-generate "$DATA/bin" --user-dir "$USER_DIR" --task cmlm \
  --path "$SAVE/checkpoint_last.pt" --gen-subset test --batch-size 128 $DECODE_FLAGS \
  --remove-bpe sentencepiece --scoring sacrebleu $DEVICE_FLAGS > "$SAVE/generate-test.txt"
tail -n 2 "$SAVE/generate-test.txt"
