#!/usr/bin/env bash
# CTC student with glancing from update 1500: resumes ctc2's checkpoint at 1500 (= --second-pass-from-update 1500 on the same seed)
set -uo pipefail
cd /work/main; . .venv/bin/activate
date
T=work/checkpoints/best/teacher/checkpoint_last.pt
SAVE=work/checkpoints/ctcglat
OMP_NUM_THREADS=2 fairseq-train work/multi30k-distill/bin --user-dir cmlm_plugin --task cmlm \
  --arch cmlm_plugin_small --criterion cmlm_plugin_loss --label-smoothing 0.1 \
  --optimizer adam --adam-betas '(0.9, 0.98)' --weight-decay 0.01 --clip-norm 1.0 \
  --lr 1e-3 --lr-scheduler inverse_sqrt --warmup-updates 500 --warmup-init-lr 1e-7 \
  --max-tokens 2048 --max-epoch 200 --max-update 3000 \
  --save-dir $SAVE --keep-last-epochs 5 --log-interval 100 --seed 1 --cpu \
  --save-interval-updates 500 --keep-interval-updates -1 --init-from-ar $T --activation-fn relu \
  --ctc-upsample 2 --ctc-canvas source \
  --glancing-ratio 0.5 --glancing-ratio-end 0.3 --glancing-anneal-updates 3000 --second-pass-from-update 1500 > work/ctcglat.log 2>&1
date
OMP_NUM_THREADS=2 fairseq-generate work/multi30k-distill/bin --user-dir cmlm_plugin --task cmlm \
  --path $SAVE/checkpoint_last.pt --gen-subset test --batch-size 128 \
  --iter-decode-max-iter 1 --iter-decode-with-beam 1 \
  --remove-bpe sentencepiece --scoring sacrebleu --cpu > $SAVE/generate-test.txt 2> work/ctcglat-gen.err
tail -n 1 $SAVE/generate-test.txt
date
