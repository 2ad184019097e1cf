"""A tiny dictionary, task, model and criterion built in-process for component tests."""

import torch
from conftest import ROOT
from fairseq import options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

PLUGIN = str(ROOT / "cmlm_plugin")
WORDS = [f"w{i}" for i in range(30)]


def write_dictionaries(folder) -> str:
    text = "".join(f"{w} {100 - i}\n" for i, w in enumerate(WORDS))
    for lang in ("src", "tgt"):
        (folder / f"dict.{lang}.txt").write_text(text)
    return str(folder)


def config(data_dir, *extra, arch="cmlm_plugin_tiny"):
    """The omegaconf config fairseq-train builds for the tiny CMLM on ``data_dir``."""
    parser = options.get_training_parser()
    argv = [data_dir, "--user-dir", PLUGIN, "--task", "cmlm", "--arch", arch]
    argv += ["-s", "src", "-t", "tgt", "--criterion", "cmlm_plugin_loss", "--cpu", *extra]
    return convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, argv))


def setup(data_dir, *extra, arch="cmlm_plugin_tiny"):
    cfg = config(data_dir, *extra, arch=arch)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    return task, model, criterion


def encode(task, sentences):
    rows = [task.tgt_dict.encode_line(s, add_if_not_exist=False).long() for s in sentences]
    width = max(len(r) for r in rows)
    batch = torch.full((len(rows), width), task.tgt_dict.pad())
    for i, r in enumerate(rows):
        batch[i, : len(r)] = r  # right-padded here; the task pads sources left
    return batch


def sample_for(task, sources, targets):
    src = encode(task, sources)
    return {
        "net_input": {"src_tokens": src, "src_lengths": src.ne(task.src_dict.pad()).sum(1)},
        "target": encode(task, targets),
        "id": torch.arange(len(sources)),
        "nsentences": len(sources),
        "ntokens": 0,
    }
