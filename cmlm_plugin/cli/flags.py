"""``cmlm-flags``: every command-line flag the plugin adds to fairseq, with default and help.

    cmlm-flags [--markdown] [--where task|model|criterion|generation|arch]

The list is generated from the definitions fairseq itself parses, so it cannot drift:

* task ``cmlm``: the fields ``CMLMConfig`` (``tasks/cmlm_config.py``) adds to fairseq's
  ``TranslationConfig`` (whose own flags, ``--source-lang`` etc., stay fairseq's);
* model ``cmlm_plugin_transformer``: the arguments ``CMLMPluginModel.add_args`` adds to
  fairseq's ``TransformerModel.add_args``; their defaults are set by the architecture
  functions, so each is shown as every ``cmlm_plugin_*`` architecture sets it;
* criterion ``cmlm_plugin_loss``: the fields of ``CMLMLossConfig``;
* generation: fairseq's own flags that the plugin's generator reads, with fairseq's
  default and help text and, after it, what the flag means here (the only hand-written
  text; the test checks that it covers every flag ``generator.py`` reads);
* arch: what each ``cmlm_plugin_*`` architecture sets differently from fairseq's
  ``transformer`` defaults.

Plain text by default; ``--markdown`` prints one table.
"""

import argparse
import dataclasses
import enum
import textwrap
from typing import Dict, List, NamedTuple, Optional

WHERES = ("task", "model", "criterion", "generation", "arch")

# What fairseq's generation flags mean under --task cmlm (generator.py reads them).
GENERATION_MEANING = {
    "iter_decode_max_iter": "T, the number of decoder passes (the paper's count: T=1 is "
    "single-pass NAT; fairseq's own cmlm_transformer runs T+1 passes); diffusion: the "
    "sampling steps unless --diffusion-steps is set",
    "iter_decode_with_beam": "l, the number of length candidates decoded in parallel; the "
    "output is the candidate with the highest mean log-probability",
    "iter_decode_force_max_iter": "spend all T passes on every sentence (refused with "
    "--stop-unchanged)",
    "retain_iter_history": "print the output after every pass (E-<id>_<pass> lines)",
    "print_step": "print the passes spent on each sentence (I-<id> lines)",
    "seed": "diffusion decoding: seed of the Gumbel noise of --sampling-temperature > 0",
}


class Flag(NamedTuple):
    where: str
    flag: str
    default: str
    help: str


def _show(value) -> str:
    if isinstance(value, enum.Enum):
        value = value.value
    if value is None:
        return "None"
    return str(value)


def _choices(kind) -> Optional[List[str]]:
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return [str(member.value) for member in kind]
    return None


def _dataclass_flags(where: str, config, inherited=()) -> List[Flag]:
    """The fields of ``config`` not in any of the ``inherited`` dataclasses, as flags."""
    skip = {f.name for parent in inherited for f in dataclasses.fields(parent)}
    flags = []
    for f in dataclasses.fields(config):
        if f.name.startswith("_") or f.name in skip:
            continue
        name = "--" + f.name.replace("_", "-")
        choices = _choices(f.type)
        if choices:
            name += " {" + ",".join(choices) + "}"
        elif f.type is bool or f.type == "bool":
            pass
        else:
            name += " " + f.name.upper()  # fairseq's --help metavar
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None
        shown = ("off" if not default else "on") if isinstance(default, bool) else _show(default)
        flags.append(Flag(where, name, shown, " ".join(f.metadata.get("help", "").split())))
    return flags


def task_flags() -> List[Flag]:
    from fairseq.tasks.translation import TranslationConfig

    from ..tasks.cmlm_config import CMLMConfig

    return _dataclass_flags("task", CMLMConfig, inherited=[TranslationConfig])


def criterion_flags() -> List[Flag]:
    from ..criterions.cmlm_loss import CMLMLossConfig

    return _dataclass_flags("criterion", CMLMLossConfig)


def plugin_archs() -> Dict[str, argparse.Namespace]:
    """``{arch name: the namespace its architecture function fills}`` for our model."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    from ..models.cmlm_transformer import CMLMPluginModel

    filled = {}
    for name, model in sorted(ARCH_MODEL_REGISTRY.items()):
        if model is CMLMPluginModel:
            args = argparse.Namespace()
            ARCH_CONFIG_REGISTRY[name](args)
            filled[name] = args
    return filled


def model_actions() -> List[argparse.Action]:
    """The argparse actions our model adds to fairseq's Transformer arguments."""
    from fairseq.models.transformer import TransformerModel

    from ..models.cmlm_transformer import CMLMPluginModel

    fairseq_parser = argparse.ArgumentParser(add_help=False)
    TransformerModel.add_args(fairseq_parser)
    known = {action.dest for action in fairseq_parser._actions}
    ours = argparse.ArgumentParser(add_help=False)
    CMLMPluginModel.add_args(ours)
    return [action for action in ours._actions if action.dest not in known]


