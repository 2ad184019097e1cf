"""Configuration of task ``cmlm``: training noise and decoding options.

fairseq parses a task's dataclass fields as command-line flags of every command
(``fairseq-train``, ``-generate``, ``-interactive``, ``-validate``), so the decoding
options live here and are read at generation time.
"""

from dataclasses import dataclass, field
from typing import Optional

from fairseq.dataclass import ChoiceEnum
from fairseq.tasks.translation import TranslationConfig

from cmlm_decoding.confidence import CONFIDENCES
from cmlm_decoding.sampling import REMASKING
from cmlm_decoding.schedules import REMASK_SCHEDULES

from ..models.inference import INFERENCE_PATHS

OBJECTIVES = ChoiceEnum(["cmlm", "diffusion"])
DECODINGS = ChoiceEnum(["mask_predict", "diffusion"])
DECODER_IMPLS = list(INFERENCE_PATHS)  # models/inference.py: one class per path


@dataclass
class CMLMConfig(TranslationConfig):
    # --- training noise -----------------------------------------------------
    objective: OBJECTIVES = field(
        default="cmlm",
        metadata={
            "help": "cmlm: k ~ U{1..n} masked tokens per sentence (Mask-Predict); "
            "diffusion: each token masked with probability t ~ U(0,1) and the loss "
            "weighted 1/t, an upper bound on the NLL (LLaDA)"
        },
    )
    mask_ratio_min: float = field(
        default=0.0,
        metadata={
            "help": "cmlm objective: lower bound on the fraction of target tokens masked "
            "(the count is uniform in ceil(min*n)..floor(max*n), at least 1; "
            "0 and 1 give the paper's uniform 1..n)"
        },
    )
    mask_ratio_max: float = field(
        default=1.0,
        metadata={"help": "cmlm objective: upper bound on the fraction of target tokens masked"},
    )
    glancing_ratio: float = field(
        default=0.0,
        metadata={
            "help": "cmlm objective: glancing training (GLAT; 0: off): a first pass "
            "without gradients predicts the masked tokens and floor(ratio * errors) of "
            "them are revealed from the reference before the trained pass (GLAT: 0.5); "
            "with --ctc-upsample, canvas positions from the reference's best alignment"
        },
    )
    glancing_ratio_end: Optional[float] = field(
        default=None,
        metadata={
            "help": "glancing ratio reached after --glancing-anneal-updates, linearly "
            "from --glancing-ratio (GLAT: 0.3; default: no annealing)"
        },
    )
    glancing_full_mask: float = field(
        default=0.0,
        metadata={
            "help": "cmlm objective with --glancing-ratio: probability per sentence that "
            "the glancing first pass starts from the whole target masked (GLAT's first "
            "pass, the input of a one-pass decode; 1: GLAT's rule; 0: the CMLM input)"
        },
    )
    glancing_anneal_updates: int = field(
        default=0,
        metadata={"help": "updates over which the glancing ratio is annealed (0: constant)"},
    )
    self_correction: float = field(
        default=0.0,
        metadata={
            "help": "cmlm objective: probability per sentence of self-correction training "
            "(SMART/CMLMC; 0: off): the first pass's predictions fill the masked "
            "positions, a fresh mask is drawn, and the loss also covers the observed "
            "positions that hold the model's predictions"
        },
    )
    second_pass_from_update: int = field(
        default=0,
        metadata={
            "help": "train the plain cmlm objective before this update and glancing / "
            "self-correction from it on (0: from the start, as GLAT and SMART do); on "
            "distilled data they stall without it (docs/training.md)"
        },
    )
    init_from_ar: Optional[str] = field(
        default=None,
        metadata={
            "help": "fairseq-train: before the first update, copy the weights of this "
            "autoregressive checkpoint (fairseq transformer of the same sizes, trained on "
            "the same binarized data, e.g. the distillation teacher) into the new model; "
            "the length head and the <mask> embedding keep their initialisation; a "
            "resumed training keeps its own checkpoint's weights (docs/training.md)"
        },
    )
    diffusion_eps: float = field(
        default=1e-3,
        metadata={"help": "diffusion objective: mask probability p = (1 - eps) t + eps"},
    )
    eos_fill: bool = field(
        default=False,
        metadata={
            "help": "diffusion objective: keep the target's EOS and fill the padding after "
            "it with EOS, masked and predicted like tokens (LLaDA's fixed-length "
            "training), so that --gen-length can decode"
        },
    )
    p_uncond: float = field(
        default=0.0,
        metadata={
            "help": "probability of training a sentence with an empty source, so that "
            "the model also learns the unconditional prediction for --cfg-scale"
        },
    )
    mc_samples: int = field(
        default=1,
        metadata={
            "help": "noise draws per validation batch: more give a lower-variance "
            "estimate of the loss (the likelihood bound of the diffusion objective)"
        },
    )
    # --- decoding -------------------------------------------------------------
    decoding: DECODINGS = field(
        default="mask_predict",
        metadata={"help": "decoding algorithm of fairseq-generate/-interactive"},
    )
    remask_schedule: ChoiceEnum(REMASK_SCHEDULES) = field(
        default="linear",
        metadata={"help": "mask_predict: how many tokens to re-mask per pass (linear: paper)"},
    )
    remask_ratio: float = field(
        default=0.5, metadata={"help": "mask_predict: the ratio of --remask-schedule fixed"}
    )
    remask_confidence: ChoiceEnum(CONFIDENCES) = field(
        default="max_prob",
        metadata={"help": "mask_predict: how positions are ranked for re-masking"},
    )
    calibration_temperature: float = field(
        default=1.0,
        metadata={"help": "mask_predict: temperature of --remask-confidence calibrated"},
    )
    monotone: bool = field(
        default=False,
        metadata={"help": "mask_predict: never re-mask a token that survived a re-masking round"},
    )
    update_observed: bool = field(
        default=False,
        metadata={
            "help": "mask_predict: every pass after the first also re-predicts the tokens "
            "it leaves unmasked and replaces them (CMLMC's decoding, Huang et al. 2022; "
            "the paper keeps a token until it is re-masked). For models trained with "
            "--self-correction"
        },
    )
    length_prune_after: int = field(
        default=0,
        metadata={
            "help": "mask_predict: after this many passes keep only the best "
            "--length-prune-keep length candidates by mean log-probability (0: never; "
            "not in the paper: faster at l > 1, may cost BLEU)"
        },
    )
    length_prune_keep: int = field(
        default=1,
        metadata={"help": "mask_predict: length candidates kept by --length-prune-after"},
    )
    length_prior_weight: float = field(
        default=0.0,
        metadata={
            "help": "length candidates are ranked by mean token log-probability + W * the "
            "length head's log-probability of their length (0: the paper's rule, the mean "
            "log-probability alone, which favours short candidates)"
        },
    )
    length_shift: int = field(
        default=0,
        metadata={
            "help": "add K pieces to every length class of the length head before the top-l "
            "candidates are taken (a shifted length outside [1, the decoder's maximum] is "
            "never proposed; 0: the paper's candidates). Not in the paper: for a head biased "
            "short, as distilled students' become; fit K on the validation set"
        },
    )
    pll_rerank: int = field(
        default=0,
        metadata={
            "help": "rank the length candidates by their masked pseudo-log-likelihood under "
            "the model, G more passes each masking every G-th position (0: off, the paper's "
            "rule, mean log-probability of the decoding passes). Not in the paper"
        },
    )
    collapse_repeats: bool = field(
        default=False,
        metadata={
            "help": "keep each run of one token at adjacent positions once in the output "
            '("Hund Hund" -> "Hund"), after the candidate is chosen; tokens given by '
            "an infilling template always stay. Not in Mask-Predict: the post-processing "
            "of Lee et al. (2018)'s code"
        },
    )
    ctc_blank_penalty: float = field(
        default=0.0,
        metadata={
            "help": "CTC models (--ctc-upsample): subtract P from the blank's "
            "log-probability at every canvas position before the best path is taken "
            "(P > 0: longer outputs; 0: plain best path). Not in the CTC papers' greedy "
            "decoding: for outputs that come out short; fit P on the validation set"
        },
    )
    rerank_with: Optional[str] = field(
        default=None,
        metadata={
            "help": "checkpoint of a fairseq autoregressive model (e.g. --task translation "
            "--arch transformer) with our dictionary: it scores the finished length "
            "candidates (mean log-probability of the tokens and EOS, one teacher-forced "
            "pass) and the best is kept, as fairseq's --iter-decode-with-external-reranker"
        },
    )
    rerank_weight: float = field(
        default=1.0,
        metadata={
            "help": "with --rerank-with: candidate score = W * AR score + (1 - W) * our "
            "score, W in (0, 1] (1: the AR score alone, fairseq's rule)"
        },
    )
    stop_unchanged: bool = field(
        default=False,
        metadata={
            "help": "mask_predict: a sentence stops after a pass that re-predicted every "
            "re-masked token unchanged (fairseq's adaptive stop; not in the paper: faster, "
            "may change outputs)"
        },
    )
    adaptive_passes: Optional[int] = field(
        default=None,
        metadata={
            "help": "mask_predict: length-adaptive passes (default: off, every sentence "
            "gets --iter-decode-max-iter passes): a candidate of n tokens gets "
            "T_i = clamp(ceil(log2 n) + C, 1, --iter-decode-max-iter) passes and its "
            "re-mask schedule is computed from T_i; C >= 0 (the first design source "
            "recommends 0 to 2; not in the paper)"
        },
    )
    remask_regions: int = field(
        default=1,
        metadata={
            "help": "mask_predict: split each target into K contiguous regions and spread "
            "the re-mask count over them in proportion to their sizes, re-masking the "
            "least confident positions of each region (1: the paper's global ranking; "
            "not in the paper)"
        },
    )
    target_tag: Optional[str] = field(
        default=None,
        metadata={
            "help": "multi-task models: the task tag (e.g. <2de>) put in front of every "
            "source sentence that starts with none, for decoding a whole untagged test "
            "set or input stream; a sentence's own tag wins (see task_tags.py)"
        },
    )
    decoder_impl: ChoiceEnum(DECODER_IMPLS) = field(
        default="fast",
        metadata={
            "help": "how decoder passes are computed: fast (cross-attention keys/values "
            "once per sentence, packed projections; same outputs up to float rounding), "
            "int8 (fast with int8 dynamically quantized linear layers; CPU only, outputs "
            "change slightly), compiled (fast with the decoder trunk through torch.compile "
            "on bucketed shapes, CUDA graphs on CUDA; same outputs up to float rounding) or "
            "modules (fairseq's module forward, the reference)"
        },
    )
    diffusion_steps: int = field(
        default=0,
        metadata={"help": "diffusion: total sampling steps S (0: --iter-decode-max-iter)"},
    )
    block_length: int = field(
        default=0,
        metadata={"help": "diffusion: block length b, decoded left to right (0: whole length)"},
    )
    sampling_temperature: float = field(
        default=0.0,
        metadata={"help": "diffusion: Gumbel-max temperature (0: argmax)"},
    )
    remasking: ChoiceEnum(REMASKING) = field(
        default="low_confidence",
        metadata={"help": "diffusion: which positions are revealed first"},
    )
    confidence_threshold: Optional[float] = field(
        default=None,
        metadata={
            "help": "diffusion: reveal every position whose confidence is at least this "
            "(at least one per step) instead of the fixed schedule (Fast-dLLM)"
        },
    )
    gen_length: int = field(
        default=0,
        metadata={
            "help": "diffusion: a fixed generation length G instead of the length head; "
            "the output ends at the first generated EOS (needs a model trained with "
            "--eos-fill)"
        },
    )
    cfg_scale: float = field(
        default=0.0,
        metadata={"help": "diffusion: classifier-free guidance scale w (0: off)"},
    )
