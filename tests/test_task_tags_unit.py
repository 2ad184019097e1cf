"""Unit and component tests of task tags (cmlm_plugin/task_tags.py) on a tiny dictionary.

Hand-built sources: which sentences count as tagged, where ``--target-tag`` goes, the
errors naming the known tags, the tag kept whole by the task's BPE, and a
``LanguagePairDataset`` tagged in place (sizes and batches follow).
"""

import numpy as np
import pytest
import torch
from fairseq.data import Dictionary, LanguagePairDataset
from hypothesis import given, settings
from hypothesis import strategies as st

from cmlm_plugin.errors import CMLMPluginError
from cmlm_plugin.generation.templates import TemplateBPE
from cmlm_plugin.task_tags import (
    TaskTags,
    is_tag,
    split_tag,
    tag_language_pair,
    tag_raw_sources,
)

WORDS = ["a1", "a2", "a3", "b1", "b2"]


def dictionary(tags=("<2de>", "<2fr>")):
    d = Dictionary()
    for symbol in [*WORDS, *tags, "<mask>"]:
        d.add_symbol(symbol)
    return d


def line(d, text):
    return d.encode_line(text, add_if_not_exist=False, append_eos=True).long()


def test_tag_symbols():
    assert is_tag("<2de>") and is_tag("<2summary>")
    assert not is_tag("<mask>") and not is_tag("<2 de>") and not is_tag("2de") and not is_tag("<2>")
    d = dictionary()
    assert TaskTags(d).names == ["<2de>", "<2fr>"]
    assert TaskTags(d).ids == {"<2de>": d.index("<2de>"), "<2fr>": d.index("<2fr>")}
    assert TaskTags(dictionary(tags=())).names == [] and not TaskTags(dictionary(tags=()))


@pytest.mark.parametrize(
    "text, tag, rest",
    [
        ("<2de> A man .", "<2de>", "A man ."),
        ("  <2fr>A man", "<2fr>", "A man"),
        ("<2fr>", "<2fr>", ""),
        ("A man <2de> .", None, "A man <2de> ."),
        ("<mask> man", None, "<mask> man"),
    ],
)
def test_split_tag(text, tag, rest):
    assert split_tag(text) == (tag, rest)


def test_unknown_tags_name_the_known_ones():
    d = dictionary()
    assert TaskTags(d).index("<2fr>") == d.index("<2fr>")
    with pytest.raises(
        CMLMPluginError, match=r"unknown task tag '<2es>': this model knows <2de>, <2fr>"
    ):
        TaskTags(d).index("<2es>")
    with pytest.raises(CMLMPluginError, match="has no task tags"):
        TaskTags(dictionary(tags=())).index("<2de>")


def test_raw_sources_get_the_target_tag_where_they_have_none():
    d = dictionary()
    sources = [line(d, "<2fr> a1 a2"), line(d, "a3"), line(d, ""), line(d, "<2de> b1")]
    out = tag_raw_sources(sources, TaskTags(d), "<2de>", first_line=0)
    assert [d.string(s) for s in out] == ["<2fr> a1 a2", "<2de> a3", "", "<2de> b1"]
    assert out[2].tolist() == [d.eos()]  # the empty line stays empty
    with pytest.raises(
        CMLMPluginError,
        match=r"input line 11 starts with no task tag.*<2de>, <2fr>",
    ):
        tag_raw_sources(sources, TaskTags(d), None, first_line=10)
    tagged = [sources[0], sources[3]]
    assert tag_raw_sources(tagged, TaskTags(d), None, 0) is tagged  # nothing to do
    plain = dictionary(tags=())
    untouched = [line(plain, "a1 a2")]
    assert tag_raw_sources(untouched, TaskTags(plain), None, 0) is untouched  # single-task


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from(WORDS + ["<2de>", "<2fr>"]), max_size=5), max_size=8))
def test_every_source_starts_with_one_tag(lines):
    d = dictionary()
    sources = [line(d, " ".join(words)) for words in lines]
    out = tag_raw_sources(sources, TaskTags(d), "<2fr>", first_line=0)
    assert len(out) == len(sources)
    tag_ids = {d.index("<2de>"), d.index("<2fr>")}
    for before, after in zip(sources, out):
        if before.numel() == 1:
            assert after.tolist() == [d.eos()]
            continue
        assert int(after[0]) in tag_ids
        grew = int(before[0]) not in tag_ids
        assert after.numel() == before.numel() + grew
        assert after[grew:].tolist() == before.tolist()


def test_template_bpe_keeps_the_tag_whole():
    d = dictionary()
    bpe = TemplateBPE(None, d, TaskTags(d))
    assert bpe.encode("<2fr> a1 a2") == "<2fr> a1 a2"
    assert bpe.encode("<2de> a1 <mask:2> b1") == "<2de> a1 <mask> <mask> b1"
    assert bpe.encode("a1 a2") == "a1 a2"
    with pytest.raises(CMLMPluginError, match="unknown task tag '<2es>'"):
        bpe.encode("<2es> a1")


def test_language_pair_tagged_in_place():
    d = dictionary()
    src = [line(d, "<2fr> a1 a2"), line(d, "a3 a1 a2 a1"), line(d, "b1")]
    tgt = [line(d, "b1"), line(d, "b2 b1"), line(d, "b2")]
    sizes = np.array([s.numel() for s in src])
    dataset = LanguagePairDataset(src, sizes, d, tgt, np.array([t.numel() for t in tgt]), d)
    with pytest.raises(CMLMPluginError, match="split test: 2 of 3 source sentences"):
        tag_language_pair(dataset, "test", TaskTags(d), None)
    tag_language_pair(dataset, "test", TaskTags(d), "<2de>")
    assert [d.string(dataset[i]["source"]) for i in range(3)] == [
        "<2fr> a1 a2", "<2de> a3 a1 a2 a1", "<2de> b1"
    ]  # fmt: skip
    assert dataset.src_sizes.tolist() == [4, 6, 3]
    assert dataset.sizes[:, 0].tolist() == [4, 6, 3] and dataset.sizes[:, 1].tolist() == [2, 3, 2]
    batch = dataset.collater([dataset[i] for i in range(3)])
    assert batch["net_input"]["src_lengths"].tolist() == [6, 4, 3]  # sorted, tags counted
    assert TaskTags(d).untagged([int(dataset[i]["source"][0]) for i in range(3)]).sum() == 0
