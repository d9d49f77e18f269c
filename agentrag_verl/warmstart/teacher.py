"""A scripted teacher for the embedded default: a **stand-in for a teacher model**, not a policy.

The papers warm-start (or start RL from) instruction models that already write their tags; a 135M model does not,
so the embedded default needs demonstrations. In production they come from a large model behind an
OpenAI-compatible endpoint (``agentrag-verl demos generate --teacher-url``); on a laptop this module plays that
model inside our real agent loop:

- it reads only what a model would see: the prompt and the trajectory so far (our loop's observations, i.e. the
  passages the **real retriever** returned);
- its plan comes from the training row's ``metadata``: for corpus questions, ``hops`` (``query``, ``answer``,
  ``fact``); for common-knowledge questions, ``fact``. It searches hop by hop when the question needs the corpus
  and answers directly when the question is common knowledge;
- it concludes a hop only when the retrieved passages contain that hop's answer; otherwise it says the results do
  not answer the question and gives up (answer ``unknown``), which the demonstration writer then rejects. So a
  kept demonstration never concludes a fact its passages do not show;
- its reasoning is templated and its final answer is ``golden_answers[0]``.

It is an :class:`~agentrag_verl.agent_loops.local_clients.ScriptedLLMClient` responder: the loop's token ids
come from tokenizing its text exactly as a server's ids would be returned, so the demonstrations have the same
token layout (model text, masked observations) as an RL rollout.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agentrag_verl.metrics import normalize_answer

__all__ = [
    "TeacherPlan",
    "Hop",
    "ScriptedTeacher",
    "TeacherScript",
    "TeacherTemplates",
    "teacher_templates",
    "scripted_teacher_name",
    "plan_from_row",
    "GIVE_UP_ANSWER",
    "REASON_FIRST",
    "REASON_NEXT",
    "REASON_DIRECT",
    "NOT_FOUND",
]

GIVE_UP_ANSWER = "unknown"


@dataclass(frozen=True)
class Hop:
    """One retrieval hop of a corpus question."""

    query: str
    """The search query the teacher writes."""
    answer: str
    """What the hop finds (must appear in the retrieved passages for the teacher to conclude it)."""
    fact: str
    """The conclusion sentence the teacher writes after reading the passages."""


@dataclass(frozen=True)
class TeacherPlan:
    """How the teacher answers one question: ``hops`` to search (corpus questions) or none (common knowledge)."""

    question: str
    answer: str
    hops: tuple[Hop, ...] = ()
    fact: str = ""
    """The common-knowledge statement (used when there are no hops)."""

    @property
    def needs_search(self) -> bool:
        return bool(self.hops)


def plan_from_row(question: str, golden_answers: Sequence[str], metadata: Mapping[str, Any]) -> TeacherPlan:
    """The plan of a mini-wiki training row (``metadata.hops`` or ``metadata.fact``).

    Raises:
        ValueError: The row has neither (the scripted teacher needs one; a real teacher model does not).

    >>> plan_from_row("Who?", ["Ada"], {"hops": [{"query": "Who?", "answer": "Ada", "fact": "It was Ada."}]}).hops[0].answer
    'Ada'
    """  # noqa: E501
    meta = dict(metadata.get("metadata", metadata) or {})
    hops = tuple(Hop(str(h["query"]), str(h["answer"]), str(h["fact"])) for h in meta.get("hops") or [])
    fact = str(meta.get("fact") or "")
    if not hops and not fact:
        raise ValueError(
            f"Question {question!r} has no metadata.hops and no metadata.fact: the scripted teacher only plays "
            "questions that carry their plan (examples/mini_wiki train files). Use a teacher model instead "
            "(--teacher-url)."
        )
    return TeacherPlan(question=question, answer=str(golden_answers[0]), hops=hops, fact=fact)


class TeacherScript(Protocol):
    """What a method declares as its teacher (:attr:`agentrag_verl.registry.Method.teacher`): the next model text
    of a plan, given what the model sees after the question (the trajectory so far, or a stage's prompt)."""

    def respond(self, plan: TeacherPlan, seen: str) -> str: ...


@dataclass(frozen=True)
class TeacherTemplates:
    """Model-written text of one tag format (a :class:`TeacherScript`), declared by its method
    (:attr:`agentrag_verl.registry.Method.teacher`); ``{query}``, ``{fact}`` and ``{answer}`` slots are filled by
    the teacher. After a search the model reads the passages the environment wrote into the trajectory."""

    observation_open: str
    """The tag that opens the environment's observation (the teacher reads the passages after it)."""
    observation_close: str
    first_search: str
    """The first search of a corpus question (slot ``{query}``)."""
    next_search: str
    """The conclusion of a hop and the next search (``{fact}``, ``{query}``)."""
    final: str
    """The conclusion of the last hop and the answer (``{fact}``, ``{answer}``)."""
    give_up: str
    """The passages do not show the hop's answer: say so and answer :data:`GIVE_UP_ANSWER`."""
    direct: str
    """A common-knowledge question: answer without searching (``{fact}``, ``{answer}``)."""
    query_style: Callable[[str], str] | None = None
    """How the teacher writes a hop's planned query (a question) into ``{query}``: None, as planned. A method whose
    reward grades the query's form declares it (multi-stage: keywords)."""

    @property
    def openings(self) -> tuple[str, str, str]:
        """The choice to search as text: ``(shared, direct, search)``, the two paths' common start and then each
        one's own opening up to its first slot. HiPRAG: ``"<think>\\n<step>\\n<reasoning>"``, then "This is common
        knowledge, ..." against "I do not know this, ...". What a policy writes right after ``shared`` is its decision
        to answer directly or to search (read by the when-to-search benchmark's ``first_choice``, weighed by the SFT
        dataset's ``choice_weight``)."""
        shared = os.path.commonprefix([self.direct, self.first_search])
        direct, search = (text[len(shared) :].split("{", 1)[0] for text in (self.direct, self.first_search))
        return shared, direct, search

    def observations(self, trajectory: str) -> list[str]:
        """The observation contents (retrieved passages) in the trajectory so far."""
        out, start = [], 0
        while (i := trajectory.find(self.observation_open, start)) >= 0:
            j = trajectory.find(self.observation_close, i)
            end = len(trajectory) if j < 0 else j
            out.append(trajectory[i + len(self.observation_open) : end])
            start = end + 1
        return out

    def respond(self, plan: TeacherPlan, seen: str) -> str:
        """Search hop by hop; conclude a hop only when the last passages hold its answer, else give up."""
        if not plan.needs_search:
            return self.direct.format(fact=plan.fact, answer=plan.answer)
        passages = self.observations(seen)
        if not passages:
            return self.first_search.format(query=self.query(plan.hops[0].query))
        hop = plan.hops[min(len(passages), len(plan.hops)) - 1]
        if normalize_answer(hop.answer) not in normalize_answer(passages[-1]):
            return self.give_up
        if len(passages) < len(plan.hops):
            return self.next_search.format(fact=hop.fact, query=self.query(plan.hops[len(passages)].query))
        return self.final.format(fact=hop.fact, answer=plan.answer)

    def query(self, planned: str) -> str:
        """A hop's query as the teacher writes it (:attr:`query_style`)."""
        return planned if self.query_style is None else self.query_style(planned)


REASON_FIRST = "I do not know this, so I will search for it."
REASON_NEXT = "Now I need to find the next fact."
REASON_DIRECT = "This is common knowledge, so I can answer without searching."
NOT_FOUND = "The search results do not answer this."


def teacher_templates(format_name: str) -> TeacherScript:
    """The teacher script (templates) the method of ``format_name`` declares.

    Raises:
        ValueError: No such method, or it declares none (the message lists those that do).
    """
    from agentrag_verl.registry import get_method, methods

    templates = get_method(format_name).teacher
    if templates is None:
        raise ValueError(
            f"The scripted teacher has templates for {[m.name for m in methods() if m.teacher]}, not "
            f"{format_name!r}; use a teacher model behind an OpenAI-compatible endpoint for that format "
            "(--teacher-url)."
        )
    return templates


def scripted_teacher_name(format_name: str) -> str:
    """The scripted teacher as demonstration files record it (their fingerprint): with a query style, its name, so
    that demonstrations written with other queries are not resumed.

    >>> scripted_teacher_name("searchr1")
    'scripted (stand-in for a teacher model)'
    >>> scripted_teacher_name("multistage")
    'scripted (stand-in for a teacher model); queries: agentrag_verl.methods.multistage.teacher.keyword_query'
    """
    style = getattr(teacher_templates(format_name), "query_style", None)
    name = "scripted (stand-in for a teacher model)"
    return f"{name}; queries: {style.__module__}.{style.__qualname__}" if style else name


class ScriptedTeacher:
    """Responder ``(prompt_text, sampling_params) -> text`` playing the plans of known questions (module docstring).

    Args:
        format_name: A method that declares teacher templates (:func:`teacher_templates`).
        plans: The plans of the questions it may be asked.

    Raises:
        ValueError: The format has no templates.
    """

    def __init__(self, format_name: str, plans: Iterable[TeacherPlan]) -> None:
        self.templates = teacher_templates(format_name)
        self.plans = {p.question: p for p in plans}

    def _locate(self, prompt_text: str) -> tuple[TeacherPlan, str]:
        """The asked question (the known question that occurs first; the longest at a tie, so a question that
        starts with another is matched as itself; later occurrences are queries in the trajectory) and the text
        after it."""
        best: tuple[int, int, str] | None = None
        for q in self.plans:
            i = prompt_text.find(q)
            if i >= 0 and (best is None or (i, -len(q)) < best[:2]):
                best = (i, -len(q), q)
        if best is None:
            raise KeyError("the scripted teacher was asked a question it has no plan for")
        i, _, q = best
        return self.plans[q], prompt_text[i + len(q) :]

    def __call__(self, prompt_text: str, sampling_params: Mapping[str, Any] | None = None) -> str:
        plan, seen = self._locate(prompt_text)
        return self.templates.respond(plan, seen)
