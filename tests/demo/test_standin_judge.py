"""The rule-based stand-in judge (agentrag_verl.standin, with each method's rules), called over real HTTP on 127.0.0.1
by the project's judge client."""

from __future__ import annotations

import asyncio
from dataclasses import astuple

import pytest

from agentrag_verl.judges import JudgeClient
from agentrag_verl.methods.hiprag import judge as hiprag
from agentrag_verl.methods.hiprag.standin import equivalent
from agentrag_verl.methods.multistage import judge as multistage
from agentrag_verl.standin import StandInJudge


@pytest.mark.parametrize(
    ("conclusion", "reanswer", "expected"),
    [
        # same content words {capital, italy, rome} in another order: equivalent -> over-search
        ("The capital of Italy is Rome.", "Rome is the capital city of Italy.", True),
        # the answer differs (rome vs milan): 2 of 3 content words, below 80%
        ("The capital of Italy is Rome.", "The capital of Italy is Milan.", False),
        # the re-answer says more, but covers every content word of the shorter statement
        ("Jory Pendle built it.", "The bridge was built in 1761 by the mason Jory Pendle.", True),
        ("The Velda is 212 kilometres long.", "I do not know.", False),
        # a re-answer that restates the query covers 6 of the conclusion's 7 content words, but not its answer (1861)
        (
            "The Royal Opera of the capital of the Duchy of Arlen opened in 1861.",
            "In what year was the Royal Opera of the capital of the Duchy of Arlen opened? The answer is 1843.",
            False,
        ),
        ("Gold is a chemical element with the symbol Au.", "The chemical symbol for gold is Au.", True),
        ("", "Rome", False),
    ],
)
def test_over_search_rule(conclusion, reanswer, expected):
    assert equivalent(conclusion, reanswer) is expected


def test_judge_client_against_the_stand_in():
    async def run():
        with StandInJudge() as server:
            client = JudgeClient.from_config({"base_url": server.base_url, "model": "standin-judge",
                                              "api_key_env": None, "max_retries": 0})  # fmt: skip
            try:
                await client.check()
                over, same, correct, wrong, under, under_wrong, table, table_wrong = await client.judge_many(
                    [
                        hiprag.over_search_request("The capital of Italy is Rome.", "Rome is Italy's capital."),
                        hiprag.over_search_request("The capital of Italy is Rome.", "It is Milan."),
                        multistage.correctness_request("It was Jory Pendle", ["Jory Pendle", "Pendle"]),
                        multistage.correctness_request("Fenwick", ["Kessrow"]),
                        hiprag.under_search_request("I know this.", "The capital of Italy is Rome."),
                        hiprag.under_search_request("I know this.", "Kessrow Bridge was built in 1861."),
                        # no passage states it: the common-knowledge answer table does
                        hiprag.under_search_request("I know this.", "The capital of Chile is Santiago."),
                        hiprag.under_search_request("I know this.", "The capital of Chile is Lima."),
                    ]
                )
            finally:
                await client.aclose()
        return over, same, correct, wrong, under, under_wrong, table, table_wrong

    over, same, correct, wrong, under, under_wrong, table, table_wrong = asyncio.run(run())
    assert over.ok and over.value is True and same.ok and same.value is False
    assert correct.ok and correct.value is True and wrong.ok and wrong.value is False
    # the under-search verifier checks a non-search step's conclusion against the world (the mini-wiki corpus and its
    # common-knowledge answer table)
    assert under.ok and under.value is True and under_wrong.ok and under_wrong.value is False
    assert table.ok and table.value is True and table_wrong.ok and table_wrong.value is False


RIGHT_P1 = (
    "<reasoning>Find the builder.</reasoning>\n<tool_call>who built the Velda bridge</tool_call>\n<tool_response>\n"
    "The Velda bridge was built by Jory Pendle.\n</tool_response>\n<reasoning>Check again.</reasoning>\n<tool_call>"
    "who built the Velda bridge</tool_call>\n<tool_response>\nJory Pendle, mason.\n</tool_response>\n"
    "<answer>Jory Pendle</answer>"
)
WRONG_P1 = "<reasoning>I know it.</reasoning>\n<answer>Fenwick</answer>"


TWO_HOP = "In what year did the author of the poetry collection The Trendane Poems die?"


def test_each_methods_rules_answer_its_own_prompts_and_an_unknown_prompt_is_refused():
    from agentrag_verl.judges.client import JudgeRequest
    from agentrag_verl.methods.searchp1 import judge as searchp1
    from agentrag_verl.standin import rules

    # the rules come from the methods' declarations, not from a list in the server
    assert sorted(rules()) == ["hiprag", "multistage", "searchp1"]

    async def run():
        with StandInJudge(model="judge-x") as server:
            client = JudgeClient.from_config({"base_url": server.base_url, "model": "judge-x",
                                              "api_key_env": None, "max_retries": 0})  # fmt: skip
            try:
                await client.check()  # GET /models lists the model it was started with
                return await client.judge_many(
                    [
                        searchp1.evaluation_request(
                            "Who built it?", ["Jory Pendle"], "Search once.", ["who built the Velda bridge"], RIGHT_P1
                        ),
                        searchp1.evaluation_request(
                            "Who built it?", ["Jory Pendle"], "Search once.", ["who built the Velda bridge"], WRONG_P1
                        ),
                        searchp1.planner_request("Who built the bridge?", ["Jory Pendle"]),
                        searchp1.planner_request(TWO_HOP, ["1938"]),
                        JudgeRequest([{"role": "user", "content": "Tell me a joke."}], str),
                    ]
                )
            finally:
                await client.aclose()

    right, wrong, plan, two_hop, unknown = asyncio.run(run())
    # the evaluator's sheet follows the trajectory (a constant one would pay every trajectory the same path credit)
    assert right.ok and wrong.ok
    assert astuple(right.value) == (1.2, 2, 1, 1, 1.0, 1.0)  # right, grounded, reference covered; a repeated query
    assert astuple(wrong.value) == (0.2, 0, 0, 0, 0.0, 0.0)  # no search, wrong answer
    assert plan.ok and plan.value.reasoning_path == ("Who built the bridge?",) and "Jory Pendle" in plan.value.planner
    # a mini-wiki question's reference path is its hops (examples/mini_wiki/multi_hop/train.jsonl, multi_hop_train_0)
    assert two_hop.ok and two_hop.value.reasoning_path == (
        "Who wrote the poetry collection The Trendane Poems?",
        "In what year did Sevock Kelow die?",
    )
    assert not unknown.ok and "unknown judge prompt" in (unknown.error or "")
