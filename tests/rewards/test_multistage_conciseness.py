"""Multi-stage Eq. 9 conciseness: auxiliaries are not question words by default ("Will Smith birth date" is concise),
the stricter reading is an option. Values from Eq. 9 and the total ``r = r_a + r_s + r_f`` (§3)."""

from __future__ import annotations

import asyncio

import pytest
from omegaconf import OmegaConf

from agentrag_verl.methods.multistage import reward as fn
from agentrag_verl.methods.multistage.manager import MultistageRewardManager
from agentrag_verl.rewards.record import Sample


def response(query: str) -> str:
    return (
        f"<think>I need his birth date.</think><search>{query}</search><information>Doc 1(Title: Will Smith) born "
        "September 25, 1968</information><reflect>Found it.</reflect><answer>September 25, 1968</answer>"
    )


@pytest.mark.parametrize(
    ("query", "auxiliary_openers", "r_s"),
    [
        ("Will Smith birth date", False, 0.0),  # RC = 1 and concise -> 0 (Eq. 9, first case)
        ("Will Smith birth date", True, -1.0),  # stricter reading: "will" opens a question -> -1 (second case)
        ("What is Will Smith's birth date", False, -1.0),  # interrogative opener -> not concise
        ("Will Smith born?", False, -1.0),  # trailing question mark -> not concise
        ("Can Tho population", False, 0.0),  # a city, not a yes/no question
    ],
)
def test_conciseness_reward_and_total(query, auxiliary_openers, r_s):
    config = OmegaConf.create(
        {"reward": {"reward_kwargs": {"correctness": "em", "stage": 1, "auxiliary_openers": auxiliary_openers}}}
    )
    manager = MultistageRewardManager(config=config, tokenizer=None)
    scored = asyncio.run(manager.reward.score(Sample(response(query), ["September 25, 1968"])))
    # stage 1, correct: r_a = 1.0; one search, valid structure think search information reflect answer: r_f = +1
    assert (scored.info["ms_r_a"], scored.info["ms_r_s"], scored.info["ms_r_f"]) == (1.0, r_s, 1.0)
    assert scored.score == pytest.approx(1.0 + r_s + 1.0)


def test_question_words_are_the_interrogatives():
    assert fn.QUESTION_WORDS == frozenset("what who whom whose which when where why how".split())
    assert "will" in fn.AUXILIARY_OPENERS and not fn.QUESTION_WORDS & fn.AUXILIARY_OPENERS
    # the documented cost of the default: a yes/no question without "?" and few stopwords passes
    assert fn.is_concise("Is Paris the capital of France")  # stopwords is/the/of: 3 of 6 = 0.5 <= 0.5
    strict = fn.ConcisenessRules(auxiliary_openers=True)
    assert not fn.is_concise("Is Paris the capital of France", strict)
