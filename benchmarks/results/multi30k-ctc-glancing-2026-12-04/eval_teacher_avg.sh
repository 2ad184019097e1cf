#!/usr/bin/env bash
# the 2026-12-03 teacher (work/checkpoints/best/teacher), epochs 8-11 + last averaged, beam 5 on test
set -uo pipefail
cd /work/main; . .venv/bin/activate
export OMP_NUM_THREADS=1
T=work/checkpoints/best/teacher
cmlm-average-checkpoints --inputs $T/checkpoint8.pt $T/checkpoint9.pt $T/checkpoint10.pt $T/checkpoint11.pt $T/checkpoint_last.pt --output work/checkpoints/teacher-avg5.pt
R=work/ctc2avg
cmlm-table work/multi30k/bin --ar teacher-avg5=work/checkpoints/teacher-avg5.pt --ar teacher=$T/checkpoint_last.pt --beams 5 \
  --remove-bpe sentencepiece --cpu --json $R/teacher-test.json --markdown $R/teacher-test.md > $R/teacher-test.log 2>&1
cat $R/teacher-test.md
date