def _per_arch(dest: str, archs: Dict[str, argparse.Namespace], store_true: bool) -> str:
    def show(value):
        return ("on" if value else "off") if store_true else _show(value)

    values = {name: show(getattr(args, dest, None)) for name, args in archs.items()}
    counts: Dict[str, int] = {}
    for value in values.values():
        counts[value] = counts.get(value, 0) + 1
    common = max(counts, key=counts.get)
    others = [f"{name}: {value}" for name, value in values.items() if value != common]
    return common + (f" ({', '.join(others)})" if others else "")


def model_flags() -> List[Flag]:
    archs = plugin_archs()
    flags = []
    for action in model_actions():
        store_true = isinstance(action, argparse._StoreTrueAction)
        name = action.option_strings[-1]
        if action.choices:
            name += " {" + ",".join(str(c) for c in action.choices) + "}"
        elif not store_true:
            name += " " + (action.metavar or action.dest.upper())
        default = _per_arch(action.dest, archs, store_true)
        flags.append(Flag("model", name, default, " ".join((action.help or "").split())))
    return flags


def generation_flags() -> List[Flag]:
    from fairseq.dataclass.configs import CommonConfig, GenerationConfig

    fields = {}
    for config in (GenerationConfig, CommonConfig):
        for f in dataclasses.fields(config):
            fields.setdefault(f.name, f)
    flags = []
    for name, meaning in GENERATION_MEANING.items():
        f = fields[name]  # a KeyError here: fairseq renamed a flag the plugin reads
        default = f.default
        shown = ("off" if not default else "on") if isinstance(default, bool) else _show(default)
        flag = "--" + name.replace("_", "-") + ("" if isinstance(default, bool) else " N")
        fairseq_help = f.metadata.get("help", "").rstrip(".")
        flags.append(Flag("generation", flag, shown, f"{meaning} (fairseq: {fairseq_help})"))
    return flags


def arch_flags() -> List[Flag]:
    """For each architecture, the settings that differ from fairseq's ``transformer``."""
    from fairseq.models import ARCH_CONFIG_REGISTRY
    from fairseq.models.transformer.transformer_legacy import base_architecture

    reference = argparse.Namespace()
    base_architecture(reference)
    own = {action.dest for action in model_actions()}  # listed under "model"
    flags = []
    for name, args in plugin_archs().items():
        changed = [
            f"{key}={_show(value)}"
            for key, value in sorted(vars(args).items())
            if key not in own and getattr(reference, key, object()) != value
        ]
        doc = " ".join((ARCH_CONFIG_REGISTRY[name].__doc__ or "").split())
        flags.append(Flag("arch", f"--arch {name}", "", f"{doc} {', '.join(changed)}".strip()))
    return flags


def all_flags(wheres=WHERES) -> List[Flag]:
    builders = {
        "task": task_flags,
        "model": model_flags,
        "criterion": criterion_flags,
        "generation": generation_flags,
        "arch": arch_flags,
    }
    flags = []
    for where in wheres:
        flags += builders[where]()
    return flags


HEADINGS = {
    "task": "task cmlm (--task cmlm; fairseq's translation-task flags apply too)",
    "model": "model cmlm_plugin_transformer (defaults set by each --arch)",
    "criterion": "criterion cmlm_plugin_loss (--criterion cmlm_plugin_loss)",
    "generation": "fairseq generation flags the plugin gives meaning to "
    "(fairseq-generate / -interactive)",
    "arch": "architectures (what each sets differently from fairseq's transformer)",
}


def as_text(flags: List[Flag], width: int = 100) -> str:
    lines, where = [], None
    for flag in flags:
        if flag.where != where:
            where = flag.where
            lines += ([""] if lines else []) + [HEADINGS[where]]
        head = f"  {flag.flag}" + (f"  (default: {flag.default})" if flag.default else "")
        lines.append(head)
        lines += textwrap.wrap(  # never inside a word: "log-probability" stays whole
            flag.help,
            width,
            initial_indent="      ",
            subsequent_indent="      ",
            break_on_hyphens=False,
        )
    return "\n".join(lines)


def as_markdown(flags: List[Flag]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    rows = ["| flag | default | where | help |", "| --- | --- | --- | --- |"]
    for flag in flags:
        rows.append(
            f"| `{cell(flag.flag)}` | {cell(flag.default)} | {flag.where} | {cell(flag.help)} |"
        )
    return "\n".join(rows)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="cmlm-flags", description=__doc__.strip().splitlines()[0].split(": ", 1)[1]
    )
    parser.add_argument("--markdown", action="store_true", help="print one Markdown table")
    parser.add_argument(
        "--where",
        choices=WHERES,
        action="append",
        help="only these groups (repeatable; default: all)",
    )
    args = parser.parse_args(argv)
    import cmlm_plugin  # noqa: F401  (registers the task, model, archs and criterion)

    flags = all_flags(args.where or WHERES)
    print(as_markdown(flags) if args.markdown else as_text(flags))


if __name__ == "__main__":
    main()
