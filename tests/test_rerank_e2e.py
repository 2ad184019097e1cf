"""End-to-end: ``fairseq-generate --rerank-with AR_CKPT`` on the shared tiny run.

A tiny autoregressive ``transformer`` (``--task translation``, so its dictionary lacks
the ``<mask>`` of ``--task cmlm``) is trained a few updates with fairseq-train on the
same binarized toy data; it rescores the l length candidates of the tiny CMLM.
"""

import pytest
from cli import hypotheses, run
from conftest import N_TEST

AR = [
    "--task", "translation", "--arch", "transformer", "--encoder-layers", 1,
    "--decoder-layers", 1, "--encoder-embed-dim", 16, "--decoder-embed-dim", 16,
    "--encoder-ffn-embed-dim", 16, "--decoder-ffn-embed-dim", 16,
    "--encoder-attention-heads", 2, "--decoder-attention-heads", 2, "--share-all-embeddings",
    "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", 1000, "--max-update", 5,
    "--cpu", "--no-epoch-checkpoints", "--no-save-optimizer-state", "--seed", 2,
]  # fmt: skip


@pytest.fixture(scope="module")
def reranker(tiny_run, tmp_path_factory):
    save = tmp_path_factory.mktemp("ar")
    run("fairseq-train", tiny_run / "bin", *AR, "--save-dir", save)
    return save / "checkpoint_last.pt"


def generate(tiny_run, *extra):
    return run(
        "fairseq-generate", tiny_run / "bin", "--user-dir", "cmlm_plugin", "--task", "cmlm",
        "--path", tiny_run / "ckpt" / "checkpoint_last.pt", "--gen-subset", "test", "--cpu",
        "--batch-size", 8, "--iter-decode-max-iter", 3, "--iter-decode-with-beam", 3, *extra,
    )  # fmt: skip


def test_reranked_decoding_gives_every_sentence_an_output(tiny_run, reranker):
    plain = generate(tiny_run)
    reranked = generate(tiny_run, "--rerank-with", reranker)
    mixed = generate(tiny_run, "--rerank-with", reranker, "--rerank-weight", 0.5)
    for out in (plain, reranked, mixed):
        hypos = hypotheses(out)
        assert sorted(hypos) == list(range(N_TEST))
        assert all(h.strip() and "<mask>" not in h for h in hypos.values())
        assert "BLEU" in out and "sentences/s" in out
