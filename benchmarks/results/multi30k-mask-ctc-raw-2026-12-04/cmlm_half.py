"""Diagnostic: decode a Mask-CTC model (--ctc-cmlm-weight) as a plain CMLM, its length head
choosing the lengths and Mask-Predict every token, to see its CMLM half apart from CTC.

    python cmlm_half.py DATA_BIN CHECKPOINT T L   ->  sacreBLEU of the test set
"""

import argparse
import sys

import sacrebleu
import torch
from fairseq import checkpoint_utils, utils

from cmlm_plugin.generation.generator import build_generator

data, checkpoint, passes, beam = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
models, _, task = checkpoint_utils.load_model_ensemble_and_task([checkpoint], {"data": data})
model = models[0].eval()
task.load_dataset("test")
args = argparse.Namespace(iter_decode_max_iter=passes, iter_decode_with_beam=beam)
generator = build_generator(task.tgt_dict, task.src_dict, [model], args, task.cfg)
batches = task.get_batch_iterator(task.dataset("test"), max_sentences=128).next_epoch_itr(
    shuffle=False
)
hypotheses, references = {}, {}
with torch.no_grad():
    for sample in batches:
        outputs = generator.generate([model], sample)
        for row, i in enumerate(sample["id"].tolist()):
            hypotheses[i] = task.tgt_dict.string(outputs[row][0]["tokens"], "sentencepiece")
            target = utils.strip_pad(sample["target"][row], task.tgt_dict.pad())
            references[i] = task.tgt_dict.string(target, "sentencepiece")
ids = sorted(hypotheses)
bleu = sacrebleu.corpus_bleu([hypotheses[i] for i in ids], [[references[i] for i in ids]])
print(f"{checkpoint} as a CMLM, T={passes}, l={beam}: {bleu}")
