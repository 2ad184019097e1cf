"""Infilling / editing from Python through fairseq's hub interface.

    from cmlm_plugin.generation.infill import infill
    hub = CMLMPluginModel.from_pretrained(...)
    infill(hub, ["A man rides a bike ."], ["Ein Mann <mask> <mask> Fahrrad ."])

A template is a target sentence in which every ``<mask>`` is one target piece
(one subword unit after BPE) to generate and ``<mask:N>`` is N of them; every other
piece is kept as given. The text between masks goes through the hub's tokenizer and
BPE on its own (``templates.encode_template``), so under sentencepiece no ``▁`` piece is
fixed in front of a mask and a masked position may start a word. The same templates
work on the command line: ``fairseq-interactive ... --constraints`` reads
``source<TAB>template`` and encodes it the same way (the task's ``TemplateBPE``).
"""

import copy
from typing import List

import torch
from fairseq.token_generation_constraints import pack_constraints

from ..errors import CMLMPluginError
from .templates import encode_template, is_sentencepiece


def infill(hub, sources: List[str], templates: List[str], **generation) -> List[str]:
    """Translate each source so that the output follows its template.

    Args:
        hub: a ``GeneratorHubInterface`` of a cmlm_plugin model (``from_pretrained``).
        sources: source sentences, raw text.
        templates: one template per source: target text with ``<mask>`` tokens.
        generation: generation options (``iter_decode_max_iter=10``, ...).

    Returns:
        The completed target sentences, detokenized, in input order.
    """
    if len(sources) != len(templates):
        raise CMLMPluginError(
            f"{len(sources)} sources but {len(templates)} templates: give one each"
        )
    task, models = hub.task, hub.models
    tgt_dict = task.target_dictionary
    source_tokens = [hub.encode(s) for s in sources]
    sentencepiece = is_sentencepiece(hub.bpe)

    def pieces(text: str) -> str:
        return hub.apply_bpe(hub.tokenize(text))

    packed = pack_constraints(
        [
            [tgt_dict.encode_line(encode_template(t, pieces, tgt_dict, sentencepiece),
                                  append_eos=False, add_if_not_exist=False).long()]  # fmt: skip
            for t in templates
        ]
    )
    dataset = task.build_dataset_for_inference(
        source_tokens, [t.numel() for t in source_tokens], constraints=packed
    )
    sample = dataset.collater([dataset[i] for i in range(len(dataset))])
    device = next(models[0].parameters()).device
    sample = {
        key: (value.to(device) if torch.is_tensor(value) else value)
        for key, value in sample.items()
    }
    sample["net_input"] = {k: v.to(device) for k, v in sample["net_input"].items()}
    args = copy.deepcopy(hub.cfg.generation)
    for key, value in generation.items():
        setattr(args, key, value)
    generator = task.build_generator(models, args)
    hypos = task.inference_step(generator, models, sample, constraints=sample["constraints"])
    outputs = [""] * len(sources)
    for i, sentence_id in enumerate(sample["id"].tolist()):
        outputs[sentence_id] = hub.decode(hypos[i][0]["tokens"])
    return outputs
