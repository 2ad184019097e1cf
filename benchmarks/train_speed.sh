#!/usr/bin/env bash
# Training throughput, side by side: cmlm_plugin_small against fairseq's own
# cmlm_transformer of the same size (3+3 layers, d=256, FFN 1024, 4 heads, learned
# positions, GELU, shared embeddings), same data, same optimiser, same batches:
# --batch-size fixes the sentences per update (the token budget alone would pack
# different batches, since fairseq's translation_lev adds BOS to every sentence).
# Runs alternate (ours, fairseq, ours, fairseq, ...; ROUNDS rounds of UPDATES updates)
# and the script prints each run's train_wall (fairseq's training time, whole seconds)
# and the throughput ratio ours / fairseq: both train on the same sentences per update,
# so the ratio of times is the ratio of target words per second.
#
#   bash benchmarks/train_speed.sh DATA_BIN [OUT_DIR]
#
# ROUNDS (default 2), UPDATES (default 60), BATCH (default 64), DEVICE_FLAGS (--cpu).
set -euo pipefail
DATA=${1:?usage: train_speed.sh DATA_BIN [OUT_DIR]}
OUT=${2:-benchmarks/results/train_speed}
ROUNDS=${ROUNDS:-2}
UPDATES=${UPDATES:-60}
BATCH=${BATCH:-64}
DEVICE_FLAGS=${DEVICE_FLAGS:---cpu}
USER_DIR=${USER_DIR:-$(cmlm-plugin-dir)}
mkdir -p "$OUT"
COMMON=(--optimizer adam --adam-betas '(0.9, 0.98)' --lr 5e-4 --lr-scheduler inverse_sqrt
  --warmup-updates 500 --batch-size "$BATCH" --max-tokens 100000 --max-update "$UPDATES"
  --dropout 0.1 --label-smoothing 0.1 --seed 1 --no-save --log-interval 10
  --disable-validation --user-dir "$USER_DIR" $DEVICE_FLAGS)
ours=(--task cmlm --arch cmlm_plugin_small --criterion cmlm_plugin_loss)
theirs=(--task translation_lev --noise random_mask --arch cmlm_transformer
  --encoder-layers 3 --decoder-layers 3 --encoder-embed-dim 256 --decoder-embed-dim 256
  --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024 --encoder-attention-heads 4
  --decoder-attention-heads 4 --encoder-learned-pos --decoder-learned-pos --activation-fn gelu
  --apply-bert-init --share-all-embeddings --criterion nat_loss --length-loss-factor 0.1)
for round in $(seq "$ROUNDS"); do
  fairseq-train "$DATA" "${COMMON[@]}" "${ours[@]}" > "$OUT/ours-$round.log" 2>&1
  fairseq-train "$DATA" "${COMMON[@]}" "${theirs[@]}" > "$OUT/fairseq-$round.log" 2>&1
done
python - "$OUT" "$ROUNDS" "$BATCH" "$UPDATES" <<'PY'
import re, statistics, sys
out, rounds, batch, updates = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def wall(path):
    text = open(path).read()
    found = re.findall(r"train_wall[= ](\d+(?:\.\d+)?)", text)
    done = re.findall(r"done training in ([\d.]+) seconds", text)
    # the last train_inner log line holds train_wall of the whole run
    return float(found[-1]) if found else float(done[-1])
rows = {}
for kind in ("ours", "fairseq"):
    rows[kind] = [wall(f"{out}/{kind}-{r}.log") for r in range(1, rounds + 1)]
    print(f"{kind}: train_wall per run (s) {rows[kind]}, median {statistics.median(rows[kind]):.1f}")
ratio = statistics.median(rows["fairseq"]) / statistics.median(rows["ours"])
print(f"same {updates} updates x {batch} sentences: ours / fairseq throughput = {ratio:.2f}x")
PY
