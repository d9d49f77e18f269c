"""Fixtures of the ReasonRAG tests: a scripted policy behind FakeOpenAIServer (real HTTP on 127.0.0.1) and the
scripted Search-R1 retriever over the fixture corpus."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from agentrag_verl.testing.fake_retriever import FakeRetriever
from tests.support import corpus_documents

GROUNDING_MARK = "information retrieval assistant"  # Figure 13's system prompt
EVIDENCE_PHRASE = "Based on the query, the relevant evidence is"


def _messages(body: dict[str, Any]) -> tuple[str, str]:
    """(system, user) of a chat body, or the rendered prompt twice for a completions body."""
    if "messages" in body:
        return body["messages"][0]["content"], body["messages"][-1]["content"]
    return body["prompt"], body["prompt"]


class StagePolicy:
    """A policy scripted by stage and by how often the same prompt was seen.

    Args:
        root: Replies to the first Reasoning prompt (question only), the n-th call getting ``root[n-1]``
            (the last one repeats).
        grounding: Replies to Grounding prompts, the same way, counted per prompt.
        reasoning: Reply to a later Reasoning prompt, a function of its user message.
        delay_s: Sleep before answering (to make runs slow enough to kill).
    """

    def __init__(
        self,
        root: Sequence[str],
        grounding: Sequence[str],
        reasoning: Callable[[str], str],
        delay_s: float = 0.0,
    ) -> None:
        self.root, self.grounding, self.reasoning, self.delay_s = list(root), list(grounding), reasoning, delay_s
        self.counts: Counter[str] = Counter()
        self.bodies: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> str:
        if self.delay_s:
            time.sleep(self.delay_s)
        system, user = _messages(body)
        with self._lock:
            self.bodies.append(body)
            self.counts[user] += 1
            n = self.counts[user]
        if GROUNDING_MARK in system:
            return self.grounding[min(n, len(self.grounding)) - 1]
        if "Previous Thoughts:" not in user:
            return self.root[min(n, len(self.root)) - 1]
        return self.reasoning(user)


class QAPolicy:
    """A policy for any question of a QA set: the first root call searches, later ones answer wrongly; odd-numbered
    calls of a Grounding prompt find the gold answer, even-numbered ones find nothing; a later Reasoning call answers
    the gold when it is among the previous thoughts, else wrongly. With 5 MCTS iterations (c_uct 1.414) every tree
    yields a query-vs-answer and an evidence-vs-evidence pair.

    Args:
        golds: Question -> its first gold answer.
        delay_s: Sleep before answering.
    """

    def __init__(self, golds: dict[str, str], delay_s: float = 0.0) -> None:
        self.golds, self.delay_s = golds, delay_s
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> str:
        if self.delay_s:
            time.sleep(self.delay_s)
        system, user = _messages(body)
        question = user.split("Question: ", 1)[1].split("\n", 1)[0]
        gold = self.golds[question]
        with self._lock:
            self.counts[user] += 1
            n = self.counts[user]
        if GROUNDING_MARK in system:
            if n % 2 == 1:
                return f"{EVIDENCE_PHRASE} <evidence>The answer is {gold}.</evidence>"
            return "<evidence>None</evidence>"
        if "Previous Thoughts:" not in user:
            if n == 1:
                return f"I should look this up. So the next query is <query>{question}</query>"
            return "So the answer is <answer>unknown</answer>"
        if f"The answer is {gold}." in user:
            return f"So the answer is <answer>{gold}</answer>"
        return "So the answer is <answer>unknown</answer>"


@pytest.fixture
def fake_retriever():
    """The scripted Search-R1 retriever (keyword overlap) over the fixture corpus on 127.0.0.1."""
    with FakeRetriever(corpus_documents()) as server:
        yield server
