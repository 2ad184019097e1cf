#!/usr/bin/env bash
# Training throughput of the training methods, side by side: cmlm_plugin_small with the
# plain CMLM objective, with glancing (--glancing-ratio 0.5), with self-correction
# (--self-correction 0.5), with both, with CTC on a canvas of twice the source
# (--ctc-upsample 2) and with CTC and glancing on its canvas, on the same data and
# batches (--batch-size fixes the sentences per update). Runs alternate (plain, glancing,
# self-correction, both, ctc, ctc-glancing, plain, ...; ROUNDS rounds of UPDATES updates)
# so that a load that drifts over time hits every system alike; the script prints each
# run's training time ("done training in") and the throughput of each method relative to
# plain (same sentences per update, so the ratio of times is the ratio of target words
# per second).
#
#   bash benchmarks/train_methods_speed.sh DATA_BIN [OUT_DIR]
#
# ROUNDS (default 2), UPDATES (default 40), BATCH (default 64), DEVICE_FLAGS (--cpu),
# SYSTEMS (default "plain glancing self-correction both ctc ctc-glancing"; plain is always
# measured).
set -euo pipefail
DATA=${1:?usage: train_methods_speed.sh DATA_BIN [OUT_DIR]}
OUT=${2:-benchmarks/results/train_methods_speed}
ROUNDS=${ROUNDS:-2}
UPDATES=${UPDATES:-40}
BATCH=${BATCH:-64}
DEVICE_FLAGS=${DEVICE_FLAGS:---cpu}
USER_DIR=${USER_DIR:-$(cmlm-plugin-dir)}
mkdir -p "$OUT"
COMMON=(--task cmlm --arch cmlm_plugin_small --criterion cmlm_plugin_loss
  --optimizer adam --adam-betas '(0.9, 0.98)' --lr 5e-4 --lr-scheduler inverse_sqrt
  --warmup-updates 500 --batch-size "$BATCH" --max-tokens 100000 --max-update "$UPDATES"
  --label-smoothing 0.1 --seed 1 --no-save --log-interval 10 --disable-validation
  --user-dir "$USER_DIR" $DEVICE_FLAGS)
declare -A FLAGS=(
  [plain]=""
  [glancing]="--glancing-ratio 0.5"
  [self-correction]="--self-correction 0.5"
  [both]="--glancing-ratio 0.5 --self-correction 0.5"
  [ctc]="--ctc-upsample 2"
  [ctc-glancing]="--ctc-upsample 2 --glancing-ratio 0.5"
)
read -r -a SYSTEMS <<< "${SYSTEMS:-plain glancing self-correction both ctc ctc-glancing}"
for system in "${SYSTEMS[@]}"; do
  [ -n "${FLAGS[$system]+set}" ] || { echo "error: SYSTEMS names '$system'; use some of: ${!FLAGS[*]}" >&2; exit 1; }
done
[[ " ${SYSTEMS[*]} " == *" plain "* ]] || SYSTEMS=(plain "${SYSTEMS[@]}")
for round in $(seq "$ROUNDS"); do
  for system in "${SYSTEMS[@]}"; do
    # shellcheck disable=SC2086  # the method's flags are split on purpose
    fairseq-train "$DATA" "${COMMON[@]}" ${FLAGS[$system]} > "$OUT/$system-$round.log" 2>&1
  done
done
python - "$OUT" "$ROUNDS" "$BATCH" "$UPDATES" "${SYSTEMS[@]}" <<'PY'
import re, statistics, sys
out, rounds, batch, updates, *systems = sys.argv[1:]
def seconds(path):
    return float(re.findall(r"done training in ([\d.]+) seconds", open(path).read())[-1])
times = {s: [seconds(f"{out}/{s}-{r}.log") for r in range(1, int(rounds) + 1)] for s in systems}
base = statistics.median(times["plain"])
for s in systems:
    median = statistics.median(times[s])
    print(f"{s}: seconds per run {times[s]}, median {median:.1f}, "
          f"throughput {base / median:.2f}x plain ({updates} updates x {batch} sentences)")
PY
