#!/usr/bin/env bash
# WMT'17 English-Chinese, as in the Mask-Predict paper -> joint sentencepiece (character
# coverage 0.9995) -> fairseq binary data.
#
#   ZH_CORPORA_DIR=DIR bash examples/translation/prepare-wmt17-en-zh.sh [OUT_DIR]
#                                                         (default OUT_DIR: work/wmt17-en-zh)
#
# The paper trained on about 20M sentence pairs (the WMT'17 constrained EN-ZH data as
# preprocessed by Wu et al. 2019): News Commentary v12 + the UN Parallel Corpus v1.0 +
# the CWMT corpora. Only News Commentary can be downloaded by a script:
#   downloaded (or read from WMT17_DIR)
#     train  News Commentary v12 zh-en, about 0.23M pairs,
#            data.statmt.org/wmt17/translation-task/training-parallel-nc-v12.tgz (~0.2 GB)
#     valid  newsdev2017 (en-zh), from data.statmt.org/wmt17/translation-task/dev.tgz
#     test   newstest2017 (en-zh), from data.statmt.org/wmt17/translation-task/test.tgz;
#            test1 is the zh-en release of newstest2017 (src zh, ref en), for ZH->EN
#   fetched by you, put in ZH_CORPORA_DIR as plain UTF-8 text pairs NAME.en + NAME.zh
#     UN Parallel Corpus v1.0, en-zh (Ziemski et al. 2016): about 15.9M pairs; the
#       official download (conferences.unite.un.org/UNCorpus at the time of WMT'17, later
#       the UN's own site) asked for a registration; OPUS also distributes it as UNPC.
#       Its files UNv1.0.en-zh.en / UNv1.0.en-zh.zh already have the right names.
#     CWMT (the subsets the WMT'17 task page lists, e.g. casia2015, casict2015,
#       datum2015, datum2017, neu2017; several million pairs): registration at
#       nlp.nju.edu.cn/cwmt-wmt. Their files are named like
#       casia2015_en.txt / casia2015_ch.txt: link them, e.g.
#       ln -s /data/cwmt/casia2015/casia2015_en.txt DIR/casia2015.en
#       ln -s /data/cwmt/casia2015/casia2015_ch.txt DIR/casia2015.zh
#       Convert any file that is not UTF-8 first (iconv -f GB18030 -t UTF-8).
#   Every NAME.en with a NAME.zh beside it in ZH_CORPORA_DIR is added to News
#   Commentary. ZH_CORPORA_DIR=none trains on News Commentary alone (a small
#   sanity-check setup, not the paper's).
# Disk: about 40 GB free with the UN and CWMT corpora (estimate: ~8 GB of text, copied
# when cleaned, encoded and binarized). Time, on a CPU with 8 cores (estimate, not
# measured): a few hours, mostly encoding 20M+ pairs.
# Needs curl, GNU tar and coreutils (split -n), python with sentencepiece, fairseq-preprocess.
#
# Steps: those of prepare-wmt14-en-de.sh (clean lines, one joint sentencepiece model on
# a sample, encode, keep training pairs of 1..MAX_LEN pieces per side with a piece-count
# ratio <= RATIO, fairseq-preprocess --joined-dictionary). The ratio 1.5 comes from
# fairseq's EN-DE script and is not tuned for EN-ZH piece counts: the script prints how
# many pairs each step keeps; raise RATIO if too many are dropped. No deduplication.
#
# Sentencepiece: sentencepiece_bpe.py fixes character_coverage to 1.0, so the model is
# trained here by calling sentencepiece directly (same special-symbol settings as
# sentencepiece_bpe.py, <mask> kept whole) with character_coverage SPM_COVERAGE (0.9995:
# the rarest 0.05% of characters, mostly rare Hanzi, become <unk> instead of taking
# vocabulary slots) and normalization "identity": NFKC would turn the full-width
# punctuation of the Chinese references (，：？（）) into ASCII and cost BLEU against
# the official references. Encoding still uses sentencepiece_bpe.py.
#
# How this differs from the paper: different training-data selection (whatever you put
# in ZH_CORPORA_DIR), no Moses/Jieba tokenisation, a joint sentencepiece vocabulary
# instead of the paper's BPE. EN->ZH BLEU is sacreBLEU with its Chinese tokenizer, as in
# the paper: score the detokenized outputs against OUT_DIR/raw/test.zh with
#   sacrebleu OUT_DIR/raw/test.zh --tokenize zh < hyps.txt
# (or fairseq-generate ... --scoring sacrebleu --sacrebleu-tokenizer zh, which scores
# against the references rebuilt from the binarized pieces, <unk> included).
#
# Outputs: OUT_DIR/bin (train, valid, test, test1), OUT_DIR/spm/spm.model,
# OUT_DIR/raw/{valid,test,test1}.{en,zh} (cleaned references), OUT_DIR/orig. ZH->EN:
# SRC=zh TGT=en for train-paper.sh, decode --gen-subset test1.
#
# Environment:
#   ZH_CORPORA_DIR  folder of NAME.en / NAME.zh pairs (UN, CWMT), or "none"; required
#   WMT17_DIR       a folder that already holds training-parallel-nc-v12.tgz, dev.tgz and
#                   test.tgz of WMT'17: nothing is downloaded. Unset: download into
#                   OUT_DIR/orig.
#   SPM_VOCAB       sentencepiece vocabulary size (default 32000)
#   SPM_TYPE        bpe (default) or unigram
#   SPM_COVERAGE    sentencepiece character_coverage (default 0.9995)
#   SPM_SAMPLE      training lines per language fed to sentencepiece (default 1000000)
#   MAX_LEN         longest training side kept, in pieces (default 250)
#   RATIO           largest piece-count ratio between the sides (default 1.5)
#   WORKERS         parallel encoders, sentencepiece threads and fairseq-preprocess
#                   workers (default: nproc)
set -euo pipefail

