"""The multi-stage paper's correctness judge (B.4): prompt, YES/NO parser, request, string-metric fallback."""

from __future__ import annotations

import pytest

from agentrag_verl.judges.client import JudgeRequest, Verdict
from agentrag_verl.judges.parsers import ParseError
from agentrag_verl.methods.multistage import judge
from agentrag_verl.methods.multistage.judge import is_correct, parse_yes_no

FAILED = Verdict(None, None, False, "timeout", "no reply")


def test_messages_normalize_prediction_and_references():
    (message,) = judge.correctness_messages("The Eiffel Tower!", ("Eiffel Tower", "La Tour Eiffel"))
    assert message["role"] == "user"
    assert "Prediction: eiffel tower\n" in message["content"]
    assert "Reference Answers: eiffel tower | la tour eiffel\n" in message["content"]
    (raw,) = judge.correctness_messages("The Eiffel Tower!", "Eiffel Tower", normalize=False)
    assert "Prediction: The Eiffel Tower!\nReference Answers: Eiffel Tower\n" in raw["content"]


def test_request_pairs_the_prompt_with_its_parser():
    request = judge.correctness_request("p", ["g"])
    assert isinstance(request, JudgeRequest) and request.parser is parse_yes_no
    assert all(set(m) == {"role", "content"} for m in request.messages)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("YES", True),
        ("NO", False),
        ("yes", True),
        ("No.", False),
        ("**YES**", True),
        ("Yes, both name the same city.", True),
        ("Verdict: NO", False),
        ("\u2192 YES", True),
        ("<think>It could be yes, or no.</think>\nNO", False),
    ],
)
def test_yes_no_accepts_single_word_verdicts(reply, expected):
    assert parse_yes_no(reply) is expected


@pytest.mark.parametrize("reply", ["", "maybe", "I cannot tell.", "The answer could be YES or NO.", "Yesterday"])
def test_yes_no_rejects_unsettled_replies(reply):
    with pytest.raises(ParseError):
        parse_yes_no(reply)


def test_correctness_falls_back_to_a_string_metric():
    assert is_correct(Verdict(False, "NO", True), "Paris", ["Paris"]) is False  # the judge wins
    assert is_correct(FAILED, "Paris", ["paris"]) is True  # exact match after normalization
    assert is_correct(FAILED, "Paris, France", ["paris"]) is False
    assert is_correct(FAILED, "Paris, France", ["paris"], "cover_exact_match") is True
    assert is_correct(FAILED, "Paris", ["paris"], "incorrect") is False
    assert is_correct(Verdict(True, "YES", True), None, ["paris"]) is False  # no answer extracted


def test_unknown_fallback_names_the_choices_and_the_key():
    with pytest.raises(ValueError, match=r"'exact_match', 'cover_exact_match', 'incorrect'.*judge_fallback"):
        is_correct(FAILED, "Paris", ["paris"], "guess")
