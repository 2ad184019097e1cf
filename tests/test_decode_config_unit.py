"""Unit tests: the decoding-configuration language (``cmlm_plugin/cli/decode_config.py``).

The canonical form parses back to the same configuration; known configurations give the
fairseq-generate flags the tools passed before the language existed; every bad
configuration is refused in one line naming the bad key and the allowed ones.
"""

import argparse

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cmlm_plugin.cli import decode_config as dc
from cmlm_plugin.errors import CMLMPluginError

counts = st.integers(1, 10_000)
maybe = lambda strategy: st.none() | strategy  # noqa: E731


@st.composite
def configs(draw):
    impl = draw(st.sampled_from(dc.IMPLS))
    beams = draw(counts)
    prior = draw(st.just(0.0) | st.floats(0, 100))
    shift = draw(st.just(0) | st.integers(-50, 50))
    pll = draw(st.just(0) | counts)
    collapse = draw(st.booleans())
    if draw(st.booleans()):  # Mask-Predict
        return dc.DecodeConfig(passes=draw(counts), length_beams=beams, impl=impl,
                               prune_after=draw(maybe(counts)),
                               stop_unchanged=draw(st.booleans()), length_prior=prior,
                               length_shift=shift, pll_groups=pll, collapse_repeats=collapse,
                               blank_penalty=draw(st.just(0.0) | st.floats(0, 100)),
                               adaptive_passes=draw(maybe(st.integers(0, 20))),
                               regions=draw(counts),
                               update_observed=draw(st.booleans()))  # fmt: skip
    threshold = draw(maybe(st.floats(0, 1, exclude_min=True)))
    return dc.DecodeConfig(steps=draw(counts), length_beams=beams, impl=impl, length_prior=prior,
                           length_shift=shift, pll_groups=pll, collapse_repeats=collapse,
                           block_length=draw(maybe(counts)), threshold=threshold)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(configs())
def test_the_canonical_form_parses_back_to_the_same_config(config):
    text = str(config)
    assert dc.parse(text) == config
    assert str(dc.parse(text)) == text


@settings(max_examples=100, deadline=None)
@given(configs(), st.randoms())
def test_the_order_of_the_items_does_not_matter(config, random):
    items = str(config).split(",")
    random.shuffle(items)
    assert dc.parse(",".join(items)) == config


def flags(text):
    return dc.parse(text).flags()


def test_mask_predict_flags():
    assert flags("T=10,l=5") == ["--iter-decode-max-iter", "10", "--iter-decode-with-beam", "5"]
    assert flags("T=4") == ["--iter-decode-max-iter", "4", "--iter-decode-with-beam", "1"]
    assert flags("T=10,l=5,prune=1,stop,impl=int8")[4:] == [
        "--length-prune-after", "1", "--length-prune-keep", "1",
        "--stop-unchanged", "--decoder-impl", "int8",
    ]  # fmt: skip
    assert flags("T=10,l=5,lp=0.5")[4:] == ["--length-prior-weight", "0.5"]
    assert flags("S=4,lp=1")[-2:] == ["--length-prior-weight", "1.0"]
    assert not dc.parse("T=10,l=5,lp=0.5").fairseq_comparable
    assert dc.parse("T=10,lp=0") == dc.parse("T=10")  # weight 0 is the paper's rule
    assert flags("T=10,l=5,shift=1")[4:] == ["--length-shift", "1"]
    assert flags("T=10,l=5,shift=-2")[4:] == ["--length-shift", "-2"]
    assert str(dc.parse("T=10,l=5,shift=+1")) == "T=10,l=5,shift=1"
    assert not dc.parse("T=10,l=5,shift=1").fairseq_comparable
    assert dc.parse("T=10,shift=0") == dc.parse("T=10")  # no shift: the paper's candidates
    assert flags("T=10,l=5,pll=2")[4:] == ["--pll-rerank", "2"]
    assert flags("S=8,l=3,pll=3")[-2:] == ["--pll-rerank", "3"]
    assert not dc.parse("T=10,l=5,pll=2").fairseq_comparable
    assert flags("T=10,l=5,pll=2,collapse")[4:] == ["--pll-rerank", "2", "--collapse-repeats"]
    assert flags("S=8,collapse")[-1:] == ["--collapse-repeats"]
    assert flags("T=1,l=1,blank=1.5")[4:] == ["--ctc-blank-penalty", "1.5"]
    assert dc.parse("T=1,blank=0") == dc.parse("T=1")  # no penalty: the plain best path
    assert not dc.parse("T=1,blank=1").fairseq_comparable
    assert flags("T=10,ap=0,regions=3")[4:] == ["--adaptive-passes", "0", "--remask-regions", "3"]
    assert dc.parse("T=10,regions=1") == dc.parse("T=10")  # one region is the global rule
    assert not dc.parse("T=10,ap=1").plain
    assert flags("T=10,l=5,observed,pll=2")[4:] == ["--update-observed", "--pll-rerank", "2"]
    assert not dc.parse("T=10,observed").fairseq_comparable


