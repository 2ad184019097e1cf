#!/usr/bin/env bash
# The autoregressive baseline of the same size as cmlm_plugin_small: fairseq's own
# `transformer` (3+3 layers, d=256, FFN 1024, 4 heads, shared embeddings), trained on
# the same Multi30k data with the same optimiser and schedule, then decoded with beam 1
# and beam 5 on test_2016_flickr (sacreBLEU).
#
#   bash examples/translation/train-multi30k-ar.sh [DATA_DIR] [SAVE_DIR]
#
# MAX_UPDATE (default 1933: the updates the CMLM quickstart reached in 36 minutes on a
# 2-core CPU) bounds training by updates, so that the two models are compared at equal
# updates whatever else the machine runs. --required-batch-size-multiple 1 keeps
# fairseq-generate from dropping the last test sentences (see docs/design.md, "Design choices").
# --user-dir loads the plugin only for its weights-only allow-list: with torch >= 2.6
# fairseq's own checkpoints do not load without it (resume, generate).
# BEAMS (default "1 5") are the beam sizes decoded after training.
# TRAIN_FLAGS adds or overrides training flags, e.g. validation BLEU to pick a teacher:
#   TRAIN_FLAGS="--eval-bleu --eval-bleu-detok space --eval-bleu-remove-bpe sentencepiece
#     --best-checkpoint-metric bleu --maximize-best-checkpoint-metric" bash ...
set -euo pipefail
DATA=${1:-work/multi30k}
SAVE=${2:-work/checkpoints/multi30k-ar}
MAX_UPDATE=${MAX_UPDATE:-1933}
DEVICE_FLAGS=${DEVICE_FLAGS:---cpu}
USER_DIR=${USER_DIR:-$(cmlm-plugin-dir)}
TRAIN_FLAGS=${TRAIN_FLAGS:-}
BEAMS=${BEAMS:-1 5}
[[ $MAX_UPDATE =~ ^[1-9][0-9]*$ ]] || { echo "error: MAX_UPDATE must be a positive integer, got '$MAX_UPDATE'" >&2; exit 1; }
for beam in $BEAMS; do
  [[ $beam =~ ^[1-9][0-9]*$ ]] || { echo "error: BEAMS must be beam sizes (positive integers, e.g. \"1 5\"), got '$BEAMS'" >&2; exit 1; }
done
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=resume-common.sh
. "$HERE/resume-common.sh"

# a finished training is only decoded again (resume_point sets STOP)
resume_point "$SAVE/checkpoint_last.pt" "$MAX_UPDATE" || exit 1
fairseq-train "$DATA/bin" --user-dir "$USER_DIR" --task translation --arch transformer \
  --encoder-layers 3 --decoder-layers 3 --encoder-embed-dim 256 --decoder-embed-dim 256 \
  --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024 \
  --encoder-attention-heads 4 --decoder-attention-heads 4 --share-all-embeddings \
  --dropout 0.1 --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
  --optimizer adam --adam-betas '(0.9, 0.98)' --weight-decay 0.01 --clip-norm 1.0 \
  --lr 1e-3 --lr-scheduler inverse_sqrt --warmup-updates 500 --warmup-init-lr 1e-7 \
  --max-tokens 2048 --max-update "$MAX_UPDATE" --max-epoch 200 \
  --save-dir "$SAVE" --keep-last-epochs 5 --log-interval 100 --seed 1 $DEVICE_FLAGS $TRAIN_FLAGS $STOP

for beam in $BEAMS; do
  fairseq-generate "$DATA/bin" --user-dir "$USER_DIR" --task translation --path "$SAVE/checkpoint_last.pt" \
    --gen-subset test --batch-size 128 --required-batch-size-multiple 1 --beam "$beam" \
    --remove-bpe sentencepiece --scoring sacrebleu $DEVICE_FLAGS > "$SAVE/generate-test-beam$beam.txt"
  echo "beam $beam: $(tail -n 1 "$SAVE/generate-test-beam$beam.txt")"
done
