"""Each manager selected the way a recipe selects it, loaded by verl's loader, fed by verl's agent-loop postprocess,
with judges on the fake OpenAI server over HTTP."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from agentrag_verl.formats import get_format

from .conftest import extra_fields, np_column

HIPRAG_OK = (
    "<think><step><reasoning>Need the capital.</reasoning><search>capital of France</search>"
    "<context>Doc 1(Title: Paris) Paris is the capital of France.</context>"
    "<conclusion>REDUNDANT Paris is the capital of France</conclusion></step>"
    "<step><reasoning>WRONG guess about the river</reasoning><conclusion>The Seine runs there</conclusion></step>"
    "<step><reasoning>Combine</reasoning><conclusion>The answer is Paris</conclusion></step>"
    "</think><answer>Paris</answer>"
)


def judge_reply(request: dict) -> str:
    """Scripted judge: over-search True iff the statement says REDUNDANT; under-search False iff reasoning WRONG;
    multi-stage YES iff the prediction mentions paris; Search-P1 a fixed score sheet."""
    text = " ".join(str(m.get("content", "")) for m in request["messages"])
    if "Statement 1:" in text:
        return "<answer>True</answer>" if "REDUNDANT" in text else "<answer>False</answer>"
    if "<reasoning>" in text and "<conclusion>" in text and "planner_score" not in text:
        return "<answer>False</answer>" if "WRONG" in text else "<answer>True</answer>"
    if "planner_score" in text:
        return json.dumps(
            {
                "planner_score": 1.0,
                "model_plan_steps": 2,
                "effective_steps_self": 1,
                "effective_steps_ref": 1,
                "outcome_accuracy_score": 0.5,
                "outcome_reasoning_score": 0.5,
            }
        )
    match = re.search(r"Prediction: (.*)", text)
    return "YES" if match and "paris" in match.group(1).lower() else "NO"


@pytest.fixture(scope="module")
def judge_server():
    from agentrag_verl.testing import FakeOpenAIServer

    with FakeOpenAIServer(replies=judge_reply) as server:
        yield server


def judge_overrides(server, prefix: str = "judge") -> list[str]:
    return [
        f"+reward.reward_kwargs.{prefix}.base_url={server.base_url}",
        f"+reward.reward_kwargs.{prefix}.model=fake-model",
        f"+reward.reward_kwargs.{prefix}.api_key_env=null",
        f"+reward.reward_kwargs.{prefix}.max_retries=0",
    ]


def by_name(name: str) -> list[str]:
    """Recipe selection through the verl.plugins registration (source=register)."""
    return [f"reward.reward_manager.name={name}"]


def by_path(method: str, cls: str) -> list[str]:
    """Recipe selection by path (source=importlib, pkg://), no plugin needed."""
    return [
        "reward.reward_manager.source=importlib",
        f"reward.reward_manager.module.path=pkg://agentrag_verl.methods.{method}.manager",
        f"reward.reward_manager.name={cls}",
    ]


def test_hiprag_format_fixture_is_valid():
    assert get_format("hiprag").check_format(HIPRAG_OK) == (1, 3)


async def test_hiprag_manager_with_judges_and_reanswers(make_scorer, judge_server):
    scorer = make_scorer(by_name("hiprag") + judge_overrides(judge_server))
    from agentrag_verl.methods.hiprag.manager import HipragRewardManager

    assert type(scorer.manager) is HipragRewardManager
    reanswer = [{"step": 0, "query": "capital of France", "text": "Paris"}]
    batch, results = await scorer.score(
        [
            {"response": HIPRAG_OK, "golds": ["Paris"], "fields": extra_fields(format="hiprag", reanswers=reanswer)},
            {"response": HIPRAG_OK, "golds": ["Paris"], "fields": None},  # single-turn loop: no re-answers
            {"response": HIPRAG_OK.replace("<answer>Paris", "<answer>Lyon"), "golds": ["Paris"]},
            {"response": "garbage <answer>Paris</answer>", "golds": ["Paris"]},
        ]
    )
    # 1: step 1 over-search (REDUNDANT), step 2 under-search (WRONG), step 3 optimal -> 1 + 0.4 * 1/3
    score, info = results[0]
    assert score == pytest.approx(1 + 0.4 / 3)
    assert (info["hiprag_over_search"], info["hiprag_under_search"], info["hiprag_optimal"]) == (1, 1, 1)
    # 2: no re-answer -> the search step is a failure, excluded (policy exclude): 1 optimal of 2 judged
    score, info = results[1]
    assert info["hiprag_missing_reanswers"] == 1 and info["hiprag_judged"] == 2
    assert score == pytest.approx(1 + 0.4 * 1 / 2)
    # 3: wrong answer, valid format -> λf only, no judge calls ; 4: invalid format, correct -> 0.8
    assert results[2][0] == pytest.approx(0.2) and results[2][1]["judge_requests"] == 0
    assert results[3][0] == pytest.approx(0.8)
    assert np_column(batch, "acc").tolist() == [1.0, 1.0, 0.0, 1.0]
    metrics = scorer.manager.judge_metrics()
    assert metrics["judge/over_search_judge/requests"] >= 1


async def test_searchr1_manager_by_path(make_scorer):
    scorer = make_scorer(by_path("searchr1", "SearchR1RewardManager"))
    good = (
        "<think>t</think><search>q</search><information>Doc <answer>Lyon</answer></information>"
        "<think>t</think><answer>Paris</answer>"
    )
    only_observed = "<think>x</think><search>q</search><information><answer>Paris</answer></information>"
    _, results = await scorer.score(
        [
            {"response": good, "golds": ["Paris"]},
            {"response": only_observed, "golds": ["Paris"]},
        ]
    )
    assert results[0][0] == 1.0
    # an answer inside an observation never counts: no model answer -> EM 0, invalid format -> 0
    assert results[1][0] == 0.0 and results[1][1]["em"] == 0.0


async def test_multistage_manager_judge_and_step_threshold(make_scorer, judge_server):
    overrides = by_name("multistage") + judge_overrides(judge_server) + ["+reward.reward_kwargs.stage_switch_step=5"]
    scorer = make_scorer(overrides)
    one_search = (
        "<think>t</think><search>Eiffel Tower city</search><information>d</information>"
        "<reflect>r</reflect><answer>Paris</answer>"
    )
    _, early = await scorer.score([{"response": one_search, "golds": ["Paris"]}], global_steps=1)
    _, late = await scorer.score([{"response": one_search, "golds": ["Paris"]}], global_steps=5)
    # stage 1 correct: 1 + r_s 0 (concise) + r_f 1 = 2 ; stage 2 correct, RC 1: (1 - 0.3) + 0 + 1 = 1.7
    assert early[0][1]["ms_stage"] == 1 and early[0][0] == pytest.approx(2.0)
    assert late[0][1]["ms_stage"] == 2 and late[0][0] == pytest.approx(1.7)
    assert late[0][1]["judge_requests"] == 1


async def test_searchp1_manager_with_planner_cache(make_scorer, judge_server, tmp_path):
    cache = tmp_path / "plans.jsonl"
    cache.write_text(json.dumps({"id": "7", "planner": "1. find city", "reasoning_path": ["q1", "q2"]}) + "\n")
    scorer = make_scorer(
        by_name("searchp1") + judge_overrides(judge_server) + [f"+reward.reward_kwargs.planner_cache={cache}"]
    )
    resp = (
        "<reasoning>plan: find city</reasoning><tool_call>city of tower</tool_call>"
        "<tool_response>d</tool_response><reasoning>ok</reasoning><answer>Lyon</answer>"
    )
    _, results = await scorer.score([{"response": resp, "golds": ["Paris"], "id": 7}])
    score, info = results[0]
    # S_self = 1.0*(1/2)*(1/1) = 0.5 ; S_ref = (1/2)*(1/1) = 0.5 ; outcome 0.8*0.5+0.2*0.5 = 0.5 (wrong answer)
    # R = 0.3*0.5 + 0.6*0.5 + 0.1*1.0 = 0.55
    assert info["sp1_missing_plan"] == 0.0 and info["sp1_path"] == pytest.approx(0.5)
    assert score == pytest.approx(0.55)


async def test_autosearch_manager_per_step_placement(make_scorer):
    scorer = make_scorer(by_name("autosearch"))
    resp = (
        "<think>a</think><search>first query</search><information>d</information>"
        "<think>b</think><search>another topic</search><information>d</information>"
        "<think>c</think><answer>Paris</answer>"
    )
    fields = extra_fields(
        steps=[
            {"kind": "search", "query": "first query", "doc_ids": [], "end_token_index": 3, "retriever_error": None},
            {"kind": "search", "query": "another topic", "doc_ids": [], "end_token_index": 9, "retriever_error": None},
            {"kind": "answer", "query": None, "doc_ids": [], "end_token_index": 14, "retriever_error": None},
        ],
        intermediate_answers=[{"step": 0, "text": "", "answer": "Lyon"}, {"step": 1, "text": "", "answer": "Paris"}],
    )
    _, results = await scorer.score([{"response": resp, "golds": ["Paris"], "fields": fields}])
    score, info = results[0]
    placement = json.loads(info["_agentrag_token_rewards"])
    # t_c = 2: eff 0.4/2 - 0.05 = 0.15 both; quality 0, 1 ; answer 0.1 + 1
    assert [p for p, _ in placement] == [3, 9, 14]
    assert [r for _, r in placement] == pytest.approx([0.15, 1.15, 1.1], abs=1e-5)
    assert score == pytest.approx(2.4, abs=1e-5) and info["as_t_c"] == 2


async def test_extra_info_keys_identical_across_samples(make_scorer, judge_server):
    scorer = make_scorer(by_name("hiprag") + judge_overrides(judge_server))
    batch, results = await scorer.score(
        [{"response": r, "golds": ["x"]} for r in ("", "<answer>x</answer>", HIPRAG_OK, "\x00<think>")]
    )
    keys = {tuple(info) for _, info in results}
    assert len(keys) == 1 and set(scorer.manager.keys) == set(next(iter(keys)))
    assert all(np.isfinite(np_column(batch, "score").astype(float)))
