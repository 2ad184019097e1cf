#!/usr/bin/env bash
# WMT'16 English-Romanian, as in the Mask-Predict paper -> joint sentencepiece -> fairseq
# binary data.
#
#   bash examples/translation/prepare-wmt16-en-ro.sh [OUT_DIR]     (default: work/wmt16-en-ro)
#
# Data:
#   train  Europarl v8 (ro-en) + SETIMES2 (en-ro), about 610k pairs
#            data.statmt.org/wmt16/translation-task/training-parallel-ep-v8.tgz
#            object.pouta.csc.fi/OPUS-SETIMES/v2/moses/en-ro.txt.zip (OPUS)
#   valid  newsdev2016 (en-ro), from data.statmt.org/wmt16/translation-task/dev.tgz
#   test   newstest2016 (en-ro), from data.statmt.org/wmt16/translation-task/test.tgz;
#          test1 is the ro-en release of newstest2016 (src ro, ref en), for RO->EN
# A few hundred MB to download (estimate). Disk: about 2 GB free (estimate). Time, on a
# CPU with 8 cores (estimate, not measured): 10-20 minutes after the download.
# Needs curl, GNU tar and coreutils (split -n), python with sentencepiece, fairseq-preprocess.
#
# Steps: those of prepare-wmt14-en-de.sh (extract with GNU tar and Python's zipfile,
# clean lines, one joint sentencepiece model, encode, keep training pairs of 1..MAX_LEN
# pieces per side with a piece-count ratio <= RATIO, fairseq-preprocess
# --joined-dictionary), plus the optional Romanian normalisation below.
#
# Outputs: OUT_DIR/bin (train, valid, test, test1), OUT_DIR/spm/spm.model,
# OUT_DIR/raw/{valid,test,test1}.{en,ro} (cleaned references for sacreBLEU; normalised
# like the training data when RO_NORMALIZE is set), OUT_DIR/orig (archives, extracted
# files). RO->EN: train from the same bin with SRC=ro TGT=en (train-paper.sh) and
# decode --gen-subset test1.
#
# Romanian normalisation (RO_NORMALIZE, Romanian side of every split):
#   0      (default) the text as distributed
#   comma  s/t with cedilla (U+015E/F, U+0162/3) become s/t with comma below
#          (U+0218/9, U+021A/B), the spelling the two encodings share
#   1      comma, then remove every diacritic (ș ț ă â î -> s t a a i, capitals alike):
#          what Sennrich et al.'s WMT16 system did (wmt16-scripts normalise-romanian.py
#          and remove-diacritics.py); reimplemented in wmt_tools.py
# The paper (Ghazvininejad et al. 2019) used the preprocessed EN-RO data of Lee et al.
# (2018) with joint BPE; whether that data kept the diacritics is not stated in the
# Mask-Predict paper, so no setting here is known to match it. With RO_NORMALIZE=1 the
# references are normalised too: scores are then against diacritic-free references
# and are not comparable with scores against the official newstest2016.
#
# How this differs from the paper: no Moses tokenisation; sentencepiece (BPE by
# default) on raw text instead of subword-nmt BPE, so tokenized BLEU is not strictly
# comparable (see prepare-wmt14-en-de.sh).
#
# Environment:
#   WMT16_DIR    a folder that already holds training-parallel-ep-v8.tgz, en-ro.txt.zip
#                (or SETIMES2.en-ro.txt.zip / SETIMES2.ro-en.txt.zip), dev.tgz and
#                test.tgz: nothing is downloaded. Unset: download into OUT_DIR/orig.
#   RO_NORMALIZE 0 (default), comma or 1, see above
#   SPM_VOCAB    sentencepiece vocabulary size (default 32000)
#   SPM_TYPE     bpe (default) or unigram
#   SPM_SAMPLE   training lines per language fed to sentencepiece (default 1000000,
#                i.e. all of this corpus)
#   MAX_LEN      longest training side kept, in pieces (default 250)
#   RATIO        largest piece-count ratio between the sides (default 1.5)
#   WORKERS      parallel encoders and fairseq-preprocess workers (default: nproc)
set -euo pipefail

OUT=${1:-work/wmt16-en-ro}
SRC=en
TGT=ro
RO_NORMALIZE=${RO_NORMALIZE:-0}
case $RO_NORMALIZE in
  0|comma|1) ;;
  *) echo "error: RO_NORMALIZE must be 0, comma or 1, got '$RO_NORMALIZE'" >&2; exit 1 ;;
esac
HERE=$(cd "$(dirname "$0")" && pwd)
# settings, folders, fetch (archives from WMT16_DIR), find_one, tools, sgm_text, spm_binarize
# shellcheck source=wmt-common.sh source-path=SCRIPTDIR disable=SC1091  # followed with -x
. "$HERE/wmt-common.sh" WMT16_DIR
mkdir -p "$ORIG" "$X" "$RAW" "$SPM"

wmt16=https://data.statmt.org/wmt16/translation-task
ep=$(fetch $wmt16/training-parallel-ep-v8.tgz training-parallel-ep-v8.tgz)
setimes=$(fetch https://object.pouta.csc.fi/OPUS-SETIMES/v2/moses/en-ro.txt.zip en-ro.txt.zip \
  SETIMES2.en-ro.txt.zip SETIMES2.ro-en.txt.zip)
dev=$(fetch $wmt16/dev.tgz dev.tgz)
test=$(fetch $wmt16/test.tgz test.tgz)

echo "extracting into $X"
tar -xzf "$ep" -C "$X" --wildcards '*europarl-v8.ro-en.en' '*europarl-v8.ro-en.ro'
tools unzip "$setimes" "$X" '*.en-ro.en' '*.en-ro.ro'
tar -xzf "$dev" -C "$X" --wildcards '*newsdev2016-enro-src.en.sgm' '*newsdev2016-enro-ref.ro.sgm'
tar -xzf "$test" -C "$X" --wildcards '*newstest2016-enro-src.en.sgm' '*newstest2016-enro-ref.ro.sgm' \
  '*newstest2016-roen-src.ro.sgm' '*newstest2016-roen-ref.en.sgm'

ep_en=$(find_one europarl-v8.ro-en.en)
se_en=$(find_one 'SETIMES*.en-ro.en')
echo "Romanian normalisation: RO_NORMALIZE=$RO_NORMALIZE"
tools pairs "$SRC" "$TGT" "$RAW/train" "${ep_en%.en}" "${se_en%.en}"
sgm_text valid.en:newsdev2016-enro-src.en.sgm valid.ro:newsdev2016-enro-ref.ro.sgm \
  test.en:newstest2016-enro-src.en.sgm test.ro:newstest2016-enro-ref.ro.sgm \
  test1.en:newstest2016-roen-ref.en.sgm test1.ro:newstest2016-roen-src.ro.sgm
[ "$RO_NORMALIZE" = 0 ] || tools ro-normalize "$RO_NORMALIZE" "$RAW"/{train,valid,test,test1}.ro
wc -l "$RAW"/*."$SRC"

spm_binarize valid test test1
echo "binarized data in $OUT/bin (sentencepiece model: $SPM/spm.model; references: $RAW/test.$TGT, $RAW/test1.$SRC)"
echo "the archives and extracted files in $ORIG are no longer needed"
