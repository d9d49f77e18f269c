"""The template helpers every judge prompt uses, and the request type pairing messages with a parser (the papers'
prompts are tested with their method: ``tests/methods/<paper>/test_judge.py``)."""

from __future__ import annotations

import pytest

from agentrag_verl.judges import prompts
from agentrag_verl.judges.client import JudgeRequest


def parse_reply(text: str) -> str:
    return text


def test_template_slots_in_order_of_appearance():
    assert prompts.template_slots("Q: {question}\nA: {golden_answers} ({question})") == [
        "question",
        "golden_answers",
        "question",
    ]
    assert prompts.template_slots("no slots") == []


def test_format_answers_joins_and_optionally_normalizes():
    assert prompts.format_answers("Paris") == "Paris"
    assert prompts.format_answers(["The Eiffel Tower!", "La Tour Eiffel"]) == "The Eiffel Tower! | La Tour Eiffel"
    assert prompts.format_answers(("The Eiffel Tower!",), normalize=True) == "eiffel tower"


def test_system_user_messages():
    assert prompts.system_user("sys", "usr") == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "usr"},
    ]


def test_judge_request_validates_its_fields():
    with pytest.raises(ValueError, match="non-empty"):
        JudgeRequest([], parse_reply)
    with pytest.raises(ValueError, match="role"):
        JudgeRequest([{"content": "x"}], parse_reply)
    with pytest.raises(ValueError, match="callable"):
        JudgeRequest([{"role": "user", "content": "x"}], "parse_yes_no")
    with pytest.raises(ValueError, match="model"):
        JudgeRequest([{"role": "user", "content": "x"}], parse_reply, {"model": "other"})
