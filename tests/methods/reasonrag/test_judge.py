"""ReasonRAG's process evaluation (Figure 14): prompt, score parser, request, fallback to SPRE rollouts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrag_verl.judges.client import JudgeRequest, Verdict
from agentrag_verl.judges.parsers import ParseError
from agentrag_verl.methods.reasonrag import judge
from agentrag_verl.methods.reasonrag.judge import node_value, parse_score

FAILED = Verdict(None, None, False, "timeout", "no reply")


def test_messages_follow_the_papers_judge_cases():
    messages = judge.process_score_messages(
        "Which film has the director died later, Il Coraggio or Shark Monroe?",
        ["Il Coraggio"],
        "So the next query is <query>Who directed Il Coraggio?</query>",
    )
    assert messages[0]["content"] == judge.PROCESS_SYSTEM
    assert messages[1]["content"].splitlines() == [
        "Question: Which film has the director died later, Il Coraggio or Shark Monroe?",
        "Golden Answers: Il Coraggio",
        "Agent Thoughts: So the next query is <query>Who directed Il Coraggio?</query>",
    ]


def test_request_pairs_the_prompt_with_its_parser():
    request = judge.process_score_request("q", ["g"], "t")
    assert isinstance(request, JudgeRequest) and request.parser is parse_score
    assert all(set(m) == {"role", "content"} for m in request.messages)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Flaws: none. So the score is 0.35", 0.35),
        ("So the score is 15.", 0.15),  # ReasonRAG Figure 8's judge answers on 0-100
        ("So the score is **88**.", 0.88),  # ReasonRAG Figure 10
        ("So the score is [0.7]", 0.7),
        ("so the score is 1", 1.0),
        ("So the score is 0", 0.0),
        ("So the score is 100", 1.0),
        ("So the score is 85%", 0.85),
        ("So the score is 7/10", 0.7),
        ("So the score is .5", 0.5),
        ("The score is: 0.6", 0.6),
        ("First guess: the score is 0.9. On reflection, so the score is 0.4.", 0.4),  # the last one concludes
    ],
)
def test_score_reads_the_figure_14_conclusion(reply, expected):
    assert parse_score(reply) == pytest.approx(expected)


@pytest.mark.parametrize(
    "reply",
    ["So the score is [Score].", "Harsh but fair.", "So the score is 150", "So the score is -0.2", "score: 0.5", ""],
)
def test_score_rejects_missing_or_out_of_range_scores(reply):
    with pytest.raises(ParseError):
        parse_score(reply)


@given(st.integers(min_value=0, max_value=100))
def test_score_unit_interval_values_round_trip(hundredths):
    value = hundredths / 100
    assert parse_score(f"Some critique.\nSo the score is {value}.") == pytest.approx(value)


@given(st.integers(min_value=2, max_value=100))
def test_score_integers_above_one_are_percent(score):
    assert parse_score(f"So the score is {score}") == pytest.approx(score / 100)


def test_fallback_defers_to_rollouts_or_zero():
    assert node_value(Verdict(0.88, "", True)) == 0.88
    assert node_value(FAILED) is None
    assert node_value(FAILED, "zero") == 0.0
