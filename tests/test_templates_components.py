"""Component: infilling template encoding on hand-built inputs.

``<mask>``, ``<mask:N>``, text glued to a mask, templates without ``<mask>`` and the task's
warning, with a sentencepiece stand-in (the real model: ``test_infill_sentencepiece_e2e.py``).
"""

import pytest
import torch
from fairseq.data import Dictionary
from fairseq.token_generation_constraints import pack_constraints

from cmlm_plugin.errors import CMLMPluginError
from cmlm_plugin.generation.templates import (
    WORD_START,
    TemplateBPE,
    encode_template,
    unmasked_templates,
)
from cmlm_plugin.symbols import MASK_SYMBOL


def word_pieces(text: str) -> str:
    """A sentencepiece stand-in: every word one word-initial piece, "." its own word."""
    return " ".join(WORD_START + word for word in text.split())


@pytest.fixture
def dictionary():
    d = Dictionary()
    for symbol in ["▁Ein", "▁Mann", "▁Fahrrad", "▁.", ".", MASK_SYMBOL]:
        d.add_symbol(symbol)
    return d


@pytest.fixture
def spm(dictionary):
    """Templates as the sentencepiece stand-in encodes them."""
    return lambda text: encode_template(text, word_pieces, dictionary, sentencepiece=True)


def test_a_mask_is_one_piece_and_takes_no_space_piece(spm):
    assert spm("Ein Mann <mask> <mask> Fahrrad .") == "▁Ein ▁Mann <mask> <mask> ▁Fahrrad ▁."
    assert spm("Ein Mann <mask:2> Fahrrad .") == spm("Ein Mann <mask> <mask> Fahrrad .")
    assert spm("<mask:3>") == "<mask> <mask> <mask>"
    assert spm("  <mask>   Fahrrad ") == "<mask> ▁Fahrrad"
    assert spm("Ein Mann Fahrrad .") == word_pieces("Ein Mann Fahrrad .")  # no markup


def test_text_glued_to_a_mask_continues_its_word(spm, dictionary):
    assert spm("Ein <mask>.") == "▁Ein <mask> ."  # "." is in the dictionary
    assert spm("Ein <mask>Fahrrad") == "▁Ein <mask> ▁Fahrrad"  # "Fahrrad" is not
    assert spm("Ein<mask> .") == "▁Ein <mask> ▁."  # glued on its left: the mask continues
    # without sentencepiece, pieces carry no word-start mark to drop
    assert encode_template("a <mask>.", str, dictionary) == "a <mask> ."


def test_span_counts_are_checked(dictionary):
    for bad in ("<mask:0>", "<mask:4097>"):
        with pytest.raises(CMLMPluginError, match=r"write <mask:N> with 1 <= N <= 4096"):
            encode_template(f"Ein {bad} .", word_pieces, dictionary, sentencepiece=True)
    assert MASK_SYMBOL not in encode_template("Ein <mask", word_pieces, dictionary, True)
    assert encode_template("Ein <mask:x> .", str, dictionary) == "Ein <mask:x> ."  # text


def test_template_bpe_without_bpe_changes_only_markup(dictionary):
    bpe = TemplateBPE(None, dictionary)
    assert not bpe.sentencepiece
    assert bpe.encode("a1\ta2  <mask>") == "a1 a2 <mask>"  # the same tokens
    assert bpe.encode("w1 <mask:2> w2") == "w1 <mask> <mask> w2"
    assert bpe.encode("w1  w2") == "w1  w2" and bpe.decode("w1 w2") == "w1 w2"
    with pytest.raises(AttributeError):
        bpe.is_beginning_of_word("w1")


def test_unmasked_templates_are_found(dictionary):
    mask, ein = dictionary.index(MASK_SYMBOL), dictionary.index("▁Ein")
    packed = pack_constraints(
        [
            [torch.tensor([ein, mask])],
            [torch.tensor([ein, ein]), torch.tensor([mask])],  # a second constraint: ignored
            [],  # no template
            [torch.tensor([mask])],
        ]
    )
    assert unmasked_templates(packed, mask) == [(1, [ein, ein])]


def test_the_task_warns_once_per_unmasked_template(tmp_path, capsys):
    from tinymodel import setup, write_dictionaries

    task, _, _ = setup(write_dictionaries(tmp_path))
    d, mask = task.tgt_dict, task.mask_idx
    sources = [d.encode_line(line, add_if_not_exist=False).long() for line in ["w1", "w2", "w3"]]
    templates = [[torch.tensor([d.index("w4"), mask])], [torch.tensor([d.index("w5")] * 7)], []]
    task.build_dataset_for_inference(sources, [3, 3, 3])  # lines 0-2, no templates
    task.build_dataset_for_inference(sources, [3, 3, 3], constraints=pack_constraints(templates))
    warnings = capsys.readouterr().err.strip().split("\n")
    assert warnings == [
        "cmlm_plugin warning: input line 4: the infilling template (w5 w5 w5 w5 w5 …) has no "
        "<mask>, so nothing is generated and its output is the template as given (score 0); "
        "write each piece to generate as <mask> (or <mask:N> for N pieces)"
    ]
