#!/usr/bin/env bash
# Sequence-level knowledge distillation (Kim & Rush, 2016), as the Mask-Predict paper
# trains on: an autoregressive teacher translates the training set with beam search and
# its outputs replace the training targets. Valid and test sets stay the originals.
#
#   bash examples/translation/distill.sh DATA_DIR TEACHER_CKPT [OUT_DIR]
#
# DATA_DIR is a prepare-*.sh output (DATA_DIR/bin with the joined dictionary);
# TEACHER_CKPT a fairseq `transformer` checkpoint trained on it (e.g. by
# train-multi30k-ar.sh or fairseq's own recipes), or several joined by ':' (fairseq's
# --path syntax): an ensemble, whose averaged probabilities make a stronger teacher than
# any of its members (the Mask-Predict paper distils WMT'14 EN-DE with a transformer large
# for base students; an ensemble of same-size models is the cheaper way to a stronger
# teacher; costs one beam search per member). OUT_DIR (default DATA_DIR-distill)
# gets OUT_DIR/text/train.{src,tgt} (sentencepiece pieces) and OUT_DIR/bin, binarized
# with the same dictionary; the valid/test files of DATA_DIR/bin are linked in.
# BEAM (default 5, the paper's teacher beam is 4-5), LENPEN (default 1, fairseq's
# --lenpen: above 1 favours longer translations), MAX_TOKENS (default 8192) and
# DEVICE_FLAGS (default --cpu; set it to "" on a GPU, add --fp16 there) tune decoding.
# INTERPOLATE=1 keeps, of the teacher's BEAM best hypotheses, the one closest to the
# original target by sentence-level BLEU (sacreBLEU, exponential smoothing) instead of the
# top one: Kim & Rush's sequence-level interpolation (2016, §3.2; they score with smoothed
# BLEU as well). Default 0: the top hypothesis, as the Mask-Predict paper distils.
# At the end it compares the distilled targets with the original ones (lengths in
# pieces, immediate repeats) and warns when they are more than 3 % shorter: a student
# learns its target lengths from them, so short teacher outputs become short student
# outputs (docs/reproducing.md, the Multi30k quality study).
# Downloads nothing. Time: one beam-search pass over the training set (Multi30k's 29k
# sentences: minutes on a CPU; WMT'14 EN-DE's 4.5M: hours on one GPU).
set -euo pipefail
DATA=${1:?usage: distill.sh DATA_DIR TEACHER_CKPT [OUT_DIR]}
TEACHER=${2:?usage: distill.sh DATA_DIR TEACHER_CKPT [OUT_DIR]}
OUT=${3:-${DATA%/}-distill}
BEAM=${BEAM:-5}
LENPEN=${LENPEN:-1}
MAX_TOKENS=${MAX_TOKENS:-8192}
INTERPOLATE=${INTERPOLATE:-0}
DEVICE_FLAGS=${DEVICE_FLAGS---cpu}
USER_DIR=${USER_DIR:-$(cmlm-plugin-dir)}
[[ $BEAM =~ ^[1-9][0-9]*$ ]] || { echo "error: BEAM must be a positive integer, got '$BEAM'" >&2; exit 1; }
case $INTERPOLATE in
  0) NBEST=1 ;;
  1) NBEST=$BEAM ;;
  *) echo "error: INTERPOLATE must be 0 (the teacher's top hypothesis) or 1 (of its BEAM best, the closest to the original target by sentence BLEU), got '$INTERPOLATE'" >&2; exit 1 ;;
esac
[[ ! $TEACHER =~ (^|:)(:|$) ]] || {
  echo "error: TEACHER_CKPT '$TEACHER' has an empty member: join the checkpoints with single ':'" >&2
  exit 1
}
IFS=: read -r -a MEMBERS <<< "$TEACHER"
for member in "${MEMBERS[@]}"; do
  [ -f "$member" ] || { echo "error: teacher checkpoint $member not found" >&2; exit 1; }
done
[ -f "$DATA/bin/preprocess.log" ] || { echo "error: $DATA/bin/preprocess.log not found: run a prepare-*.sh first" >&2; exit 1; }
# the language pair, from fairseq-preprocess's log unless SRC/TGT are set
SRC=${SRC:-$(sed -n "s/.*source_lang[=': ]*\([a-z_]*\).*/\1/p" "$DATA/bin/preprocess.log" | head -n 1)}
TGT=${TGT:-$(sed -n "s/.*target_lang[=': ]*\([a-z_]*\).*/\1/p" "$DATA/bin/preprocess.log" | head -n 1)}
echo "language pair: $SRC-$TGT"
mkdir -p "$OUT/text" "$OUT/bin"

