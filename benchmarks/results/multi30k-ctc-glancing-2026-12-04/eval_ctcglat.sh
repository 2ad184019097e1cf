#!/usr/bin/env bash
# ctcglat (ctc2 + glancing from update 1500): test T=1 at every 500-update checkpoint as it
# appears (ctc2's curve beside it), then the blank penalty chosen on valid, last and averaged
set -uo pipefail
cd /work/main; . .venv/bin/activate
export OMP_NUM_THREADS=1
C=work/checkpoints/ctcglat
R=work/ctcglat-eval; mkdir -p $R
for u in 2000 2500 3000; do
  while ! ls $C/checkpoint_*_$u.pt > /dev/null 2>&1; do sleep 30; done
  sleep 20
  fairseq-generate work/multi30k/bin --user-dir cmlm_plugin --task cmlm \
    --path $(ls $C/checkpoint_*_$u.pt) --gen-subset test --batch-size 128 \
    --iter-decode-max-iter 1 --iter-decode-with-beam 1 --remove-bpe sentencepiece --scoring sacrebleu --cpu 2>/dev/null | tail -1 > $R/test-$u.txt
  echo "$(date -u +%H:%M) $u: $(cat $R/test-$u.txt)"
done
while [ "$(grep -c UTC work/run_ctcglat.out)" -lt 3 ]; do sleep 20; done
N=$(ls $C/checkpoint[0-9]*.pt | sed 's/.*checkpoint\([0-9]*\).pt/\1/' | sort -n | tail -4 | sed "s#^#$C/checkpoint#; s#\$#.pt#")
cmlm-average-checkpoints --inputs $N $C/checkpoint_last.pt --output work/checkpoints/ctcglat-avg5.pt
export OMP_NUM_THREADS=2
cmlm-table work/multi30k/bin --subset valid --cmlm last=$C/checkpoint_last.pt \
  --configs T=1,l=1 T=1,l=1,blank=0.5 T=1,l=1,blank=1 T=1,l=1,blank=1.5 T=1,l=1,blank=2 \
  --remove-bpe sentencepiece --cpu --json $R/valid-last.json --markdown $R/valid-last.md > $R/valid-last.log 2>&1
cmlm-table work/multi30k/bin --subset valid --cmlm avg5=work/checkpoints/ctcglat-avg5.pt \
  --configs T=1,l=1 T=1,l=1,blank=0.5 T=1,l=1,blank=1 T=1,l=1,blank=1.5 T=1,l=1,blank=2 \
  --remove-bpe sentencepiece --cpu --json $R/valid-avg5.json --markdown $R/valid-avg5.md > $R/valid-avg5.log 2>&1
for name in last avg5; do
  P=$(python -c "
import json; rows = json.load(open('$R/valid-$name.json'))
best = max(rows, key=lambda r: r['sacrebleu']); print(best['config'].split('blank=')[1] if 'blank=' in best['config'] else '0')")
  echo "$name: chosen on valid: blank=$P"
  CK=$C/checkpoint_last.pt; [ $name = avg5 ] && CK=work/checkpoints/ctcglat-avg5.pt
  cmlm-table work/multi30k/bin --cmlm $name=$CK --configs T=1,l=1 T=1,l=1,blank=$P \
    --remove-bpe sentencepiece --cpu --json $R/test-$name.json --markdown $R/test-$name.md > $R/test-$name.log 2>&1
  cat $R/test-$name.md
done
date
