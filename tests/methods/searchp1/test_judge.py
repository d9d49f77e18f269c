"""Search-P1's judges (Figures 8-9): prompts, the JSON evaluation and planner parsers, requests, fallbacks."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrag_verl.judges.client import JudgeRequest, Verdict
from agentrag_verl.judges.parsers import ParseError
from agentrag_verl.methods.searchp1 import judge
from agentrag_verl.methods.searchp1.judge import (
    OUTCOME_ACCURACY_SCORES,
    OUTCOME_ONLY_EVALUATION,
    OUTCOME_REASONING_SCORES,
    PLANNER_SCORES,
    ReferencePlan,
    SearchP1Evaluation,
    evaluation_or_fallback,
    parse_evaluation,
    parse_planner,
    plan_or_none,
)

FAILED = Verdict(None, None, False, "timeout", "no reply")


# ----------------------------------------------------------------------------------------------- prompts


def test_evaluation_messages_fill_every_figure_9_slot():
    (message,) = judge.evaluation_messages(
        "Who died later?",
        ["Domenico Paolella", "Paolella"],
        "First find both directors, then compare death dates.",
        ["director of Il Coraggio", "death date of Domenico Paolella"],
        "<reasoning>plan</reasoning><tool_call>director of Il Coraggio</tool_call>",
    )
    text = message["content"]
    assert "Question: Who died later?\n" in text
    assert "Correct Answer: Domenico Paolella | Paolella\n" in text
    assert "Reference Planner: First find both directors, then compare death dates.\n" in text
    assert "Reference Path: 1. director of Il Coraggio\n2. death date of Domenico Paolella\n" in text
    assert "Model Trajectory: <reasoning>plan</reasoning><tool_call>director of Il Coraggio</tool_call>\n" in text
    assert "{" not in text  # every slot filled


def test_planner_messages():
    (message,) = judge.planner_messages("Who wrote Hamlet?", ["William Shakespeare"])
    assert "Current Question: Who wrote Hamlet?\nCorrect Answer: William Shakespeare\n" in message["content"]
    assert message["content"].endswith("</optimized_planner>")


@pytest.mark.parametrize(
    ("request_", "parser"),
    [
        (judge.evaluation_request("q", ["g"], "p", ["r"], "t"), parse_evaluation),
        (judge.planner_request("q", ["g"]), parse_planner),
    ],
)
def test_requests_pair_each_prompt_with_its_parser(request_, parser):
    assert isinstance(request_, JudgeRequest)
    assert request_.parser is parser
    assert all(set(m) == {"role", "content"} for m in request_.messages)


# ----------------------------------------------------------------------------------------------- evaluation (Figure 9)

GOOD_SHEET = {
    "planner_score": 1.0,
    "model_plan_steps": 3,
    "effective_steps_self": 2,
    "effective_steps_ref": 2,
    "outcome_accuracy_score": 0.5,
    "outcome_reasoning_score": 0.8,
}
GOOD_EVALUATION = SearchP1Evaluation(1.0, 3, 2, 2, 0.5, 0.8)
GOOD_JSON = json.dumps(GOOD_SHEET)


@pytest.mark.parametrize(
    "reply",
    [
        GOOD_JSON,
        f"Here is my evaluation:\n```json\n{GOOD_JSON}\n```\nThe agent followed its plan.",
        f"Evaluation: {GOOD_JSON} -- end",
        GOOD_JSON.replace('"', "'"),  # single quotes
        GOOD_JSON.replace("}", ",}"),  # trailing comma
        GOOD_JSON.replace('"planner_score"', "planner_score"),  # unquoted key
        GOOD_JSON.replace(', "model_plan_steps"', ', // three planned steps\n "model_plan_steps"'),  # comment
        GOOD_JSON.replace('"', "\u201c", 1).replace('"', "\u201d", 1),  # smart quotes on the first key
        GOOD_JSON.replace("1.0", '"1.0"'),  # numeric string
        GOOD_JSON.replace("3", "3.0"),  # integral float step count
        GOOD_JSON[:-1],  # truncated: the closing brace is missing
        GOOD_JSON.replace("}", ', "explanation": "The {plan} was fine, it\'s ok"}'),  # extra field with braces
        json.dumps(
            {
                "planner_score": 1.0,
                "model_plan_steps": 3,
                "eff_steps_self": 2,  # Algorithm 3's spellings
                "eff_steps_ref": 2,
                "acc_score": 0.5,
                "reason_score": 0.8,
            }
        ),
        f"<think>Let me count the steps.</think>{GOOD_JSON}",
    ],
)
def test_evaluation_repairs_common_defects(reply):
    assert parse_evaluation(reply) == GOOD_EVALUATION


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"planner_score": 0.9}, "planner_score"),  # not in {0.2, 0.6, 1.0, 1.2}
        ({"outcome_accuracy_score": 0.7}, "outcome_accuracy_score"),  # not in {0, 0.5, 1}
        ({"outcome_reasoning_score": 0.9}, "outcome_reasoning_score"),  # not in {0, 0.5, 0.8, 1}
        ({"model_plan_steps": -1}, "model_plan_steps"),
        ({"effective_steps_self": 1.5}, "effective_steps_self"),
        ({"effective_steps_ref": True}, "effective_steps_ref"),
        ({"planner_score": "good"}, "planner_score"),
        ({"planner_score": None}, "planner_score"),
    ],
)
def test_evaluation_validates_value_sets(change, message):
    with pytest.raises(ParseError, match=message):
        parse_evaluation(json.dumps({**GOOD_SHEET, **change}))


@pytest.mark.parametrize("missing", sorted(GOOD_SHEET))
def test_evaluation_requires_every_figure_9_field(missing):
    sheet = {k: v for k, v in GOOD_SHEET.items() if k != missing}
    with pytest.raises(ParseError, match=missing):
        parse_evaluation(json.dumps(sheet))


@pytest.mark.parametrize(
    "reply", ["no json here", "[1, 2, 3]", '{"planner_score": }', "{planner_score 1.0 model_plan_steps 3}", ""]
)
def test_evaluation_rejects_unrepairable_replies(reply):
    with pytest.raises(ParseError):
        parse_evaluation(reply)


@given(
    st.sampled_from(PLANNER_SCORES),
    st.integers(0, 9),
    st.integers(0, 9),
    st.integers(0, 9),
    st.sampled_from(OUTCOME_ACCURACY_SCORES),
    st.sampled_from(OUTCOME_REASONING_SCORES),
    st.sampled_from(["plain", "fence", "trailing_comma", "single_quotes", "prose"]),
)
def test_evaluation_round_trips_every_valid_sheet(planner, n_plan, n_self, n_ref, acc, reason, defect):
    expected = SearchP1Evaluation(planner, n_plan, n_self, n_ref, acc, reason)
    text = json.dumps(
        {
            "planner_score": planner,
            "model_plan_steps": n_plan,
            "effective_steps_self": n_self,
            "effective_steps_ref": n_ref,
            "outcome_accuracy_score": acc,
            "outcome_reasoning_score": reason,
        }
    )
    text = {
        "plain": text,
        "fence": f"```json\n{text}\n```",
        "trailing_comma": text[:-1] + ",}",
        "single_quotes": text.replace('"', "'"),
        "prose": f"My verdict follows. {text} Thanks.",
    }[defect]
    assert parse_evaluation(text) == expected


# ----------------------------------------------------------------------------------------------- planner (Figure 8)

PLANNER_REPLY = """<correct_reasoning_path>
1. Il Coraggio director
2) Shark Monroe director
- death dates of Domenico Paolella and William S. Hart
</correct_reasoning_path>
<optimized_planner>
To solve this, first search for the directors of both films, then compare their death dates.
</optimized_planner>"""


def test_planner_reads_the_figure_8_format():
    plan = parse_planner(PLANNER_REPLY)
    assert plan == ReferencePlan(
        reasoning_path=(
            "Il Coraggio director",
            "Shark Monroe director",
            "death dates of Domenico Paolella and William S. Hart",
        ),
        planner="To solve this, first search for the directors of both films, then compare their death dates.",
    )


def test_planner_tolerates_a_truncated_final_tag():
    plan = parse_planner(PLANNER_REPLY.replace("\n</optimized_planner>", ""))
    assert plan.planner.startswith("To solve this")
    assert len(plan.reasoning_path) == 3


@pytest.mark.parametrize(
    "reply",
    [
        "<optimized_planner>Search twice.</optimized_planner>",  # no path
        "<correct_reasoning_path>1. q</correct_reasoning_path>",  # no planner
        "<correct_reasoning_path>\n1.\n</correct_reasoning_path><optimized_planner>x</optimized_planner>",
        "<correct_reasoning_path>1. q</correct_reasoning_path><optimized_planner> </optimized_planner>",
    ],
)
def test_planner_rejects_incomplete_replies(reply):
    with pytest.raises(ParseError):
        parse_planner(reply)


# ----------------------------------------------------------------------------------------------- fallbacks


def test_fallbacks_give_no_path_credit():
    sheet = SearchP1Evaluation(1.0, 3, 2, 2, 1.0, 1.0)
    assert evaluation_or_fallback(Verdict(sheet, "", True)) is sheet
    fallback = evaluation_or_fallback(FAILED)
    assert fallback is OUTCOME_ONLY_EVALUATION
    # Eq. 6/7 numerators and Eq. 8 soft scores are all zero
    assert fallback.effective_steps_self == fallback.effective_steps_ref == 0
    assert fallback.outcome_accuracy_score == fallback.outcome_reasoning_score == 0.0
    plan = ReferencePlan(("q",), "p")
    assert plan_or_none(Verdict(plan, "", True)) is plan and plan_or_none(FAILED) is None
