"""Unit tests of ``update_observed`` (CMLMC's decoding) in the Mask-Predict loop.

The paper keeps a token, and its probability, until the token is re-masked; with
``update_observed`` every pass after the first replaces every generated token by the
pass's prediction, so the output is the last pass's argmax at every position, while the
given tokens of a template still never change.
"""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_decoding_unit import MASK, PAD, FakeModel
from test_mask_predict_variants import SharperLater

from cmlm_decoding import MaskPredictOptions, mask_predict


def decode(model, lengths, passes, **options):
    options = MaskPredictOptions(num_passes=passes, retain_history=True, **options)
    return mask_predict(model, lengths, MASK, PAD, options)


def changed_unmasked(model, result):
    """Positions whose token changed in a pass that did not re-mask them, over all passes."""
    found = False
    for (given_tokens, rows), before, after in zip(
        model.calls[1:], result.history[:-1], result.history[1:]
    ):
        assert rows is None  # force_max_iter keeps every row in every pass
        kept = given_tokens.ne(MASK) & given_tokens.ne(PAD)  # N x L
        found |= bool((kept & before.ne(after)).any())
    return found


def test_the_paper_changes_a_token_only_when_it_is_re_masked():
    lengths = torch.tensor([12, 9, 5])
    model = FakeModel(3, 12, seed=3)
    result = decode(model, lengths, 6, force_max_iter=True)
    assert not changed_unmasked(model, result)


def test_update_observed_also_changes_unmasked_tokens_and_scores_the_last_pass():
    lengths = torch.tensor([12, 9, 5])
    model = FakeModel(3, 12, seed=3)
    result = decode(model, lengths, 6, force_max_iter=True, update_observed=True)
    assert changed_unmasked(model, result)  # the fixture does exercise the difference
    # every generated token and its log-probability are the last pass's
    last_input, _ = model.calls[-1]
    logprobs = model(last_input, None)  # N x L x V, the same deterministic step
    best_lp, best = logprobs.max(dim=-1)  # N x L each
    generated = result.tokens.ne(PAD)
    assert torch.equal(result.tokens[generated], best[generated])
    assert torch.allclose(result.token_logprobs[generated], best_lp[generated])


def test_update_observed_keeps_the_given_tokens_of_a_template():
    lengths = torch.tensor([8, 6])
    template = torch.full((2, 8), MASK)
    template[1, 6:] = PAD
    template[0, [0, 3]] = torch.tensor([5, 7])
    template[1, 2] = 9
    model = FakeModel(2, 8, seed=11)
    result = mask_predict(
        model, lengths, MASK, PAD, MaskPredictOptions(num_passes=5, update_observed=True), template
    )
    assert result.tokens[0, 0] == 5 and result.tokens[0, 3] == 7 and result.tokens[1, 2] == 9
    for tokens, _ in model.calls:
        assert tokens[0, 0] == 5 and tokens[0, 3] == 7  # given tokens are never re-masked


def test_with_monotone_a_kept_token_is_never_re_masked_yet_may_change():
    """``monotone`` restricts which positions are re-masked; ``update_observed`` still
    re-predicts the others, so a kept token can change value without being re-masked."""
    lengths = torch.tensor([12, 9])
    model = SharperLater(2, 12, seed=5)
    result = decode(model, lengths, 6, force_max_iter=True, monotone=True, update_observed=True)
    fixed = torch.zeros(2, 12, dtype=torch.bool)  # N x L, kept in some earlier pass
    for tokens, _ in model.calls[1:]:
        assert not (tokens.eq(MASK) & fixed).any()
        fixed |= tokens.ne(MASK) & tokens.ne(PAD)
    assert changed_unmasked(model, result)


def test_a_row_with_nothing_to_re_mask_still_makes_its_passes():
    lengths = torch.tensor([1, 6])  # a one-token row re-masks 0 tokens in every pass
    paper = decode(FakeModel(2, 6, seed=2), lengths, 4)
    observed = decode(FakeModel(2, 6, seed=2), lengths, 4, update_observed=True)
    assert paper.steps.tolist()[0] == 1
    assert observed.steps.tolist() == [4, 4]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 10), min_size=1, max_size=4),
    st.integers(1, 8),
    st.integers(0, 1000),
    st.sampled_from(["max_prob", "consistency", "geometric_mean"]),
)
def test_a_model_blind_to_its_input_decodes_the_same_either_way(lengths, passes, seed, conf):
    """Without context each position's prediction never changes, so re-predicting the
    kept tokens changes nothing: the variant differs from the paper only through context."""
    lengths = torch.tensor(lengths)
    model = FakeModel(len(lengths), 10, seed=seed)
    model.mix.zero_()  # the step ignores its input tokens
    paper = decode(model, lengths, passes, confidence=conf, force_max_iter=True)
    observed = decode(
        model, lengths, passes, confidence=conf, force_max_iter=True, update_observed=True
    )
    assert torch.equal(paper.tokens, observed.tokens)
    assert torch.allclose(paper.scores, observed.scores)
