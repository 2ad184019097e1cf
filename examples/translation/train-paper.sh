#!/usr/bin/env bash
# Train a CMLM with the Mask-Predict paper's recipe (Ghazvininejad et al. 2019) on any
# prepared data, then average the 5 best checkpoints.
#
#   bash examples/translation/train-paper.sh DATA_DIR SAVE_DIR
#   e.g. bash examples/translation/train-paper.sh work/wmt14-en-de-distill work/checkpoints/wmt14-en-de
#
# DATA_DIR is the output of a prepare-*.sh script (its bin/ folder is used) or a fairseq
# binarized folder itself (dict.*.txt inside), e.g. the DATA_DIR-distill of distill.sh.
# Downloads nothing. Runs until MAX_UPDATE updates; rerunning the same command resumes
# from SAVE_DIR/checkpoint_last.pt (fairseq's default).
#
# Recipe (paper and its original code, facebookresearch/Mask-Predict): cmlm_plugin_base
# (6+6 layers, d=512, shared embeddings), Adam betas (0.9, 0.999), eps 1e-6 (original
# command), lr 5e-4, inverse_sqrt with 10000 warm-up updates from 1e-7, dropout 0.3,
# weight decay 0.01, label smoothing 0.1, length loss weight 1.0 (original code),
# gradient clipping at 25 (the original fork's default --clip-norm; fairseq main's
# default is no clipping), 300k updates of about 128k tokens. The original command ran
# --max-tokens 8192 per GPU, so 128k tokens means 16 GPUs; with fewer GPUs the same
# batch comes from gradient accumulation:
#   --update-freq = ceil(TOKENS_PER_UPDATE / (NUM_GPUS * MAX_TOKENS))
# (printed at start; 1 GPU and 8192 tokens give 16, i.e. 131072 tokens per update).
# Checkpoints and validation come every SAVE_INTERVAL_UPDATES updates (not per epoch:
# an epoch is ~7x shorter on EN-RO than on EN-DE); fairseq keeps the 5 best by
# validation loss (checkpoint.best_loss_*.pt) and the last KEEP_INTERVAL_UPDATES
# interval checkpoints. The validation loss uses random masks, so the ranking between
# close checkpoints is noisy. At the end (AVERAGE=1), cmlm-average-checkpoints writes
# SAVE_DIR/checkpoint.avg5.pt, the average of the 5 best, as in the paper.
#
# Cost (estimate, not measured): a base model is ~60M parameters; 300k updates x 128k
# tokens is ~1.4e19 training FLOPs, i.e. on the order of 100-200 V100-hours or
# 20-40 H100-hours at typical utilisation; cmlm_plugin_big costs ~3.5x more. Disk:
# ~0.7-1 GB per base checkpoint (weights + Adam state), ~10-15 GB in SAVE_DIR with the
# defaults.
#
# Environment:
#   ARCH                   cmlm_plugin_base (default, the paper's) or cmlm_plugin_big
#   NUM_GPUS               GPUs on this node (default: torch.cuda.device_count(), at least
#                          1); passed as --distributed-world-size
#   MAX_TOKENS             tokens per GPU per forward pass (default 8192; lower it if the
#                          GPU runs out of memory: --update-freq grows to match)
#   TOKENS_PER_UPDATE      target batch (default 128000)
#   PRECISION              fp16 (default; needs CUDA), bf16 or fp32. bf16: fairseq main
#                          (the pinned ve-fairseq build included) turns --bf16 into
#                          --tpu, which needs torch_xla; bf16 on GPUs needs a fairseq
#                          that supports it
#   MAX_UPDATE             default 300000
#   SAVE_INTERVAL_UPDATES  default 2000 (checkpoint + validation)
#   KEEP_INTERVAL_UPDATES  default 5
#   SEED                   default 1
#   SRC, TGT               translation direction, e.g. SRC=de TGT=en on EN-DE data (both
#                          or neither; unset: fairseq infers it from the file names)
#   AVERAGE                1 (default): run cmlm-average-checkpoints at the end; 0: don't
#   USER_DIR               the plugin folder (default: $(cmlm-plugin-dir))
#   TRAIN_FLAGS            extra fairseq-train flags, added last (e.g. "--num-workers 4",
#                          multi-node flags, --wandb-project NAME)
set -euo pipefail

usage="usage: bash examples/translation/train-paper.sh DATA_DIR SAVE_DIR"
DATA=${1:?$usage}
SAVE=${2:?$usage}
if [ -d "$DATA/bin" ]; then BIN=$DATA/bin; else BIN=$DATA; fi
compgen -G "$BIN/dict.*.txt" > /dev/null || { echo "error: no fairseq dictionary in $BIN (run a prepare-*.sh script first)" >&2; exit 1; }

