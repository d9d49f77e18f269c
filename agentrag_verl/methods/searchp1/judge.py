"""Search-P1's two LLM judges (Appendix D): the reference planner (Figure 8, Algorithm 1) and the dual-track
evaluator (Figure 9, Eq. 6-8, Algorithm 3): prompts, parsers, requests, and what a failed reply means.

- Figure 8 "Reference Planner Generation Prompt": a strong LLM writes the optimized reasoning path ``R_ref`` (a
  numbered list of queries) and the planner text ``P_ref`` for a training question (offline,
  :mod:`agentrag_verl.methods.searchp1.planners`).
- Figure 9 "Dual-Track Evaluation Prompt": the evaluator scores a trajectory against its reference plan; its JSON
  score sheet (:class:`SearchP1Evaluation`) feeds the path reward (Eq. 6-7) and the soft outcome (Eq. 8).

Each prompt is one user message with the slots in braces exactly as the figures name them; several gold answers are
joined with ``" | "``.

Decisions: a failed evaluation must not hand out path credit, so Eq. 6/7 see zero effective steps and Eq. 8 sees
zero soft scores, leaving the exact-match outcome and the format reward (:data:`OUTCOME_ONLY_EVALUATION`); a
question whose planner reply failed has no reference plan (Track B of Eq. 7 is off for it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentrag_verl.judges.client import JudgeRequest, Verdict
from agentrag_verl.judges.parsers import ParseError, check_reply, loads_lenient, strip_reasoning
from agentrag_verl.judges.prompts import Message, format_answers

__all__ = [
    "PLANNER_TEMPLATE",
    "EVALUATION_TEMPLATE",
    "format_reasoning_path",
    "parse_reasoning_path",
    "planner_messages",
    "evaluation_messages",
    "PLANNER_SCORES",
    "OUTCOME_ACCURACY_SCORES",
    "OUTCOME_REASONING_SCORES",
    "ReferencePlan",
    "SearchP1Evaluation",
    "parse_planner",
    "parse_evaluation",
    "planner_request",
    "evaluation_request",
    "OUTCOME_ONLY_EVALUATION",
    "evaluation_or_fallback",
    "plan_or_none",
]

# --- prompts: Figures 8 and 9 ----------------------------------------------------------------------------------

PLANNER_TEMPLATE = (
    "You are an expert planner and reasoning optimizer.\n"
    "Current Question: {question}\n"
    "Correct Answer: {golden_answers}\n"
    "Your task is to generate:\n"
    "1. Optimized Reasoning Path: A sequence of search queries that would lead directly to the correct answer in the "
    "most efficient way. Format as a numbered list.\n"
    "2. Optimized Planner: A concise, step-by-step instruction on how a reasoning agent should solve this question "
    "correctly and efficiently.\n"
    "Important: Focus on the minimal set of queries needed. Avoid redundant or inefficient steps.\n"
    "Output format:\n"
    "<correct_reasoning_path>\n"
    "1. query 1\n"
    "2. query 2\n"
    "</correct_reasoning_path>\n"
    "<optimized_planner>\n"
    "To solve this, first search for... then...\n"
    "</optimized_planner>"
)
"""Search-P1 Figure 8, Reference Planner Generation Prompt (one user message)."""

EVALUATION_TEMPLATE = (
    "You are an expert RL researcher evaluating an AI agent\u2019s trajectory. Your task is to conduct a Dual-Track "
    "Evaluation:\n"
    "1. Self-Consistency Track: How well did the agent execute its OWN plan?\n"
    "2. Reference-Alignment Track: How well did the agent follow the Expert plan?\n"
    "3. Outcome Evaluation: Assess accuracy and reasoning quality.\n"
    "Evaluation Inputs:\n"
    "Question: {question}\n"
    "Correct Answer: {golden_answers}\n"
    "Reference Planner: {ref_planner}\n"
    "Reference Path: {ref_reasoning_path}\n"
    "Model Trajectory: {trajectory}\n"
    "Scoring Criteria:\n"
    "Planner Score: 0.2 (Bad) / 0.6 (Average) / 1.0 (Good) / 1.2 (Excellent)\n"
    "Outcome Accuracy: 0.0 (Wrong) / 0.5 (Partial) / 1.0 (Correct)\n"
    "Reasoning Quality: 0.0 / 0.5 / 0.8 / 1.0\n"
    "Output: JSON with planner_score, model_plan_steps, effective_steps_self, effective_steps_ref, "
    "outcome_accuracy_score, outcome_reasoning_score."
)
"""Search-P1 Figure 9, Dual-Track Evaluation Prompt (one user message)."""


def format_reasoning_path(queries: Sequence[str] | str) -> str:
    """Formats a reference reasoning path as the numbered list Figure 8 asks for (a string passes through).

    >>> print(format_reasoning_path(["director of Il Coraggio", "Domenico Paolella death"]))
    1. director of Il Coraggio
    2. Domenico Paolella death
    """
    if isinstance(queries, str):
        return queries
    return "\n".join(f"{i}. {q}" for i, q in enumerate(queries, 1))


def planner_messages(question: str, golden_answers: str | Iterable[str]) -> list[Message]:
    """Messages asking a strong LLM for a reference planner (Figure 8, Algorithm 1).

    Args:
        question: The training question.
        golden_answers: Its gold answers.

    Returns:
        One user message; parse the reply with :func:`parse_planner`.

    >>> planner_messages("Who wrote Hamlet?", ["Shakespeare"])[0]["content"].splitlines()[1:3]
    ['Current Question: Who wrote Hamlet?', 'Correct Answer: Shakespeare']
    """
    text = PLANNER_TEMPLATE.format(question=question, golden_answers=format_answers(golden_answers))
    return [{"role": "user", "content": text}]


def evaluation_messages(
    question: str,
    golden_answers: str | Iterable[str],
    ref_planner: str,
    ref_reasoning_path: Sequence[str] | str,
    trajectory: str,
) -> list[Message]:
    """Messages for the dual-track evaluator (Figure 9).

    Args:
        question: The question.
        golden_answers: The gold answers.
        ref_planner: The reference planner text ``P_ref``.
        ref_reasoning_path: The reference queries ``R_ref`` (a list is numbered; a string passes through).
        trajectory: The model's trajectory text.

    Returns:
        One user message; parse the reply with :func:`parse_evaluation`.
    """
    text = EVALUATION_TEMPLATE.format(
        question=question,
        golden_answers=format_answers(golden_answers),
        ref_planner=ref_planner,
        ref_reasoning_path=format_reasoning_path(ref_reasoning_path),
        trajectory=trajectory,
    )
    return [{"role": "user", "content": text}]


# --- parsers -----------------------------------------------------------------------------------------------------

PLANNER_SCORES = (0.2, 0.6, 1.0, 1.2)
"""Figure 9 planner score: Bad / Average / Good / Excellent."""
OUTCOME_ACCURACY_SCORES = (0.0, 0.5, 1.0)
"""Figure 9 outcome accuracy: Wrong / Partial / Correct."""
OUTCOME_REASONING_SCORES = (0.0, 0.5, 0.8, 1.0)
"""Figure 9 reasoning quality."""


@dataclass(frozen=True)
class ReferencePlan:
    """A reference planner written by a strong LLM (Figure 8, Algorithm 1).

    Attributes:
        reasoning_path: The optimized search queries in order (``R_ref``; ``|R_ref|`` in Eq. 7 is its length).
        planner: The step-by-step instruction text (``P_ref``).
    """

    reasoning_path: tuple[str, ...]
    planner: str


@dataclass(frozen=True)
class SearchP1Evaluation:
    """The dual-track evaluator's score sheet (Figure 9; used by Eq. 6-8 / Algorithm 3).

    Attributes:
        planner_score: Quality of the agent's plan, one of 0.2 / 0.6 / 1.0 / 1.2 (``r_planner`` in Eq. 6).
        model_plan_steps: Steps in the agent's own plan (``n_plan``).
        effective_steps_self: Plan steps the agent actually executed (``n_exec``, Track A).
        effective_steps_ref: Reference-path steps the trajectory covered (``n_cov``, Track B).
        outcome_accuracy_score: 0 / 0.5 / 1 (soft outcome, Eq. 8).
        outcome_reasoning_score: 0 / 0.5 / 0.8 / 1 (soft outcome, Eq. 8).
    """

    planner_score: float
    model_plan_steps: int
    effective_steps_self: int
    effective_steps_ref: int
    outcome_accuracy_score: float
    outcome_reasoning_score: float


_LIST_MARKER = re.compile(r"^\s*(?:\d+\s*[.):]|[-*\u2022])\s*")


def parse_reasoning_path(text: str) -> tuple[str, ...]:
    """The queries of a reasoning path written as a list (the inverse of :func:`format_reasoning_path`): one per
    non-blank line, numbering or bullets removed.

    >>> parse_reasoning_path("1. director of Il Coraggio\\n- Domenico Paolella death\\n")
    ('director of Il Coraggio', 'Domenico Paolella death')
    """
    return tuple(q for q in (_LIST_MARKER.sub("", line).strip() for line in text.splitlines()) if q)


def _tag_content(text: str, tag: str) -> str | None:
    match = re.search(rf"<{tag}>(.*?)(?:</{tag}>|(?=<[a-z_]+>)|\Z)", text, re.DOTALL | re.IGNORECASE)
    return match.group(1).strip() if match else None


def parse_planner(text: str) -> ReferencePlan:
    """Parses the reference planner reply (Figure 8 output format).

    ``<correct_reasoning_path>`` must hold at least one query line (list markers such as ``1.``, ``2)`` or ``-``
    are removed); ``<optimized_planner>`` must be non-empty. A tag left unclosed at the end of the reply (a
    truncated generation) runs to the next tag or the end. A reasoning model's ``<think>`` block is removed first.

    Args:
        text: The planner LLM's reply.

    Returns:
        The reference plan.

    Raises:
        ParseError: A tag is missing or empty.

    >>> plan = parse_planner("<correct_reasoning_path>\\n1. Il Coraggio director\\n2. Domenico Paolella "
    ...     "death\\n</correct_reasoning_path>\\n<optimized_planner>\\nFirst search the director.\\n"
    ...     "</optimized_planner>")
    >>> plan.reasoning_path, plan.planner
    (('Il Coraggio director', 'Domenico Paolella death'), 'First search the director.')
    """
    text = strip_reasoning(check_reply(text))
    path_text = _tag_content(text, "correct_reasoning_path")
    planner = _tag_content(text, "optimized_planner")
    if path_text is None:
        raise ParseError("no <correct_reasoning_path> in the reply")
    if planner is None:
        raise ParseError("no <optimized_planner> in the reply")
    queries = parse_reasoning_path(path_text)
    if not queries:
        raise ParseError("<correct_reasoning_path> lists no query")
    if not planner:
        raise ParseError("<optimized_planner> is empty")
    return ReferencePlan(reasoning_path=queries, planner=planner)


# Algorithm 3 spells some fields differently from Figure 9; both spellings are accepted.
_FIELD_ALIASES = {
    "eff_steps_self": "effective_steps_self",
    "eff_steps_ref": "effective_steps_ref",
    "acc_score": "outcome_accuracy_score",
    "reason_score": "outcome_reasoning_score",
}
_SCORE_SETS = {
    "planner_score": PLANNER_SCORES,
    "outcome_accuracy_score": OUTCOME_ACCURACY_SCORES,
    "outcome_reasoning_score": OUTCOME_REASONING_SCORES,
}
_STEP_FIELDS = ("model_plan_steps", "effective_steps_self", "effective_steps_ref")


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or value is None:
        raise ParseError(f"{key} must be a number, got {value!r}")
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError as exc:
            raise ParseError(f"{key} must be a number, got {value!r}") from exc
    if not isinstance(value, int | float) or not math.isfinite(value):
        raise ParseError(f"{key} must be a finite number, got {value!r}")
    return float(value)


def parse_evaluation(text: str) -> SearchP1Evaluation:
    """Parses the dual-track evaluation (Figure 9) into a validated :class:`SearchP1Evaluation`.

    All six Figure 9 fields are required (Algorithm 3's short spellings ``eff_steps_self``, ``eff_steps_ref``,
    ``acc_score``, ``reason_score`` are accepted too); extra fields (e.g. an explanation) are ignored. Scores must
    be in their Figure 9 value sets (within 1e-6; numeric strings are accepted), step counts non-negative whole
    numbers. JSON defects are repaired by :func:`~agentrag_verl.judges.parsers.loads_lenient`.

    Args:
        text: The evaluator's reply.

    Returns:
        The score sheet.

    Raises:
        ParseError: No JSON object, a missing field, or a value outside its set.

    >>> parse_evaluation('{"planner_score": 1.0, "model_plan_steps": 3, "effective_steps_self": 2, '
    ...     '"effective_steps_ref": 2, "outcome_accuracy_score": 1, "outcome_reasoning_score": 0.8}')
    SearchP1Evaluation(planner_score=1.0, model_plan_steps=3, effective_steps_self=2, effective_steps_ref=2, \
outcome_accuracy_score=1.0, outcome_reasoning_score=0.8)
    >>> parse_evaluation('{"planner_score": 0.9, "model_plan_steps": 3, "effective_steps_self": 2, '
    ...     '"effective_steps_ref": 2, "outcome_accuracy_score": 1, "outcome_reasoning_score": 0.8}')
    Traceback (most recent call last):
    ...
    agentrag_verl.judges.parsers.ParseError: planner_score=0.9 is not one of (0.2, 0.6, 1.0, 1.2)
    """
    data = loads_lenient(strip_reasoning(check_reply(text)))
    if not isinstance(data, dict):
        raise ParseError(f"expected a JSON object, got {type(data).__name__}")
    fields = {_FIELD_ALIASES.get(str(k).strip(), str(k).strip()): v for k, v in data.items()}
    values: dict[str, Any] = {}
    for key, allowed in _SCORE_SETS.items():
        if key not in fields:
            raise ParseError(f"missing field {key!r}")
        value = _number(key, fields[key])
        match = next((a for a in allowed if abs(a - value) <= 1e-6), None)
        if match is None:
            raise ParseError(f"{key}={fields[key]!r} is not one of {allowed}")
        values[key] = match
    for key in _STEP_FIELDS:
        if key not in fields:
            raise ParseError(f"missing field {key!r}")
        value = _number(key, fields[key])
        if value < 0 or value != int(value):
            raise ParseError(f"{key}={fields[key]!r} must be a non-negative whole number")
        values[key] = int(value)
    return SearchP1Evaluation(**values)


# --- requests ----------------------------------------------------------------------------------------------------


def planner_request(
    question: str, golden_answers: str | Iterable[str], params: Mapping[str, Any] | None = None
) -> JudgeRequest[ReferencePlan]:
    """Reference planner generation (Figure 8, Algorithm 1) for one training question.

    For K > 1 candidates (Eq. 5 vote) send K requests with different ``params`` (e.g. ``{"seed": k}`` and a
    temperature above 0): equal requests would be served once from the cache.

    Args:
        question: The question.
        golden_answers: Its gold answers.
        params: Per-request sampling overrides.
    """
    return JudgeRequest(planner_messages(question, golden_answers), parse_planner, params)


def evaluation_request(
    question: str,
    golden_answers: str | Iterable[str],
    ref_planner: str,
    ref_reasoning_path: Sequence[str] | str,
    trajectory: str,
    params: Mapping[str, Any] | None = None,
) -> JudgeRequest[SearchP1Evaluation]:
    """Dual-track evaluation (Figure 9) of one trajectory against its reference planner.

    Args:
        question: The question.
        golden_answers: The gold answers.
        ref_planner: The reference planner text.
        ref_reasoning_path: The reference queries.
        trajectory: The model's trajectory.
        params: Per-request sampling overrides.
    """
    messages = evaluation_messages(question, golden_answers, ref_planner, ref_reasoning_path, trajectory)
    return JudgeRequest(messages, parse_evaluation, params)


# --- failure policy ----------------------------------------------------------------------------------------------

OUTCOME_ONLY_EVALUATION = SearchP1Evaluation(
    planner_score=0.2,
    model_plan_steps=1,
    effective_steps_self=0,
    effective_steps_ref=0,
    outcome_accuracy_score=0.0,
    outcome_reasoning_score=0.0,
)
"""Stands in for a failed evaluation: ``S_self = S_ref = 0`` (Eq. 6/7, zero effective steps) and soft outcome 0
(Eq. 8), so the trajectory keeps only its exact-match outcome and format reward."""


def evaluation_or_fallback(verdict: Verdict[SearchP1Evaluation]) -> SearchP1Evaluation:
    """The score sheet, or :data:`OUTCOME_ONLY_EVALUATION` when the evaluator failed.

    >>> evaluation_or_fallback(Verdict(None, None, False, "timeout")) is OUTCOME_ONLY_EVALUATION
    True
    """
    return verdict.value if verdict.ok and verdict.value is not None else OUTCOME_ONLY_EVALUATION


def plan_or_none(verdict: Verdict[ReferencePlan]) -> ReferencePlan | None:
    """The reference plan, or ``None`` (no reference: Track B of Eq. 7 is off for the question) on failure."""
    return verdict.value if verdict.ok else None
