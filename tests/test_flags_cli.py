"""``cmlm-flags`` lists every flag the plugin defines, with its default and help text.

The expected flags are derived here from the same definitions fairseq parses (the task
and criterion dataclasses, the model's ``add_args``), not from a list, so a flag added
to the plugin and missing from the listing fails this test.
"""

import argparse
import contextlib
import dataclasses
import enum
import inspect
import io
import re

import pytest
from cli import run


def flag_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def shown_default(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, enum.Enum):
        return str(value.value)
    return str(value)


def plugin_fields():
    """``(where, field)`` for every field the task and criterion dataclasses define."""
    from fairseq.tasks.translation import TranslationConfig

    from cmlm_plugin.criterions.cmlm_loss import CMLMLossConfig
    from cmlm_plugin.tasks.cmlm_config import CMLMConfig

    inherited = {f.name for f in dataclasses.fields(TranslationConfig)}
    task = [f for f in dataclasses.fields(CMLMConfig) if f.name not in inherited]
    criterion = [f for f in dataclasses.fields(CMLMLossConfig) if not f.name.startswith("_")]
    assert task and criterion
    return [("task", f) for f in task] + [("criterion", f) for f in criterion]


def model_dests():
    from fairseq.models.transformer import TransformerModel

    from cmlm_plugin.models.cmlm_transformer import CMLMPluginModel

    fairseq_parser, ours = argparse.ArgumentParser(), argparse.ArgumentParser()
    TransformerModel.add_args(fairseq_parser)
    CMLMPluginModel.add_args(ours)
    known = {a.dest for a in fairseq_parser._actions}
    return [a for a in ours._actions if a.dest not in known]


@pytest.fixture(scope="module")
def text():
    return run("cmlm-flags", stdout_only=True)


def flags_main(*argv) -> str:
    """``cmlm-flags`` in this process (the console command itself runs once, in ``text``)."""
    from cmlm_plugin.cli import flags

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        flags.main(list(argv))
    return out.getvalue()


@pytest.fixture(scope="module")
def markdown():
    return flags_main("--markdown")


def flag_line(output: str, flag: str) -> str:
    lines = [line for line in output.splitlines() if re.match(rf"^  {flag}(?=[ ]|$)", line)]
    assert len(lines) == 1, f"{flag} listed {len(lines)} times"
    return lines[0]


def test_every_dataclass_field_is_listed_with_its_default(text):
    for _, f in plugin_fields():
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        line = flag_line(text, flag_name(f.name))
        assert line.endswith(f"(default: {shown_default(default)})"), line


def test_help_text_is_the_definitions(text):
    flat = " ".join(text.split())
    for _, f in plugin_fields():
        assert " ".join(f.metadata["help"].split()) in flat, f.name
    for action in model_dests():
        assert " ".join(action.help.split()) in flat, action.dest
    # a known flag, spelled out: the criterion's label smoothing
    assert "label smoothing eps for the masked-token loss (paper: 0.1)" in flat


def test_model_flags_show_each_architectures_default(text):
    from cmlm_plugin.models.cmlm_transformer import cmlm_plugin_base, cmlm_plugin_tiny

    base, tiny = argparse.Namespace(), argparse.Namespace()
    cmlm_plugin_base(base)
    cmlm_plugin_tiny(tiny)
    actions = model_dests()
    assert {"length_classes", "length_offset", "no_bert_init"} <= {a.dest for a in actions}
    for action in actions:
        line = flag_line(text, action.option_strings[-1])
        assert "(default: " in line, line
    line = flag_line(text, "--length-classes")
    assert f"(default: {base.length_classes} (cmlm_plugin_tiny: {tiny.length_classes}))" in line


def test_groups_and_generation_flags(text):
    from fairseq.dataclass.configs import CommonConfig, GenerationConfig

    from cmlm_plugin.cli.flags import GENERATION_MEANING
    from cmlm_plugin.tasks import cmlm_task

    headings = [line for line in text.splitlines() if line and not line.startswith(" ")]
    assert [h.split()[0] for h in headings] == [
        "task",
        "model",
        "criterion",
        "fairseq",
        "architectures",
    ]
    fairseq_fields = {
        f.name: f for c in (GenerationConfig, CommonConfig) for f in dataclasses.fields(c)
    }
    # every fairseq flag the generator reads is listed, with fairseq's default
    source = inspect.getsource(inspect.getmodule(cmlm_task.build_generator))
    read = set(re.findall(r'getattr\(args, "(\w+)"', source))
    assert read and read <= set(GENERATION_MEANING), read - set(GENERATION_MEANING)
    for name in ["iter_decode_max_iter", "iter_decode_with_beam", "iter_decode_force_max_iter",
                 "retain_iter_history", "print_step"]:  # fmt: skip
        line = flag_line(text, flag_name(name))
        assert line.endswith(f"(default: {shown_default(fairseq_fields[name].default)})"), line


def test_markdown_table_has_a_row_per_flag(markdown):
    rows = [line for line in markdown.splitlines() if line.startswith("| `--")]
    cells = {}
    for row in rows:
        flag, default, where = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:4]]
        cells[flag.strip("`").split(" ")[0]] = (default, where)
    for where, f in plugin_fields():
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        assert cells[flag_name(f.name)] == (shown_default(default), where), f.name
    for action in model_dests():
        assert cells[action.option_strings[-1]][1] == "model"
    assert markdown.splitlines()[0] == "| flag | default | where | help |"


def test_where_selects_groups():
    out = flags_main("--where", "criterion")
    assert out.splitlines()[0].startswith("criterion cmlm_plugin_loss")
    assert "--label-smoothing" in out and "--remask-schedule" not in out