ENSEMBLE=$([ "${#MEMBERS[@]}" = 1 ] || echo "an ensemble of ${#MEMBERS[@]} teachers, ")
echo "translating the training set with $ENSEMBLE$TEACHER (beam $BEAM$([ "$NBEST" = 1 ] || echo ", keeping of the $NBEST best the closest to the original target"))"
# --user-dir only for the weights-only allow-list of fairseq's own checkpoints
fairseq-generate "$DATA/bin" --user-dir "$USER_DIR" --task translation --path "$TEACHER" \
  --gen-subset train --source-lang "$SRC" --target-lang "$TGT" --beam "$BEAM" --nbest "$NBEST" --lenpen "$LENPEN" \
  --max-tokens "$MAX_TOKENS" --required-batch-size-multiple 1 $DEVICE_FLAGS \
  > "$OUT/text/generate-train.txt"

# S-<id>, T-<id> and H-<id> lines (NBEST H lines per id, best first); no --remove-bpe, so
# the pieces match the dictionary
python - "$OUT/text" "$SRC" "$TGT" <<'PY'
import sys
from sacrebleu.metrics import BLEU
out, src, tgt = sys.argv[1:]
sources, nbest, originals = {}, {}, {}
for line in open(f"{out}/generate-train.txt", encoding="utf-8"):
    tag, _, rest = line.rstrip("\n").partition("\t")
    if tag.startswith("S-"):
        sources[int(tag[2:])] = rest
    elif tag.startswith("T-"):
        originals[int(tag[2:])] = rest
    elif tag.startswith("H-"):
        nbest.setdefault(int(tag[2:]), []).append(rest.split("\t", 1)[1])
def text(pieces):
    """plain text of a hypothesis: sentencepiece pieces joined, subword-nmt's @@ removed"""
    if "\u2581" in pieces:
        return "".join(pieces.split()).replace("\u2581", " ").strip()
    return pieces.replace("@@ ", "").strip()
bleu = BLEU(effective_order=True)
def closest(i):
    """of sentence i's hypotheses, the one with the highest sentence BLEU to the original"""
    hypotheses = nbest[i]
    if len(hypotheses) == 1:
        return hypotheses[0]
    reference = [text(originals[i])]
    return max(hypotheses, key=lambda h: bleu.sentence_score(text(h), reference).score)
hypos = {i: closest(i) for i in nbest}
changed = sum(hypos[i] != nbest[i][0] for i in nbest)
if any(len(h) > 1 for h in nbest.values()):
    print(f"sequence-level interpolation: {changed} of {len(nbest)} targets are not the top hypothesis")
ids = sorted(i for i in hypos if hypos[i].strip())
if not ids:
    sys.exit("error: the teacher produced no translations (see generate-train.txt)")
with open(f"{out}/train.{src}", "w", encoding="utf-8") as fs, open(f"{out}/train.{tgt}", "w", encoding="utf-8") as ft:
    for i in ids:
        fs.write(sources[i] + "\n")
        ft.write(hypos[i] + "\n")
print(f"{len(ids)} distilled pairs ({len(sources) - len(ids)} empty translations dropped)")
def pieces(texts):
    return sum(len(t.split()) for t in texts)
def repeats(texts):
    pairs = [(a, b) for t in texts for a, b in zip(t.split(), t.split()[1:])]
    return 100 * sum(a == b for a, b in pairs) / max(len(pairs), 1)
new, old = [hypos[i] for i in ids], [originals.get(i, "") for i in ids]
ratio = pieces(new) / max(pieces(old), 1)
print(f"distilled/original target length: {ratio:.4f} ({pieces(new) / len(ids):.2f} against "
      f"{pieces(old) / len(ids):.2f} pieces per sentence); immediate repeats: "
      f"{repeats(new):.2f} % of piece pairs against {repeats(old):.2f} %")
if ratio < 0.97:
    print(f"warning: the teacher's targets are {100 * (1 - ratio):.1f} % shorter than the "
          "originals; a student trained on them learns to write short outputs (raise LENPEN, "
          "or a teacher trained longer)")
PY

fairseq-preprocess --source-lang "$SRC" --target-lang "$TGT" --trainpref "$OUT/text/train" \
  --srcdict "$DATA/bin/dict.$SRC.txt" --joined-dictionary --destdir "$OUT/bin" --workers 2
for f in "$DATA"/bin/valid.* "$DATA"/bin/test.*; do
  ln -sf "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$OUT/bin/"
done
echo "distilled data in $OUT/bin"
