"""ReasonRAG's process evaluation (Appendix F, Figure 14 "System prompt for Process Evaluation"; Eq. 6): prompt,
score parser, request, and the node value when the judge fails.

The MCTS (:mod:`agentrag_verl.methods.reasonrag.mcts`, ``value="process_eval"``) scores a partial trajectory with
this judge instead of SPRE rollouts. The user message follows the layout of the paper's judge cases (Figures 8-10):
Question, Golden Answers, Agent Thoughts.

Decisions: Figure 14 asks for a score in [0, 1] while the paper's own judge examples answer on a 0-100 scale
("So the score is 15" in Figure 8, "So the score is **88**" in Figure 10), so :func:`parse_score` reads a value in
(1, 100] as a percentage; a failed evaluation falls back to the paper's primary estimator, SPRE rollouts (Eq. 1),
rather than a made-up value (:class:`ProcessScoreFallback`).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from typing import Any

from agentrag_verl.judges.client import JudgeRequest, Verdict
from agentrag_verl.judges.parsers import ParseError, check_reply, strip_reasoning
from agentrag_verl.judges.policy import choose_policy
from agentrag_verl.judges.prompts import Message, format_answers, system_user

__all__ = [
    "PROCESS_SYSTEM",
    "PROCESS_USER",
    "process_score_messages",
    "parse_score",
    "process_score_request",
    "ProcessScoreFallback",
    "node_value",
]

# --- prompt: Figure 14 ---------------------------------------------------------------------------------------------

PROCESS_SYSTEM = (
    "An agent is tasked with answering a question using a retrieval tool. Critically assess its intermediate "
    "reasoning process to determine if it leads to the correct answer. Identify all flaws, inconsistencies, and "
    "mistakes in the thought process. Every imperfection, no matter how small, must be acknowledged. Evaluate how "
    "effectively the reasoning supports the final answer and the overall accuracy of the response. Ensure the "
    "evaluation is extremely harsh, leaving no leniency. Even if the answer seems close to correct, do not award full "
    "marks to maintain strict grading standards. Assign a score between [0, 1] based on the severity of flaws and the "
    "reasoning's accuracy in leading to the golden answer. Respond briefly and conclude with: So the score is [Score]."
)
"""ReasonRAG Figure 14, System prompt for Process Evaluation."""

PROCESS_USER = "Question: {question}\nGolden Answers: {golden_answers}\nAgent Thoughts: {trajectory}"
"""User message for Figure 14, laid out like the paper's judge cases (Figures 8-10)."""


def process_score_messages(question: str, golden_answers: str | Iterable[str], trajectory: str) -> list[Message]:
    """Messages for the process evaluation of a (partial) trajectory (Figure 14, Eq. 6).

    Args:
        question: The question.
        golden_answers: The gold answers.
        trajectory: The agent's thoughts so far (queries, evidence, possibly an answer).

    Returns:
        ``[system, user]`` messages; the judge ends with "So the score is X".

    >>> process_score_messages("Q?", ["A", "B"], "thoughts")[1]["content"]
    'Question: Q?\\nGolden Answers: A | B\\nAgent Thoughts: thoughts'
    """
    user = PROCESS_USER.format(question=question, golden_answers=format_answers(golden_answers), trajectory=trajectory)
    return system_user(PROCESS_SYSTEM, user)


# --- parser --------------------------------------------------------------------------------------------------------

_SCORE = re.compile(
    r"score\s+is\s*[:=]?\s*[*_`\[\(\s]*(-?\d+(?:\.\d+)?|-?\.\d+)\s*[*_`\]\)\s]*(%|/\s*(\d+(?:\.\d+)?))?",
    re.IGNORECASE,
)


def parse_score(text: str) -> float:
    """Parses the process score (Figure 14): the last ``So the score is X``, returned in [0, 1].

    ``X`` in [0, 1] is taken as is; ``X`` in (1, 100] is read on the 0-100 scale the paper's judge examples use
    ("So the score is 15" in Figure 8, "So the score is **88**" in Figure 10) and divided by 100. ``X%`` and
    ``X/Y`` are divided accordingly. Brackets and emphasis around ``X`` are ignored; "So the" is optional.

    Args:
        text: The judge's reply.

    Returns:
        The score in [0, 1].

    Raises:
        ParseError: No "score is <number>" phrase, or a value outside [0, 100].

    >>> parse_score("Several flaws... So the score is 0.35.")
    0.35
    >>> parse_score("So the score is **88**.")
    0.88
    >>> parse_score("So the score is [Score].")
    Traceback (most recent call last):
    ...
    agentrag_verl.judges.parsers.ParseError: no 'So the score is <number>' in the reply
    """
    text = strip_reasoning(check_reply(text))
    matches = list(_SCORE.finditer(text))
    if not matches:
        raise ParseError("no 'So the score is <number>' in the reply")
    match = matches[-1]
    value = float(match.group(1))
    if match.group(2) == "%":
        value /= 100.0
    elif match.group(3) is not None:
        denominator = float(match.group(3))
        if denominator <= 0:
            raise ParseError(f"score denominator must be positive: {match.group(0).strip()!r}")
        value /= denominator
    elif value > 1.0:
        value /= 100.0  # the 0-100 scale of the paper's examples
    if not 0.0 <= value <= 1.0:
        raise ParseError(f"score out of range [0, 1] (or [0, 100]): {match.group(0).strip()!r}")
    return value


# --- request -------------------------------------------------------------------------------------------------------


def process_score_request(
    question: str, golden_answers: str | Iterable[str], trajectory: str, params: Mapping[str, Any] | None = None
) -> JudgeRequest[float]:
    """The process evaluation (Figure 14, Eq. 6): the score of a partial trajectory in [0, 1].

    Args:
        question: The question.
        golden_answers: The gold answers.
        trajectory: The agent's thoughts so far.
        params: Per-request sampling overrides.
    """
    return JudgeRequest(process_score_messages(question, golden_answers, trajectory), parse_score, params)


# --- failure policy ------------------------------------------------------------------------------------------------


class ProcessScoreFallback(str, enum.Enum):
    """The node value when the process evaluation (Figure 14) fails."""

    ROLLOUT = "rollout"
    """Return ``None``: the caller estimates the node by SPRE rollouts (Eq. 1)."""
    ZERO = "zero"
    """Value 0."""


def node_value(
    verdict: Verdict[float], fallback: ProcessScoreFallback | str = ProcessScoreFallback.ROLLOUT
) -> float | None:
    """A node value from the process evaluation (Eq. 6), or the fallback when it failed.

    Returns:
        The score in [0, 1]; ``None`` when the caller should estimate the node by rollouts (Eq. 1).

    >>> print(node_value(Verdict(None, "no score", False, "parse_error")))
    None
    """
    fallback = choose_policy(ProcessScoreFallback, fallback, "mcts.process_eval_fallback")
    if verdict.ok:
        return float(verdict.value)  # type: ignore[arg-type]
    return None if fallback is ProcessScoreFallback.ROLLOUT else 0.0