ARCH=${ARCH:-cmlm_plugin_base}
NUM_GPUS=${NUM_GPUS:-$(python -c 'import torch; print(max(1, torch.cuda.device_count()))')}
MAX_TOKENS=${MAX_TOKENS:-8192}
TOKENS_PER_UPDATE=${TOKENS_PER_UPDATE:-128000}
PRECISION=${PRECISION:-fp16}
MAX_UPDATE=${MAX_UPDATE:-300000}
SAVE_INTERVAL_UPDATES=${SAVE_INTERVAL_UPDATES:-2000}
KEEP_INTERVAL_UPDATES=${KEEP_INTERVAL_UPDATES:-5}
SEED=${SEED:-1}
AVERAGE=${AVERAGE:-1}
USER_DIR=${USER_DIR:-$(cmlm-plugin-dir)}
TRAIN_FLAGS=${TRAIN_FLAGS:-}

case $PRECISION in
  fp16) precision_flags=(--fp16) ;;
  bf16) precision_flags=(--bf16)
        echo "warning: fairseq main turns --bf16 into --tpu (needs torch_xla); on GPUs use a fairseq that supports bf16, or PRECISION=fp16" >&2 ;;
  fp32) precision_flags=() ;;
  *) echo "error: PRECISION must be fp16, bf16 or fp32, got '$PRECISION'" >&2; exit 1 ;;
esac

lang_flags=()
if [ -n "${SRC:-}" ] || [ -n "${TGT:-}" ]; then
  if [ -z "${SRC:-}" ] || [ -z "${TGT:-}" ]; then
    echo "error: set both SRC and TGT, or neither" >&2
    exit 1
  fi
  lang_flags=(--source-lang "$SRC" --target-lang "$TGT")
fi

if [ "$AVERAGE" = 1 ] && ! command -v cmlm-average-checkpoints > /dev/null; then
  echo "error: cmlm-average-checkpoints not found (pip install -e . in the plugin's checkout), or run with AVERAGE=0" >&2
  exit 1
fi

per_pass=$(( NUM_GPUS * MAX_TOKENS ))
UPDATE_FREQ=$(( (TOKENS_PER_UPDATE + per_pass - 1) / per_pass ))
echo "$NUM_GPUS GPU(s) x $MAX_TOKENS tokens x --update-freq $UPDATE_FREQ = up to $(( per_pass * UPDATE_FREQ )) tokens per update (target $TOKENS_PER_UPDATE)"
echo "data $BIN, arch $ARCH, precision $PRECISION, $MAX_UPDATE updates, checkpoints in $SAVE"
mkdir -p "$SAVE"

# shellcheck disable=SC2086  # TRAIN_FLAGS is split into flags on purpose
fairseq-train "$BIN" --user-dir "$USER_DIR" --task cmlm --arch "$ARCH" \
  ${lang_flags[@]+"${lang_flags[@]}"} \
  --criterion cmlm_plugin_loss --label-smoothing 0.1 --length-loss-factor 1.0 \
  --optimizer adam --adam-betas '(0.9, 0.999)' --adam-eps 1e-6 --clip-norm 25 \
  --lr 5e-4 --lr-scheduler inverse_sqrt --warmup-updates 10000 --warmup-init-lr 1e-7 \
  --dropout 0.3 --weight-decay 0.01 \
  --max-tokens "$MAX_TOKENS" --update-freq "$UPDATE_FREQ" --max-update "$MAX_UPDATE" \
  --distributed-world-size "$NUM_GPUS" \
  --save-dir "$SAVE" --save-interval-updates "$SAVE_INTERVAL_UPDATES" \
  --validate-interval-updates "$SAVE_INTERVAL_UPDATES" --save-interval 1000000 --validate-interval 1000000 \
  --keep-interval-updates "$KEEP_INTERVAL_UPDATES" --no-epoch-checkpoints \
  --keep-best-checkpoints 5 --best-checkpoint-metric loss \
  --skip-invalid-size-inputs-valid-test --log-format simple --log-interval 100 --seed "$SEED" \
  ${precision_flags[@]+"${precision_flags[@]}"} $TRAIN_FLAGS

if [ "$AVERAGE" = 1 ]; then
  cmlm-average-checkpoints --inputs "$SAVE" --num-best 5 --output "$SAVE/checkpoint.avg5.pt"
  echo "averaged checkpoint: $SAVE/checkpoint.avg5.pt"
fi
