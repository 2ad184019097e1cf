"""CMLM training loss (Ghazvininejad et al., 2019, Section 2).

Label-smoothed cross-entropy over the masked target positions only, plus the
negative log-likelihood of the target-length class. Both are summed over the
batch and the update is normalised by the number of masked tokens, so the length
NLL enters with weight ``length_loss_factor`` per sentence. The default factor
1.0 is the original Mask-Predict code's choice; fairseq's port of CMLM instead
averages each term separately and weights the length term 0.1.

Label smoothing spreads eps uniformly over the whole vocabulary:
``loss = (1 - eps) * nll + eps * mean_v(-log p_v)``.

With the masked-diffusion objective (``--objective diffusion``; Nie et al., 2025,
Eq. 3; Ou et al., 2025) each masked token's loss is weighted by 1/p, p the
sentence's masking probability, and the update is normalised by the number of
target tokens instead: the logged ``nll_loss`` (base 2, per target token) is then
a Monte-Carlo estimate of an upper bound on ``-log2 p(y | x, |y|) / |y|``, which
``fairseq-validate`` reports (``--mc-samples K`` averages K noise draws). Train
diffusion models with ``--label-smoothing 0`` for the bound to be the objective.
The model returns a dict of terms (``{"word_ins": ..., "length": ...}``) and this
criterion sums them. A model trained with CTC (``--ctc-upsample``, ``models/ctc.py``)
returns its ``word_ins`` term as a summed loss over ``count`` target tokens; the update is
then normalised by the number of target tokens, and ``--label-smoothing`` does not
apply to it. With ``--ctc-cmlm-weight W`` the model adds a ``cmlm`` term, the
label-smoothed loss of its masked positions, which enters the sum with weight W (the
update still normalised by the target tokens; Mask-CTC, Higuchi et al. 2020, weights
CTC 0.3 and the masked loss 0.7, each normalised its own way).
"""

import math
from dataclasses import dataclass, field
from typing import Optional

import torch.nn.functional as F
from fairseq import metrics, utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass
from torch import Tensor

from ..errors import CMLMPluginError

CRITERION_NAME = "cmlm_plugin_loss"


@dataclass
class CMLMLossConfig(FairseqDataclass):
    label_smoothing: float = field(
        default=0.1,
        metadata={"help": "label smoothing eps for the masked-token loss (paper: 0.1)"},
    )
    length_loss_factor: float = field(
        default=1.0,
        metadata={
            "help": "weight of the length NLL per sentence, relative to one masked "
            "token (1.0 as in the original code; fairseq's port uses a 0.1-weighted mean)"
        },
    )


def smoothed_nll(logits: Tensor, target: Tensor, eps: float, weights: Optional[Tensor] = None):
    """Summed label-smoothed loss and summed NLL of ``M x V`` logits (``(M,)`` weights)."""
    lprobs = F.log_softmax(logits.float(), dim=-1)  # M x V
    nll = -lprobs.gather(1, target[:, None]).squeeze(1)  # M
    if eps > 0:
        loss = (1.0 - eps) * nll - eps * lprobs.mean(dim=-1)  # M
    else:
        loss = nll
    if weights is not None:
        loss, nll = loss * weights, nll * weights
    return loss.sum(), nll.sum()


@register_criterion(CRITERION_NAME, dataclass=CMLMLossConfig)
class CMLMPluginLoss(FairseqCriterion):
    def __init__(self, task, label_smoothing=0.1, length_loss_factor=1.0):
        super().__init__(task)
        if not 0.0 <= label_smoothing < 1.0:
            raise CMLMPluginError(f"--label-smoothing must be in [0, 1), got {label_smoothing}")
        if length_loss_factor < 0:
            raise CMLMPluginError(f"--length-loss-factor must be >= 0, got {length_loss_factor}")
        self.smoothing = {"word_ins": label_smoothing, "cmlm": label_smoothing}
        self.factors = {"length": length_loss_factor}

    def forward(self, model, sample, reduce=True):
        if "prev_target" not in sample:
            raise CMLMPluginError(
                f"{CRITERION_NAME} needs the noisy target that --task cmlm adds "
                "(sample['prev_target']); train with --task cmlm"
            )
        net_input = sample["net_input"]
        terms = model(
            net_input["src_tokens"],
            net_input["src_lengths"],
            sample["prev_target"],
            sample["target"],
            revise=sample.get("revise"),
        )
        ntokens = int(sample["target"].ne(self.padding_idx).sum())
        weights = {}
        if "loss" in terms["word_ins"]:  # CTC: one summed loss over the target tokens
            sample_size = masked = terms["word_ins"]["count"]
        elif "mask_prob" in sample:  # diffusion objective: weight 1/p per masked token
            masked_rows = sample["prev_target"].eq(self.task.mask_idx).nonzero(as_tuple=True)[0]
            weights["word_ins"] = sample["mask_prob"].reciprocal()[masked_rows]  # M
            sample_size = ntokens
            masked = int(terms["word_ins"]["tgt"].numel())
        else:
            sample_size = masked = int(terms["word_ins"]["tgt"].numel())
        total = 0.0
        logging_output = {}
        for name, term in terms.items():
            if "loss" in term:  # computed by the model (CTC)
                loss = nll = term["loss"]
            else:
                loss, nll = smoothed_nll(
                    term["out"], term["tgt"], self.smoothing.get(name, 0.0), weights.get(name)
                )
            weight = self.factors.get(name, 1.0) * term.get("weight", 1.0)
            total = total + weight * loss
            logging_output[f"{name}_loss"] = loss.detach()
            logging_output[f"{name}_nll"] = nll.detach()
        if "cmlm" in terms:  # Mask-CTC: the masked positions of the CMLM term
            logging_output["cmlm_masked"] = int(terms["cmlm"]["tgt"].numel())
        logging_output.update(
            loss=total.detach(),
            masked=masked,
            ntokens=ntokens,
            nsentences=sample["target"].size(0),
            sample_size=sample_size,
        )
        return total, sample_size, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        def total(key):
            return sum(float(log.get(key, 0)) for log in logging_outputs)

        sample_size = total("sample_size")
        nsentences = total("nsentences")
        ntokens = total("ntokens")
        # fairseq convention: losses in base 2, per masked token (diffusion: per target
        # token), the length loss per sentence
        metrics.log_scalar(
            "loss", total("loss") / max(sample_size, 1) / math.log(2), sample_size, round=3
        )
        metrics.log_scalar(
            "nll_loss",
            total("word_ins_nll") / max(sample_size, 1) / math.log(2),
            sample_size,
            round=3,
        )
        metrics.log_scalar(
            "length_loss",
            total("length_nll") / max(nsentences, 1) / math.log(2),
            nsentences,
            round=3,
        )
        if total("cmlm_masked"):  # --ctc-cmlm-weight: the CMLM term per masked token
            metrics.log_scalar(
                "cmlm_nll_loss",
                total("cmlm_nll") / total("cmlm_masked") / math.log(2),
                total("cmlm_masked"),
                round=3,
            )
        metrics.log_derived("ppl", lambda meters: utils.get_perplexity(meters["nll_loss"].avg))
        metrics.log_scalar("masked_ratio", total("masked") / max(ntokens, 1), ntokens, round=3)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