def test_diffusion_flags():
    assert flags("S=10,b=4,c=0.9") == [
        "--decoding", "diffusion", "--diffusion-steps", "10", "--iter-decode-with-beam", "1",
        "--block-length", "4", "--confidence-threshold", "0.9",
    ]  # fmt: skip
    assert flags("S=256,impl=modules")[-2:] == ["--decoder-impl", "modules"]


def test_fairseq_gets_one_pass_less_and_only_t_and_l():
    config = dc.parse("T=10,l=5,impl=int8")
    assert config.fairseq_comparable and not config.plain
    assert config.fairseq_flags() == [
        "--iter-decode-max-iter", "9", "--iter-decode-with-beam", "5",
    ]  # fmt: skip
    assert dc.parse("S=10,l=2").baseline() == dc.parse("T=10,l=2")
    for text in ("T=10,prune=1", "T=10,stop", "T=10,collapse", "S=10"):
        assert not dc.parse(text).fairseq_comparable
        with pytest.raises(CMLMPluginError, match="fairseq's generator runs only"):
            dc.parse(text).fairseq_flags()


def test_canonical_form_and_defaults():
    assert str(dc.parse("l=5,T=10")) == "T=10,l=5"
    assert str(dc.parse(" S=10 , c=1 ")) == "S=10,l=1,c=1.0"
    assert dc.parse("T=4,impl=fast") == dc.parse("T=4") == dc.DecodeConfig(passes=4)
    assert dc.grid([1, 4], [1, 5]) == [dc.parse(t) for t in ("T=1", "T=1,l=5", "T=4", "T=4,l=5")]


@pytest.mark.parametrize(
    "text, problem",
    [
        ("T=10,x=3", "unknown key 'x'"),
        ("T=10,L=5", "unknown key 'L'"),
        ("10x5p1:int8", "unknown key '10x5p1:int8' (the compact TxL form is gone: write e.g. T=10"),
        ("", "an empty item"),
        ("T=1,,l=2", "an empty item"),
        ("T=1,T=2", "key 'T' given twice"),
        ("l=5", "exactly one of T= (Mask-Predict) or S= (diffusion)"),
        ("T=1,S=2", "exactly one of T="),
        ("T", "key 'T' needs a value"),
        ("T=4,stop=1", "stop takes no value"),
        ("T=4,collapse=1", "collapse takes no value"),
        ("T=4,observed=1", "observed takes no value"),
        ("S=4,observed", "key 'observed' applies only to T= (Mask-Predict)"),
        ("T=0", "T=0 needs a whole number >= 1"),
        ("T=-1", "T=-1 needs a whole number"),
        ("T=2.5", "T=2.5 needs a whole number"),
        ("S=3,prune=1", "key 'prune' applies only to T= (Mask-Predict)"),
        ("S=3,stop", "key 'stop' applies only to T="),
        ("T=2,b=4", "key 'b' applies only to S= (diffusion)"),
        ("S=2,c=0", "c=0 needs a number in (0, 1]"),
        ("S=2,c=nan", "c=nan needs a number"),
        ("S=2,c=high", "c=high needs a number"),
        ("T=1,impl=gpu", "impl=gpu is not one of fast, int8, compiled, modules"),
        ("T=1,lp=-1", "lp=-1 needs a number >= 0"),
        ("T=1,lp=inf", "lp=inf needs a number >= 0"),
        ("T=1,lp=x", "lp=x needs a number >= 0"),
        ("T=1,shift=1.5", "shift=1.5 needs a whole number (may be negative)"),
        ("T=1,blank=-1", "blank=-1 needs a number >= 0"),
        ("S=2,blank=1", "key 'blank' applies only to T= (Mask-Predict)"),
        ("T=1,shift=", "shift= needs a whole number"),
        ("T=1,ap=-1", "ap=-1 needs a whole number >= 0"),
        ("T=1,regions=0", "regions=0 needs a whole number >= 1"),
        ("T=1,pll=0", "pll=0 needs a whole number >= 1"),
        ("T=1,pll=-2", "pll=-2 needs a whole number"),
        ("S=2,ap=1", "key 'ap' applies only to T= (Mask-Predict)"),
    ],
)
def test_bad_configs_name_the_bad_key_and_the_allowed_ones(text, problem):
    with pytest.raises(CMLMPluginError) as caught:
        dc.parse(text)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"bad decoding config {text!r}: ")
    assert problem in message
    assert (
        "allowed: T=N or S=N, l=N, b=N, c=X, prune=N, stop, ap=C, regions=K, observed, lp=W, "
        "shift=K, pll=G, collapse, blank=P, impl=fast|int8|compiled|modules" in message
    )


