"""Planner LLM stand-in: the fake OpenAI server answering the Figure 8 prompt (and the vote prompt) by looking at
the question in the request."""

from __future__ import annotations

import re
import time
from typing import Any

from agentrag_verl.data.corpus import load_qa

QA = {q["question"].strip(): q for q in load_qa()}
_QUESTION = re.compile(r"Current Question: (.*?)\nCorrect Answer:", re.DOTALL)


def plan_reply(queries: list[str], planner: str) -> str:
    path = "\n".join(f"{i}. {q}" for i, q in enumerate(queries, start=1))
    return (
        f"<correct_reasoning_path>\n{path}\n</correct_reasoning_path>\n"
        f"<optimized_planner>\n{planner}\n</optimized_planner>"
    )


class PlannerLLM:
    """``FakeOpenAIServer`` reply callable.

    Candidate ``seed`` k (or no seed) gets a plan whose planner names the gold answer when ``k`` is in
    ``correct_seeds``; candidate k has ``k + 1`` queries. The vote prompt gets a merged one-query plan tagged
    ``VOTED``. ``delay`` seconds are slept per request (to make a run killable mid-way).
    """

    def __init__(
        self,
        correct_seeds: tuple[int, ...] = (0, 1),
        delay: float = 0.0,
        vote_reply: str | None = None,
        unanswerable: tuple[str, ...] = (),
    ) -> None:
        self.correct_seeds, self.delay, self.vote_reply = correct_seeds, delay, vote_reply
        self.unanswerable = unanswerable

    @staticmethod
    def question_of(body: dict[str, Any]) -> str:
        text = body["messages"][-1]["content"]
        return _QUESTION.search(text).group(1).strip()

    def __call__(self, body: dict[str, Any]) -> str:
        if self.delay:
            time.sleep(self.delay)
        text = body["messages"][-1]["content"]
        question = self.question_of(body)
        gold = QA[question]["golden_answers"][0]
        if "Candidate plans:" in text:
            return (
                self.vote_reply
                if self.vote_reply is not None
                else plan_reply([f"VOTED {question}"], f"Search once; the answer is {gold}.")
            )
        k = int(body.get("seed", 0))
        queries = [f"{question} part {j}" for j in range(k + 1)]
        if k in self.correct_seeds and question not in self.unanswerable:
            return plan_reply(queries, f"Search step by step; the answer is {gold}.")
        return plan_reply(queries, "Search step by step and read carefully.")
