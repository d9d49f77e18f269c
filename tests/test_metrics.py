"""Answer metrics (docs/decisions.md#answer-metrics): SQuAD/FlashRAG normalization, EM, cover EM, F1 with the yes/no
rule."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrag_verl.metrics import cover_exact_match, exact_match, extract_answer, f1_score, normalize_answer


@pytest.mark.parametrize(
    ("text", "punct", "expected"),
    [
        ("The Quick, Brown Fox!", "delete", "quick brown fox"),
        ("  an apple a  day\n", "delete", "apple day"),
        ("Theatre Anthem", "delete", "theatre anthem"),  # articles only as whole words
        ("U.S.A.", "delete", "usa"),
        ("U.S.-born", "space", "u s born"),  # HiPRAG's variant keeps token boundaries
        ("U.S.A.", "space", "u s"),  # ...and the freed "a" is then removed as an article
        ("Rock-'n'-roll", "space", "rock n roll"),
        ("Åsvik ÉCOLE", "delete", "åsvik école"),  # unicode letters lowercase and survive
        ("“Rouge”", "delete", "“rouge”"),  # only ASCII punctuation is removed (string.punctuation)
        ("", "delete", ""),
        ("the a an", "delete", ""),
    ],
)
def test_normalize_answer(text, punct, expected):
    assert normalize_answer(text, punct=punct) == expected


def test_normalize_answer_rejects_unknown_mode():
    with pytest.raises(ValueError, match="delete"):
        normalize_answer("x", punct="drop")


@pytest.mark.parametrize(
    ("pred", "golds", "expected"),
    [
        ("The Eiffel Tower", ["Eiffel Tower"], 1.0),
        ("eiffel tower.", "Eiffel Tower", 1.0),  # a single gold string
        ("Eiffel", ["Eiffel Tower"], 0.0),
        ("Lyon", ["Paris", "lyon"], 1.0),  # any of several golds
        ("Paris France", ["Paris"], 0.0),
        (None, ["Paris"], 0.0),  # no extracted answer
        ("Paris", [], 0.0),
        ("Åsvik", ["asvik", "ÅSVIK"], 1.0),
    ],
)
def test_exact_match(pred, golds, expected):
    assert exact_match(pred, golds) == expected


@pytest.mark.parametrize(
    ("pred", "golds", "expected"),
    [
        ("The answer is Paris, France.", ["Paris"], 1.0),
        ("The answer is Paris, France.", ["paris, france"], 1.0),  # punctuation deleted on both sides
        ("Paris", ["Paris, France"], 0.0),  # the gold must be inside the prediction, not the reverse
        ("parisian food", ["Paris"], 1.0),  # character substring, as FlashRAG's acc
        ("Lyon", ["Paris", "Marseille"], 0.0),
        (None, ["Paris"], 0.0),
        ("anything", ["", "the"], 0.0),  # golds normalizing to "" are ignored
    ],
)
def test_cover_exact_match(pred, golds, expected):
    assert cover_exact_match(pred, golds) == expected


@pytest.mark.parametrize(
    ("pred", "golds", "expected"),
    [
        ("Barack Obama", ["Obama"], 2 / 3),  # precision 1/2, recall 1 -> 2*0.5*1/1.5
        ("Obama", ["Barack Obama"], 2 / 3),
        ("the Barack Obama", ["Barack Obama"], 1.0),  # articles removed before tokenizing
        ("Obama", ["Lincoln", "Barack Obama"], 2 / 3),  # max over golds
        ("x b b c", ["b b d"], 4 / 7),  # multiset overlap 2: p=2/4, r=2/3 -> 2*(1/2)(2/3)/(7/6)
        ("yes", ["yes"], 1.0),
        ("yes it is", ["yes"], 0.0),  # gold is special and differs -> 0 (FlashRAG rule)
        ("no", ["no way"], 0.0),  # prediction is special and differs -> 0
        ("noanswer", ["no answer"], 0.0),
        ("Paris", ["Lyon"], 0.0),
        (None, ["Paris"], 0.0),
        ("", ["Paris"], 0.0),
    ],
)
def test_f1_score(pred, golds, expected):
    assert f1_score(pred, golds) == pytest.approx(expected)


def test_golds_as_numpy_array():
    """verl hands reward_model.ground_truth.target over as a numpy array of strings."""
    golds = np.array(["Gustave Eiffel", "Eiffel"])
    assert exact_match("eiffel", golds) == 1.0
    assert cover_exact_match("by Gustave Eiffel", golds) == 1.0
    assert f1_score("Gustave", golds) == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>x</think><answer> Paris </answer>", "Paris"),
        ("<answer>Lyon</answer> then <answer>Paris</answer>", "Paris"),  # the last span wins
        ("<answer>multi\nline</answer>", "multi\nline"),
        ("<answer></answer>", ""),
        ("no tags here", None),
        ("<answer>unclosed", None),
        ("", None),
        (None, None),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)


@given(texts)
def test_normalize_is_idempotent(s):
    once = normalize_answer(s)
    assert normalize_answer(once) == once


@given(texts, st.lists(texts, min_size=1, max_size=3))
def test_metric_ordering(pred, golds):
    """EM implies F1 = 1 and CEM = 1 whenever the matching gold is non-empty; all metrics lie in [0, 1]."""
    em, cem, f1 = exact_match(pred, golds), cover_exact_match(pred, golds), f1_score(pred, golds)
    assert all(0.0 <= m <= 1.0 for m in (em, cem, f1))
    if em and normalize_answer(pred):
        assert cem == 1.0
        assert f1 == pytest.approx(1.0)