OUT=${1:-work/wmt17-en-zh}
SRC=en
TGT=zh
SPM_COVERAGE=${SPM_COVERAGE:-0.9995}
CORPORA=${ZH_CORPORA_DIR:-}
HERE=$(cd "$(dirname "$0")" && pwd)
# settings, folders, fetch (archives from WMT17_DIR), find_one, tools, sgm_text, spm_binarize
# shellcheck source=wmt-common.sh source-path=SCRIPTDIR disable=SC1091  # followed with -x
. "$HERE/wmt-common.sh" WMT17_DIR

# This recipe's sentencepiece model (see the header): character coverage SPM_COVERAGE and
# normalisation "identity", where wmt-common.sh's spm_train keeps 1.0 and NFKC.
spm_train() {
  tools spm-train --model-prefix "$1" --input "${@:2}" --vocab-size "$SPM_VOCAB" \
    --model-type "$SPM_TYPE" --character-coverage "$SPM_COVERAGE" --normalization identity \
    --threads "$WORKERS"
}
spm_about+=", coverage $SPM_COVERAGE"

extra=()
if [ -z "$CORPORA" ]; then
  echo "error: set ZH_CORPORA_DIR to a folder of NAME.en / NAME.zh pairs (the UN and CWMT" >&2
  echo "corpora, see this script's header), or ZH_CORPORA_DIR=none for News Commentary alone" >&2
  exit 1
elif [ "$CORPORA" = none ]; then
  echo "warning: ZH_CORPORA_DIR=none: News Commentary v12 only (~0.23M pairs), not the paper's ~20M" >&2
else
  [ -d "$CORPORA" ] || { echo "error: ZH_CORPORA_DIR=$CORPORA is not a folder" >&2; exit 1; }
  for f in "$CORPORA"/*."$SRC"; do
    [ -e "$f" ] || continue
    if [ -f "${f%."$SRC"}.$TGT" ]; then
      extra+=("${f%."$SRC"}")
    else
      echo "warning: $f has no ${f%."$SRC"}.$TGT beside it; skipped" >&2
    fi
  done
  [ "${#extra[@]}" -gt 0 ] || { echo "error: no NAME.$SRC / NAME.$TGT pair in $CORPORA" >&2; exit 1; }
  echo "extra corpora: ${extra[*]}"
fi
mkdir -p "$ORIG" "$X" "$RAW" "$SPM"

wmt17=https://data.statmt.org/wmt17/translation-task
nc=$(fetch $wmt17/training-parallel-nc-v12.tgz training-parallel-nc-v12.tgz)
dev=$(fetch $wmt17/dev.tgz dev.tgz)
test=$(fetch $wmt17/test.tgz test.tgz)

echo "extracting into $X"
tar -xzf "$nc" -C "$X" --wildcards '*news-commentary-v12.zh-en.en' '*news-commentary-v12.zh-en.zh'
tar -xzf "$dev" -C "$X" --wildcards '*newsdev2017-enzh-src.en.sgm' '*newsdev2017-enzh-ref.zh.sgm'
tar -xzf "$test" -C "$X" --wildcards '*newstest2017-enzh-src.en.sgm' '*newstest2017-enzh-ref.zh.sgm' \
  '*newstest2017-zhen-src.zh.sgm' '*newstest2017-zhen-ref.en.sgm'

nc_en=$(find_one news-commentary-v12.zh-en.en)
tools pairs --per-corpus "$SRC" "$TGT" "$RAW/train" "${nc_en%.en}" ${extra[@]+"${extra[@]}"}
sgm_text valid.en:newsdev2017-enzh-src.en.sgm valid.zh:newsdev2017-enzh-ref.zh.sgm \
  test.en:newstest2017-enzh-src.en.sgm test.zh:newstest2017-enzh-ref.zh.sgm \
  test1.en:newstest2017-zhen-ref.en.sgm test1.zh:newstest2017-zhen-src.zh.sgm
wc -l "$RAW"/*."$SRC"

spm_binarize valid test test1
echo "binarized data in $OUT/bin (sentencepiece model: $SPM/spm.model; references: $RAW/test.$TGT, $RAW/test1.$SRC)"
echo "the archives and extracted files in $ORIG are no longer needed"
