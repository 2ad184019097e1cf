#!/usr/bin/env bash
# fairseq's own CMLM (`cmlm_transformer`, task `translation_lev`) of the same size as
# cmlm_plugin_small, trained on the same Multi30k data with the same optimiser and
# schedule, for the comparison table (docs/reproducing.md, "Multi30k: the table on a CPU
# budget"). Decoded here with fairseq's IterativeRefinementGenerator at T=10, l=5.
#
#   bash examples/translation/train-multi30k-fairseq-cmlm.sh [DATA_DIR] [SAVE_DIR]
#
# Sizes and settings matched to cmlm_plugin_small: 3+3 layers, d=256, FFN 1024, 4 heads,
# learned positions, GELU, BERT initialisation, shared embeddings, dropout 0.1, label
# smoothing 0.1. What stays fairseq's own: masks are written as <unk>, decoder inputs
# carry BOS/EOS, the length loss is a 0.1-weighted mean (ours: 1.0 per sentence).
# MAX_UPDATE (default 1933) bounds training by updates, as in train-multi30k-ar.sh.
# --user-dir loads the plugin only for its weights-only allow-list (torch >= 2.6).
# To decode this model with cmlm_plugin's generator, convert it:
#   cmlm-convert fairseq-cmlm SAVE_DIR/checkpoint_last.pt OUT.pt --data DATA_DIR/bin
set -euo pipefail
DATA=${1:-work/multi30k}
SAVE=${2:-work/checkpoints/multi30k-fairseq-cmlm}
MAX_UPDATE=${MAX_UPDATE:-1933}
DEVICE_FLAGS=${DEVICE_FLAGS:---cpu}
USER_DIR=${USER_DIR:-$(cmlm-plugin-dir)}

fairseq-train "$DATA/bin" --user-dir "$USER_DIR" --task translation_lev --noise random_mask \
  --arch cmlm_transformer --encoder-layers 3 --decoder-layers 3 \
  --encoder-embed-dim 256 --decoder-embed-dim 256 \
  --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024 \
  --encoder-attention-heads 4 --decoder-attention-heads 4 \
  --encoder-learned-pos --decoder-learned-pos --activation-fn gelu --apply-bert-init \
  --share-all-embeddings --dropout 0.1 \
  --criterion nat_loss --label-smoothing 0.1 --length-loss-factor 0.1 \
  --optimizer adam --adam-betas '(0.9, 0.98)' --weight-decay 0.01 --clip-norm 1.0 \
  --lr 1e-3 --lr-scheduler inverse_sqrt --warmup-updates 500 --warmup-init-lr 1e-7 \
  --max-tokens 2048 --max-update "$MAX_UPDATE" --max-epoch 200 \
  --save-dir "$SAVE" --keep-last-epochs 5 --log-interval 100 --seed 1 $DEVICE_FLAGS

fairseq-generate "$DATA/bin" --user-dir "$USER_DIR" --task translation_lev \
  --path "$SAVE/checkpoint_last.pt" --gen-subset test --batch-size 128 \
  --required-batch-size-multiple 1 --iter-decode-max-iter 10 --iter-decode-with-beam 5 \
  --remove-bpe sentencepiece --scoring sacrebleu $DEVICE_FLAGS > "$SAVE/generate-test.txt"
tail -n 1 "$SAVE/generate-test.txt"
