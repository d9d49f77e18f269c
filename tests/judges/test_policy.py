"""Error policies: what each reward does with a failed judge verdict (docs/methods/*.md#decisions)."""

from __future__ import annotations

import pytest

from agentrag_verl.judges.client import Verdict
from agentrag_verl.judges.parsers import ReferencePlan, SearchP1Evaluation
from agentrag_verl.judges.policy import (
    OUTCOME_ONLY_EVALUATION,
    HipragErrorPolicy,
    hiprag_step_optimal,
    multistage_is_correct,
    reasonrag_node_value,
    searchp1_evaluation_or_fallback,
    searchp1_plan_or_none,
)

FAILED = Verdict(None, None, False, "timeout", "no reply")


@pytest.mark.parametrize(
    ("detector", "judged", "optimal"),
    [
        ("over_search", True, False),  # Figure 5: equivalent re-answer => the search was redundant
        ("over_search", False, True),
        ("under_search", True, True),  # Figure 6: a correct non-search step is fine
        ("under_search", False, False),  # an incorrect one is an under-search
    ],
)
def test_hiprag_verdicts_map_to_step_optimality(detector, judged, optimal):
    for policy in HipragErrorPolicy:  # the policy only matters for failures
        assert hiprag_step_optimal(Verdict(judged, "", True), detector, policy) is optimal


@pytest.mark.parametrize(("policy", "expected"), [("exclude", None), ("optimal", True), ("suboptimal", False)])
def test_hiprag_failed_verdicts_follow_the_policy(policy, expected):
    assert hiprag_step_optimal(FAILED, "over_search", policy) is expected
    assert hiprag_step_optimal(FAILED, "under_search", HipragErrorPolicy(policy)) is expected


def test_policy_errors_name_the_choices():
    with pytest.raises(ValueError, match=r"'exclude', 'optimal', 'suboptimal'"):
        hiprag_step_optimal(FAILED, "over_search", "ignore")
    with pytest.raises(ValueError, match="over_search"):
        hiprag_step_optimal(FAILED, "oversearch")


def test_multistage_correctness_falls_back_to_a_string_metric():
    assert multistage_is_correct(Verdict(False, "NO", True), "Paris", ["Paris"]) is False  # the judge wins
    assert multistage_is_correct(FAILED, "Paris", ["paris"]) is True  # exact match after normalization
    assert multistage_is_correct(FAILED, "Paris, France", ["paris"]) is False
    assert multistage_is_correct(FAILED, "Paris, France", ["paris"], "cover_exact_match") is True
    assert multistage_is_correct(FAILED, "Paris", ["paris"], "incorrect") is False
    assert multistage_is_correct(Verdict(True, "YES", True), None, ["paris"]) is False  # no answer extracted


def test_reasonrag_fallback_defers_to_rollouts_or_zero():
    assert reasonrag_node_value(Verdict(0.88, "", True)) == 0.88
    assert reasonrag_node_value(FAILED) is None
    assert reasonrag_node_value(FAILED, "zero") == 0.0


def test_searchp1_fallbacks_give_no_path_credit():
    sheet = SearchP1Evaluation(1.0, 3, 2, 2, 1.0, 1.0)
    assert searchp1_evaluation_or_fallback(Verdict(sheet, "", True)) is sheet
    fallback = searchp1_evaluation_or_fallback(FAILED)
    assert fallback is OUTCOME_ONLY_EVALUATION
    # Eq. 6/7 numerators and Eq. 8 soft scores are all zero
    assert fallback.effective_steps_self == fallback.effective_steps_ref == 0
    assert fallback.outcome_accuracy_score == fallback.outcome_reasoning_score == 0.0
    plan = ReferencePlan(("q",), "p")
    assert searchp1_plan_or_none(Verdict(plan, "", True)) is plan and searchp1_plan_or_none(FAILED) is None
