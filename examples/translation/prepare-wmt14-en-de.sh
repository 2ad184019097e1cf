#!/usr/bin/env bash
# WMT'14 English-German, the Mask-Predict paper's main benchmark -> joint sentencepiece
# -> fairseq binary data.
#
#   bash examples/translation/prepare-wmt14-en-de.sh [OUT_DIR]     (default: work/wmt14-en-de)
#
# Data (the corpora of fairseq's examples/translation/prepare-wmt14en2de.sh, the usual
# rebuild of the Vaswani et al. data that the paper used):
#   train  Europarl v7 + Common Crawl + News Commentary v12 (de-en), about 4.5M pairs
#            statmt.org/wmt13/training-parallel-europarl-v7.tgz     (~0.6 GB)
#            statmt.org/wmt13/training-parallel-commoncrawl.tgz     (~0.9 GB)
#            data.statmt.org/wmt17/translation-task/training-parallel-nc-v12.tgz (~0.2 GB)
#   valid  newstest2013 (3000 sentences), from statmt.org/wmt13/test.tgz
#   test   newstest2014, the "full" version (3003 sentences), statmt.org/wmt14/test-full.tgz
# About 1.7 GB to download (archive sizes are approximate). Disk: about 10 GB free for
# archives, extracted text, pieces and binaries (estimate). Time, on a CPU with 8 cores
# (estimate, not measured): 15-30 min to download at ordinary speeds, 20-40 min for
# sentencepiece, 20-40 min to encode and binarize.
# Needs curl, GNU tar and coreutils (split -n), python with sentencepiece, fairseq-preprocess.
#
# Steps: extract the needed files (GNU tar), clean each line (control characters,
# zero-width marks and runs of whitespace become one space; pairs with an empty side are
# dropped), learn one joint sentencepiece model on a sample of the training text,
# encode everything, drop training pairs whose sides are longer than MAX_LEN pieces or
# whose piece counts differ by more than RATIO (fairseq's script: Moses
# clean-corpus-n.perl -ratio 1.5 ... 1 250 on BPE tokens; the same rule here on pieces),
# binarize with fairseq-preprocess --joined-dictionary. The task `cmlm` adds <mask>.
#
# Outputs: OUT_DIR/bin (fairseq data: train, valid, test), OUT_DIR/spm/spm.model,
# OUT_DIR/raw/{valid,test}.{en,de} (the cleaned references, for sacreBLEU), OUT_DIR/orig
# (archives and extracted files; delete it when done). Train DE->EN from the same bin
# with --source-lang de --target-lang en (SRC=de TGT=en for train-paper.sh).
#
# How this differs from the paper (so tokenized BLEU is not strictly comparable):
# the paper used the data of Vaswani et al. (2017): Moses tokenisation, then joint BPE
# (a shared vocabulary of about 37000 tokens there; fairseq's script adds Moses
# punctuation normalisation and learns 40000 subword-nmt merges). Here there is no Moses step: sentencepiece (BPE by default, SPM_VOCAB
# pieces, NFKC normalisation) runs on the raw text, so outputs are detokenized text;
# sacreBLEU on them is the clean comparison. For a "tokenized BLEU" like the paper's,
# Moses-tokenize hypotheses and references the same way before scoring, and expect
# small differences from the different segmentation and filtering. fairseq's own
# script validates on 1% of the training pairs instead; this one uses newstest2013,
# as Vaswani et al. do.
#
# Environment:
#   WMT14_DIR    a folder that already holds the five archives, under the names above
#                (newstest2013's archive as test.tgz or wmt13-test.tgz): nothing is
#                downloaded. Unset: download into OUT_DIR/orig (existing files are reused).
#   SPM_VOCAB    sentencepiece vocabulary size (default 32000)
#   SPM_TYPE     bpe (default, closest to the paper) or unigram
#   SPM_SAMPLE   training lines per language fed to sentencepiece (default 1000000,
#                every k-th line of the cleaned corpus; sentencepiece_bpe.py keeps
#                character_coverage 1.0, so a larger sample admits more rare characters)
#   MAX_LEN      longest training side kept, in pieces (default 250)
#   RATIO        largest piece-count ratio between the sides (default 1.5)
#   WORKERS      parallel encoders and fairseq-preprocess workers (default: nproc)
set -euo pipefail

OUT=${1:-work/wmt14-en-de}
SRC=en
TGT=de
HERE=$(cd "$(dirname "$0")" && pwd)
# settings, folders, fetch (archives from WMT14_DIR), find_one, tools, sgm_text, spm_binarize
# shellcheck source=wmt-common.sh source-path=SCRIPTDIR disable=SC1091  # followed with -x
. "$HERE/wmt-common.sh" WMT14_DIR
mkdir -p "$ORIG" "$X" "$RAW" "$SPM"

base=https://statmt.org
ep=$(fetch $base/wmt13/training-parallel-europarl-v7.tgz training-parallel-europarl-v7.tgz)
cc=$(fetch $base/wmt13/training-parallel-commoncrawl.tgz training-parallel-commoncrawl.tgz)
nc=$(fetch https://data.statmt.org/wmt17/translation-task/training-parallel-nc-v12.tgz training-parallel-nc-v12.tgz)
dev=$(fetch $base/wmt13/test.tgz wmt13-test.tgz test.tgz)
test=$(fetch $base/wmt14/test-full.tgz test-full.tgz)

echo "extracting into $X"
tar -xzf "$ep" -C "$X" --wildcards '*europarl-v7.de-en.*'
tar -xzf "$cc" -C "$X" --wildcards '*commoncrawl.de-en.*'
tar -xzf "$nc" -C "$X" --wildcards '*news-commentary-v12.de-en.*'
tar -xzf "$dev" -C "$X" --wildcards '*newstest2013-src.en.sgm' '*newstest2013-src.de.sgm'
tar -xzf "$test" -C "$X" --wildcards '*newstest2014-deen-src.en.sgm' '*newstest2014-deen-ref.de.sgm'

corpora=()
for name in europarl-v7.de-en commoncrawl.de-en news-commentary-v12.de-en; do
  f=$(find_one "$name.$SRC")
  corpora+=("${f%."$SRC"}")
done
tools pairs "$SRC" "$TGT" "$RAW/train" "${corpora[@]}"
sgm_text valid.en:newstest2013-src.en.sgm valid.de:newstest2013-src.de.sgm \
  test.en:newstest2014-deen-src.en.sgm test.de:newstest2014-deen-ref.de.sgm
wc -l "$RAW"/*."$SRC"

spm_binarize valid test
echo "binarized data in $OUT/bin (sentencepiece model: $SPM/spm.model; references: $RAW/test.$TGT)"
echo "the archives and extracted files in $ORIG are no longer needed"
