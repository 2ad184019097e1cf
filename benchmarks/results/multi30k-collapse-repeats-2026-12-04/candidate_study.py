"""Offline study of the five length candidates of Mask-Predict (T=10, l=5): which selection
rule keeps the best one, against an oracle that reads the reference.

    python candidate_study.py CKPT SUBSET OUT.json   # decode once, dump the candidates
    python candidate_study.py OUT.json               # the rules' corpus sacreBLEU

The dump records, per sentence, the five candidates (sentencepiece removed), the mean
log-probability of the decoding passes (the paper's score), the masked
pseudo-log-likelihood of --pll-rerank 2 and the length head's log-probability. Rules:
the paper's; --pll-rerank 2; their mean; the length head alone; minimum Bayes risk with
sentence BLEU among the candidates; the oracle (highest sentence BLEU against the
reference, not a decoder); each with consecutive repeated words removed afterwards
(what --collapse-repeats does on pieces). A one-off study: it reads the generator's
intermediate values by wrapping three functions of cmlm_plugin.generation.generator.
"""

import itertools
import json
import sys

import numpy as np
import sacrebleu
import torch
from sacrebleu.metrics import BLEU

BEAM = 5


def dump(ckpt, subset, out):
    from fairseq import checkpoint_utils, options, tasks, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    import cmlm_plugin.generation.generator as G

    argv = ["work/multi30k/bin", "--user-dir", "cmlm_plugin", "--task", "cmlm"]
    argv += ["--path", ckpt, "--gen-subset", subset, "--iter-decode-max-iter", "10"]
    argv += ["--iter-decode-with-beam", str(BEAM), "--cpu", "--pll-rerank", "2"]
    args = options.parse_args_and_arch(options.get_generation_parser(), argv)
    cfg = convert_namespace_to_omegaconf(args)
    utils.import_user_module(cfg.common)
    task = tasks.setup_task(cfg.task)
    task.load_dataset(subset, task_cfg=cfg.task)
    models, _ = checkpoint_utils.load_model_ensemble([ckpt], task=task)
    generator = task.build_generator(models, cfg.generation)
    seen = {}
    plain = G.hypotheses, G.pseudo_log_likelihood, G.length_candidates

    def hypotheses(result, *rest):
        seen["tokens"], seen["score"] = result.tokens, result.scores
        return plain[0](result, *rest)

    def pll(*rest):
        seen["pll"] = plain[1](*rest)
        return seen["pll"]

    def lengths(*rest):
        seen["length"] = plain[2](*rest)
        return seen["length"]

    G.hypotheses, G.pseudo_log_likelihood, G.length_candidates = hypotheses, pll, lengths
    d = task.target_dictionary
    positions = utils.resolve_max_positions(task.max_positions(), models[0].max_positions())
    batches = task.get_batch_iterator(
        dataset=task.dataset(subset), max_sentences=64, max_positions=positions, seed=1
    ).next_epoch_itr(shuffle=False)
    rows = {}
    with torch.no_grad():
        for sample in batches:
            generator.generate(models, sample)
            ids = sample["id"].tolist()
            tokens = seen["tokens"].view(len(ids), BEAM, -1)  # B x l x L
            score = seen["score"].view(len(ids), BEAM).tolist()
            pll_score = seen["pll"].view(len(ids), BEAM).tolist()
            length_lp = seen["length"][1].view(len(ids), BEAM).float().tolist()
            for i, sid in enumerate(ids):
                target = utils.strip_pad(sample["target"][i], d.pad())
                rows[sid] = dict(
                    ref=d.string(target, "sentencepiece", escape_unk=True),
                    cands=[d.string(t[t.ne(d.pad())], "sentencepiece") for t in tokens[i]],
                    score=score[i],
                    pll=pll_score[i],
                    lenlp=length_lp[i],
                )
    json.dump([rows[k] for k in sorted(rows)], open(out, "w"))


def collapse(text):
    return " ".join(word for word, _ in itertools.groupby(text.split()))


def study(path):
    rows = json.load(open(path))
    refs = [r["ref"] for r in rows]
    sentence = BLEU(effective_order=True)
    score, pll = (np.array([r[k] for r in rows]) for k in ("score", "pll"))
    length = np.array([r["lenlp"] for r in rows])
    mbr = np.array(
        [[[sentence.sentence_score(a, [b]).score for b in r["cands"]] for a in r["cands"]]
         for r in rows]
    )  # fmt: skip
    oracle = np.array(
        [[sentence.sentence_score(c, [r["ref"]]).score for c in r["cands"]] for r in rows]
    )
    rules = {
        "paper (mean log-probability)": score,
        "--pll-rerank 2": pll,
        "mean of the two": (score + pll) / 2,
        "length head alone": length,
        "MBR, sentence BLEU": mbr.sum(2),
        "oracle (reads the reference)": oracle,
    }
    print(f"{len(rows)} sentences of {path}")
    print("| rule | sacreBLEU | with repeated words removed |")
    print("| --- | --- | --- |")
    for name, values in rules.items():
        chosen = [r["cands"][k] for r, k in zip(rows, values.argmax(1))]
        plain = sacrebleu.corpus_bleu(chosen, [refs]).score
        collapsed = sacrebleu.corpus_bleu([collapse(c) for c in chosen], [refs]).score
        print(f"| {name} | {plain:.2f} | {collapsed:.2f} |")


if __name__ == "__main__":
    if len(sys.argv) == 4:
        dump(*sys.argv[1:])
    else:
        study(sys.argv[1])
