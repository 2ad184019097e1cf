"""Is the length head biased? Its predicted target length against the reference's.

    python benchmarks/length_bias.py DATA_BIN --path CKPT [--gen-subset valid] [--cpu]

For every sentence of the split, the length head's most probable length (the first
of the l Mask-Predict candidates) and its expected length are compared with the
reference target length, in target pieces without EOS (the unit the head is trained on). Prints the
mean error (predicted minus reference), the shares exact / within +-2 / more than 2
short / more than 2 long, and the mean log-probability the head gives the reference
length. Needs no decoding: one encoder pass per batch.
"""

import json
import sys

import torch


def summary(
    predicted: torch.Tensor,
    expected: torch.Tensor,
    reference: torch.Tensor,
    reference_logprob: torch.Tensor,
) -> dict:
    """Length-error statistics of 1-D tensors of one entry per sentence."""
    error = (predicted - reference).float()  # B
    return {
        "sentences": int(error.numel()),
        "reference_length_mean": round(reference.float().mean().item(), 3),
        "predicted_length_mean": round(predicted.float().mean().item(), 3),
        "expected_length_mean": round(expected.mean().item(), 3),
        "error_mean": round(error.mean().item(), 3),
        "exact": round(error.eq(0).float().mean().item(), 4),
        "within_2": round(error.abs().le(2).float().mean().item(), 4),
        "short_by_more_than_2": round(error.lt(-2).float().mean().item(), 4),
        "long_by_more_than_2": round(error.gt(2).float().mean().item(), 4),
        "reference_logprob_mean": round(reference_logprob.mean().item(), 4),
    }


def main(argv=None) -> None:
    from fairseq import checkpoint_utils, options, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    import cmlm_plugin  # noqa: F401  (registers the task and model)

    parser = options.get_generation_parser(default_task="cmlm")
    args = options.parse_args_and_arch(parser, argv)
    cfg = convert_namespace_to_omegaconf(args)
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([cfg.common_eval.path])
    model = models[0].eval()
    if not hasattr(model, "predict_length"):
        sys.exit(f"error: {cfg.common_eval.path} is not a --task cmlm model")
    subset = cfg.dataset.gen_subset
    task.load_dataset(subset, combine=False, epoch=1)
    iterator = task.get_batch_iterator(
        dataset=task.dataset(subset),
        max_tokens=cfg.dataset.max_tokens or 8192,
        max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions()),
    ).next_epoch_itr(shuffle=False)
    pad, eos = task.target_dictionary.pad(), task.target_dictionary.eos()
    rows = {"predicted": [], "expected": [], "reference": [], "reference_logprob": []}
    with torch.no_grad():
        for sample in iterator:
            net_input = sample["net_input"]
            encoder_out = model.encoder(
                net_input["src_tokens"], src_lengths=net_input["src_lengths"]
            )
            length = model.predict_length(encoder_out)
            logprobs, class_lengths = length["logprobs"], length["class_lengths"]  # B x C
            target = sample["target"]  # B x T
            reference = (target.ne(pad) & target.ne(eos)).sum(dim=1)  # B, as the head is trained
            best = logprobs.argmax(dim=1, keepdim=True)  # B x 1
            rows["predicted"].append(class_lengths.gather(1, best).squeeze(1))
            rows["expected"].append((logprobs.exp() * class_lengths.float()).sum(dim=1))
            rows["reference"].append(reference)
            hit = class_lengths.eq(reference[:, None])  # B x C, one True where the class exists
            rows["reference_logprob"].append(
                logprobs.masked_fill(~hit, float("-inf")).logsumexp(dim=1).clamp(min=-100)
            )
    stats = summary(*(torch.cat(rows[k]) for k in rows))
    print(json.dumps({"checkpoint": cfg.common_eval.path, "subset": subset, **stats}, indent=1))


if __name__ == "__main__":
    main()