def test_argparse_type_reports_a_usage_error():
    parser = argparse.ArgumentParser()
    parser.add_argument("--configs", nargs="+", type=dc.argument)
    assert parser.parse_args(["--configs", "T=1", "S=4,b=2"]).configs == [
        dc.parse("T=1"), dc.parse("S=4,b=2"),
    ]  # fmt: skip
    with pytest.raises(SystemExit):
        parser.parse_args(["--configs", "10x5"])


def test_cmlm_table_takes_configs_and_its_grid_in_the_one_language():
    from cmlm_plugin.cli import table

    def cells(*flags):
        args = table.build_parser().parse_args(["DATA", "--cmlm", "x.pt", *flags])
        args.configs = table.configs(args)
        return [(c["kind"], c["config"]) for c in table.cells(args)]

    assert len(cells()) == 16 and cells()[:2] == [("cmlm", "T=1,l=1"), ("cmlm", "T=1,l=2")]
    assert cells("--iters", "4", "--length-beams", "5", "--configs", "S=4", "T=4,l=5") == [
        ("cmlm", "T=4,l=5"), ("cmlm", "S=4,l=1"),
    ]  # fmt: skip
    # fairseq's generator: the T and l of the configurations it can run, once each
    both = cells("--fairseq-cmlm", "y.pt", "--configs", "T=10,l=5,impl=int8", "T=10,l=5", "S=4")
    assert both == [
        ("cmlm", "T=10,l=5,impl=int8"), ("cmlm", "T=10,l=5"), ("cmlm", "S=4,l=1"),
        ("fairseq-cmlm", "T=10,l=5"),
    ]  # fmt: skip


def test_cmlm_table_shows_the_config_of_cells_beyond_t_and_l():
    from cmlm_plugin.cli import table

    row = dict(kind="cmlm", label="ours", T=10, l=5, config="T=10,l=5", plain=True,
               sacrebleu=20.0, sentences_per_s=5.0, tokens_per_s=60.0, passes=9.8,
               with_mask_or_unk=0, sentences=10, brevity_penalty=1.0, length_exact=0.5,
               length_within_2=1.0, length_error_mean=0.0)  # fmt: skip
    assert "config" not in table.markdown([row], "wmt14-en-de", tokenized=False)
    pruned = {**row, "config": "T=10,l=5,prune=1", "plain": False}
    lines = table.markdown([row, pruned], "wmt14-en-de", tokenized=False).splitlines()
    assert "| config |" in lines[0]
    assert lines[2].endswith("| 27.03 |") and "| T=10,l=5 |" in lines[2]
    assert lines[3].endswith("| - |") and "| T=10,l=5,prune=1 |" in lines[3]  # not the paper's
