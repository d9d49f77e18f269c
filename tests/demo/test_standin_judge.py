"""The rule-based stand-in judge, called over real HTTP on 127.0.0.1 by the project's judge client."""

from __future__ import annotations

import asyncio

import pytest

from agentrag_verl.demo.standin_judge import StandInJudge, equivalent
from agentrag_verl.judges import JudgeClient
from agentrag_verl.methods.hiprag import judge as hiprag
from agentrag_verl.methods.multistage import judge as multistage


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
                over, same, correct, wrong, under = await client.judge_many(
                    [
                        hiprag.over_search_request("The capital of Italy is Rome.", "Rome is Italy's capital."),
                        hiprag.over_search_request("The capital of Italy is Rome.", "It is Milan."),
                        multistage.correctness_request("It was Jory Pendle", ["Jory Pendle", "Pendle"]),
                        multistage.correctness_request("Fenwick", ["Kessrow"]),
                        hiprag.under_search_request("I know this.", "The capital of Italy is Rome."),
                    ]
                )
            finally:
                await client.aclose()
        return over, same, correct, wrong, under

    over, same, correct, wrong, under = asyncio.run(run())
    assert over.ok and over.value is True and same.ok and same.value is False
    assert correct.ok and correct.value is True and wrong.ok and wrong.value is False
    # The under-search verifier needs world knowledge: refused with a 400 naming the option to turn it off.
    assert not under.ok and "under_search_detector" in (under.error or "")
