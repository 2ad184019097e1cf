# shellcheck shell=bash
# What the resumable recipes (quickstart.sh, train-multi30k-ar.sh, train-multi30k-best.sh)
# share, as bash functions. fairseq-train resumed from a checkpoint that already holds
# --max-update updates takes one more update before it checks the bound (and overwrites
# checkpoint_last.pt with it), so a finished step has to be recognised before it starts.
# A recipe sets HERE (this folder) and sources this file; sourcing only defines functions.

# checkpoint_updates CKPT: the number of updates CKPT holds, 0 when there is no such file;
# fails (after fairseq's own message) when the file does not load
checkpoint_updates() {
  [ -f "$1" ] || { echo 0; return 0; }
  python - "$1" << 'EOF'
import sys

import cmlm_plugin  # noqa: F401  (allow-lists fairseq checkpoints for weights-only loading)
from fairseq import checkpoint_utils

state = checkpoint_utils.load_checkpoint_to_cpu(sys.argv[1])
print(state["optimizer_history"][-1]["num_updates"])
EOF
}

# checkpoint_ctc_upsample CKPT: the --ctc-upsample CKPT's model was trained with (0: a
# CMLM), empty when there is no such file
checkpoint_ctc_upsample() {
  [ -f "$1" ] || return 0
  python - "$1" << 'EOF'
import sys

import cmlm_plugin  # noqa: F401
from fairseq import checkpoint_utils

state = checkpoint_utils.load_checkpoint_to_cpu(sys.argv[1])
print(getattr(state["cfg"]["model"], "ctc_upsample", 0) or 0)
EOF
}

# resume_point CKPT MAX_UPDATE: where a training into CKPT's folder stands. Sets DONE (the
# updates CKPT holds, 0 without the file) and STOP: empty while DONE < MAX_UPDATE, else
# the fairseq-train flag that stops it before its first update (a minimum learning rate
# above any reachable one) and a "decoding only" line on stdout. A recipe passes $STOP to
# fairseq-train. Returns 1 with a one-line error when CKPT does not load.
resume_point() {
  DONE=$(checkpoint_updates "$1") \
    || { echo "error: $1 does not load (see above): delete it to train from scratch" >&2; return 1; }
  STOP=""
  if [ "$DONE" -ge "$2" ]; then
    echo "training: $1 already holds $DONE updates (MAX_UPDATE=$2): decoding only"
    STOP="--stop-min-lr 1e9"
  fi
}
