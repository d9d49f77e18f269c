"""Reading a judge failure-policy option (the papers' policies are tested with their method:
``tests/methods/<paper>/test_judge.py``)."""

from __future__ import annotations

import enum

import pytest

from agentrag_verl.judges.policy import choose_policy


class Fallback(str, enum.Enum):
    EXACT_MATCH = "exact_match"
    INCORRECT = "incorrect"


def test_choose_policy_reads_values_and_passes_members_through():
    assert choose_policy(Fallback, "incorrect", "reward.reward_kwargs.judge_fallback") is Fallback.INCORRECT
    assert choose_policy(Fallback, Fallback.EXACT_MATCH, "reward.reward_kwargs.judge_fallback") is Fallback.EXACT_MATCH


def test_unknown_policy_names_the_choices_and_the_key():
    choices = r"'guess'.*\['exact_match', 'incorrect'\].*reward.reward_kwargs.judge_fallback"
    with pytest.raises(ValueError, match=choices):
        choose_policy(Fallback, "guess", "reward.reward_kwargs.judge_fallback")
