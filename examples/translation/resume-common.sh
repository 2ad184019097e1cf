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
