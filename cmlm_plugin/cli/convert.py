"""``cmlm-convert``: other codebases' CMLM checkpoints -> cmlm_plugin checkpoints.

    cmlm-convert fairseq-cmlm IN.pt OUT.pt --data DATA_BIN
    cmlm-convert mask-predict IN.pt OUT.pt --data DATA_BIN [--heads H]

``fairseq-cmlm`` reads a fairseq ``cmlm_transformer`` checkpoint (task
``translation_lev``), ``mask-predict`` one of the original Mask-Predict code
(``bert_transformer_seq2seq``); the mappings live in ``cmlm_plugin.checkpoints.convert``.
DATA_BIN is the binarized data the model was trained on (its ``dict.*.txt``): the
converted model is built by ``--task cmlm`` on it and loaded strictly, so a missing
or extra weight is an error here, not at decoding time. The output decodes with
``fairseq-generate DATA_BIN --user-dir $(cmlm-plugin-dir) --task cmlm --path OUT.pt``.
"""

import argparse
import os
import sys

import torch

SOURCES = ("fairseq-cmlm", "mask-predict")


def _parser():
    p = argparse.ArgumentParser(prog="cmlm-convert", description=__doc__.split("\n\n")[0])
    p.add_argument("source", choices=SOURCES, help="which codebase wrote IN.pt")
    p.add_argument("input", help="checkpoint to convert")
    p.add_argument("output", help="where to write the cmlm_plugin checkpoint")
    p.add_argument("--data", required=True, help="binarized data dir with the model's dict.*.txt")
    p.add_argument("--source-lang", "-s", default=None)
    p.add_argument("--target-lang", "-t", default=None)
    p.add_argument("--heads", type=int, default=None,
                   help="attention heads (mask-predict; default: the checkpoint's args, else dim/64)")  # fmt: skip
    return p


def _task_and_cfg(data, source_lang, target_lang):
    """Our task on ``data`` and a training config to store in the checkpoint."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from omegaconf import OmegaConf

    import cmlm_plugin

    argv = [data, "--user-dir", os.path.dirname(cmlm_plugin.__file__), "--task", "cmlm"]
    argv += ["--arch", "cmlm_plugin_base", "--criterion", "cmlm_plugin_loss", "--cpu"]
    argv += ["-s", source_lang] if source_lang else []
    argv += ["-t", target_lang] if target_lang else []
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    return task, OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)


def _model_args(source, state, heads):
    """Our model options: the source's own sizes and framing (argparse.Namespace)."""
    from ..checkpoints import convert
    from ..models.cmlm_transformer import MODEL_NAME, cmlm_plugin_base

    if source == "fairseq-cmlm":
        cfg = state.get("cfg") or {}
        saved = cfg.get("model") if isinstance(cfg, dict) else None
        saved = saved or state.get("args")
        if saved is None:
            raise convert.CMLMPluginError("the checkpoint stores no model options (cfg/args)")
        values = dict(vars(saved))
        values.update(length_classes=256, length_offset=bool(values.get("pred_length_offset")))
    else:
        saved = state.get("args")
        values = convert.mask_predict_sizes(state["model"])
        dim = values["encoder_embed_dim"]
        heads = heads or getattr(saved, "encoder_attention_heads", None) or dim // 64
        values.update(
            encoder_attention_heads=heads,
            decoder_attention_heads=getattr(saved, "decoder_attention_heads", None) or heads,
            encoder_learned_pos=True,
            decoder_learned_pos=True,
            encoder_normalize_before=False,
            decoder_normalize_before=False,
            no_scale_embedding=True,
            layernorm_embedding=False,
            activation_fn="gelu",
            dropout=getattr(saved, "dropout", 0.3),
        )
    values.update(_name=MODEL_NAME, arch=MODEL_NAME, no_bert_init=True)
    args = argparse.Namespace(**values)
    cmlm_plugin_base(args)  # fills what the source did not set with our defaults
    return args


def convert_checkpoint(source, path, output, data, source_lang=None, target_lang=None, heads=None):
    """Convert ``path`` into ``output``; returns the converted model."""
    from ..checkpoints import convert
    from ..checkpoints.errors import read_error
    from ..errors import CMLMPluginError

    if os.path.abspath(path) == os.path.abspath(output):
        raise CMLMPluginError("cmlm-convert would overwrite its input: give another OUT.pt")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise read_error(path, exc) from exc
    if not isinstance(state, dict) or "model" not in state:
        raise CMLMPluginError(f"{path} is not a fairseq checkpoint (no 'model' weights)")
    task, cfg = _task_and_cfg(data, source_lang, target_lang)
    args = _model_args(source, state, heads)
    vocab = len(task.target_dictionary)
    if source == "fairseq-cmlm":
        weights, framing = convert.from_fairseq_cmlm(
            state["model"], vocab, task.target_dictionary.unk(), task.mask_idx
        )
    else:
        weights, framing = convert.from_mask_predict(state["model"], vocab)
    for key, value in framing.items():
        setattr(args, key, value)
    model = task.build_model(args)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise CMLMPluginError(
            f"{path} does not map onto the {source} layout: missing {list(missing)[:5]}, "
            f"unexpected {list(unexpected)[:5]}"
        )
    cfg["model"] = args
    out = {
        "args": None,
        "cfg": cfg,
        "model": model.state_dict(),
        "criterion": None,
        "optimizer_history": [
            {"criterion_name": "CMLMPluginLoss", "optimizer_name": "none",
             "lr_scheduler_state": {}, "num_updates": 0}  # fmt: skip
        ],
        "task_state": {},
        "extra_state": {"converted_from": f"{source}:{os.path.abspath(path)}"},
    }
    tmp = output + ".tmp"
    torch.save(out, tmp)
    os.replace(tmp, output)  # never a half-written checkpoint
    return model


def main(argv=None) -> None:
    import cmlm_plugin  # noqa: F401  (registers the task and model, installs the error hook)

    args = _parser().parse_args(argv)
    model = convert_checkpoint(
        args.source, args.input, args.output, args.data,
        args.source_lang, args.target_lang, args.heads,
    )  # fmt: skip
    size = sum(p.numel() for p in model.parameters())
    print(f"converted {args.input} ({args.source}) -> {args.output}: {size:,} parameters, "
          f"decoder frame {model.decoder.frame!r}", file=sys.stderr)  # fmt: skip


if __name__ == "__main__":
    main()
