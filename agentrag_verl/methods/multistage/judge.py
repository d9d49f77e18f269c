"""The multi-stage paper's correctness judge ("Learning When to Search", Appendix B.4 "Instruction for Judge LLM"):
prompt, YES/NO parser, request, and what decides when the judge fails.

The instruction is one user message with the normalized prediction and the normalized gold answers inline; it has
no question slot. The reward (:class:`agentrag_verl.methods.multistage.parts.JudgeCorrectness`, the answer
correctness of r_a) and the evaluation's judge accuracy both send :func:`correctness_request`.

Decision: when the judge fails, the reward falls back to exact match (:class:`CorrectnessFallback`) rather than
cover match, because cover match rewards long answers listing many candidates.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from typing import Any

from agentrag_verl.judges.client import JudgeRequest, Verdict
from agentrag_verl.judges.parsers import ParseError, check_reply, strip_reasoning
from agentrag_verl.judges.policy import choose_policy
from agentrag_verl.judges.prompts import Message, format_answers
from agentrag_verl.metrics import cover_exact_match, exact_match, normalize_answer

__all__ = [
    "JUDGE_TEMPLATE",
    "correctness_messages",
    "parse_yes_no",
    "correctness_request",
    "CorrectnessFallback",
    "is_correct",
]

# --- prompt: B.4 -------------------------------------------------------------------------------------------------

JUDGE_TEMPLATE = (
    "You are an evaluation assistant. Your task is to determine whether the given prediction semantically matches "
    "any of the reference answers. This is a flexible match: even if the wording is different, if the meaning is the "
    "same, consider it a match.\n"
    "Prediction: {prediction}\n"
    "Reference Answers: {references}\n"
    "Please answer with a single word:\n"
    "- YES \u2192 if the prediction expresses the same meaning as any of the reference answers.\n"
    "- NO \u2192 otherwise.\n"
    "Only respond with YES or NO."
)
"""Multi-stage paper, B.4 "Instruction for Judge LLM" (one user message)."""


def correctness_messages(prediction: str, references: str | Iterable[str], *, normalize: bool = True) -> list[Message]:
    """Messages for the correctness judge (B.4).

    Args:
        prediction: The extracted final answer.
        references: The gold answers.
        normalize: Normalize prediction and references (the prompt says "normalized prediction" / "normalized
            golden"); ``False`` sends them verbatim.

    Returns:
        One user message; the judge answers YES or NO.

    >>> "Prediction: eiffel tower" in correctness_messages("The Eiffel Tower", ["Eiffel Tower"])[0]["content"]
    True
    """
    shown = normalize_answer(prediction) if normalize else prediction
    text = JUDGE_TEMPLATE.format(prediction=shown, references=format_answers(references, normalize))
    return [{"role": "user", "content": text}]


# --- parser ------------------------------------------------------------------------------------------------------

_WORD = re.compile(r"[A-Za-z]+")


def parse_yes_no(text: str) -> bool:
    """Parses the B.4 verdict: ``YES`` or ``NO``.

    Accepted: a reply whose first word is yes/no (any case, with emphasis or punctuation), or a reply in which
    exactly one of the two words occurs (``"Answer: NO"``). Rejected: replies with neither, or with both when the
    first word is neither. A reasoning model's ``<think>`` block is removed first.

    Args:
        text: The judge's reply.

    Returns:
        True for YES, False for NO.

    Raises:
        ParseError: The reply does not settle on one of YES / NO.

    >>> parse_yes_no("YES")
    True
    >>> parse_yes_no("**No.** The prediction names another person.")
    False
    >>> parse_yes_no("Verdict: YES")
    True
    >>> parse_yes_no("maybe")
    Traceback (most recent call last):
    ...
    agentrag_verl.judges.parsers.ParseError: the reply says neither YES nor NO: 'maybe'
    """
    text = strip_reasoning(check_reply(text))
    words = [w.lower() for w in _WORD.findall(text)]
    if words and words[0] in ("yes", "no"):
        return words[0] == "yes"
    found = {w for w in words if w in ("yes", "no")}
    if found == {"yes"}:
        return True
    if found == {"no"}:
        return False
    if not found:
        raise ParseError(f"the reply says neither YES nor NO: {text.strip()[:60]!r}")
    raise ParseError(f"the reply says both YES and NO: {text.strip()[:60]!r}")


# --- request -----------------------------------------------------------------------------------------------------


def correctness_request(
    prediction: str,
    references: str | Iterable[str],
    *,
    normalize: bool = True,
    params: Mapping[str, Any] | None = None,
) -> JudgeRequest[bool]:
    """The correctness judge (B.4): True = YES, the prediction matches a reference.

    Args:
        prediction: The extracted final answer.
        references: The gold answers.
        normalize: Send normalized texts, as the prompt states.
        params: Per-request sampling overrides.
    """
    return JudgeRequest(correctness_messages(prediction, references, normalize=normalize), parse_yes_no, params)


# --- failure policy ----------------------------------------------------------------------------------------------


class CorrectnessFallback(str, enum.Enum):
    """What decides correctness when the YES/NO judge fails."""

    EXACT_MATCH = "exact_match"
    """Exact match against the references (normalized as SQuAD / Search-R1 do)."""
    COVER_EXACT_MATCH = "cover_exact_match"
    """Cover exact match (a normalized reference is a substring of the prediction)."""
    INCORRECT = "incorrect"
    """The answer counts as wrong."""


def is_correct(
    verdict: Verdict[bool],
    prediction: str | None,
    references: str | Iterable[str],
    fallback: CorrectnessFallback | str = CorrectnessFallback.EXACT_MATCH,
) -> bool:
    """Answer correctness for the multi-stage reward: the judge's YES/NO, or the fallback when it failed.

    Args:
        verdict: The judge's verdict.
        prediction: The extracted answer (``None``: no answer, never correct).
        references: The gold answers.
        fallback: What decides when the verdict failed.

    Returns:
        Whether the answer counts as correct.

    >>> is_correct(Verdict(None, None, False, "timeout"), "Paris", ["paris"])
    True
    """
    fallback = choose_policy(CorrectnessFallback, fallback, "reward.reward_kwargs.judge_fallback")
    if prediction is None:
        return False
    if verdict.ok:
        return bool(verdict.value)
    if fallback is CorrectnessFallback.EXACT_MATCH:
        return exact_match(prediction, references) == 1.0
    if fallback is CorrectnessFallback.COVER_EXACT_MATCH:
        return cover_exact_match(prediction, references) == 1.0
    return False
