"""``cmlm-calibrate``: fit the temperature of ``--remask-confidence calibrated``.

    cmlm-calibrate DATA_BIN --path CKPT [--valid-subset valid] [--max-tokens 4096] [--cpu]

Masks the chosen split with the CMLM training noise, collects the model's logits at
the masked positions (at most ``--max-positions``) and prints the temperature that
minimises their NLL (``cmlm_plugin.calibration``), with the NLL before and after.
"""

import sys

import torch


def main(argv=None) -> None:
    from fairseq import checkpoint_utils, options, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    import cmlm_plugin  # noqa: F401  (registers the task and model)
    from cmlm_decoding.calibration import fit_temperature, tempered_nll

    parser = options.get_validation_parser(default_task="cmlm")
    parser.add_argument("--max-positions", type=int, default=20000,
                        help="masked positions to collect (memory: positions x vocabulary)")  # fmt: skip
    args = options.parse_args_and_arch(parser, argv)
    cfg = convert_namespace_to_omegaconf(args)
    use_cuda = torch.cuda.is_available() and not cfg.common.cpu
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([cfg.common_eval.path])
    model = models[0].eval()
    if use_cuda:
        model.cuda()
    if not hasattr(task, "add_noise"):
        sys.exit(f"error: {cfg.common_eval.path} was not trained with --task cmlm")
    subset = cfg.dataset.valid_subset.split(",")[0]
    task.load_dataset(subset, combine=False, epoch=1)
    iterator = task.get_batch_iterator(
        dataset=task.dataset(subset),
        max_tokens=cfg.dataset.max_tokens,
        max_sentences=cfg.dataset.batch_size,
        max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions()),
        seed=cfg.common.seed,
    ).next_epoch_itr(shuffle=False)
    torch.manual_seed(cfg.common.seed)
    logits, targets, collected = [], [], 0
    with torch.no_grad():
        for sample in iterator:
            sample = utils.move_to_cuda(sample) if use_cuda else sample
            sample = task.add_noise(sample)
            net_input = sample["net_input"]
            terms = model(
                net_input["src_tokens"], net_input["src_lengths"],
                sample["prev_target"], sample["target"],
            )  # fmt: skip
            logits.append(terms["word_ins"]["out"].float().cpu())  # M x V
            targets.append(terms["word_ins"]["tgt"].cpu())  # M
            collected += targets[-1].numel()
            if collected >= args.max_positions:
                break
    logits = torch.cat(logits)[: args.max_positions]
    targets = torch.cat(targets)[: args.max_positions]
    temperature = fit_temperature(logits, targets)
    print(
        f"positions {targets.numel()} | nll at temperature 1: "
        f"{tempered_nll(logits, targets, 1.0):.4f} | nll at {temperature:.3f}: "
        f"{tempered_nll(logits, targets, temperature):.4f} (nats)"
    )
    print(f"--remask-confidence calibrated --calibration-temperature {temperature:.3f}")


if __name__ == "__main__":
    main()
