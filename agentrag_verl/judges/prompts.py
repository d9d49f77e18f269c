"""Template helpers shared by every judge prompt: the chat message type, slot listing and gold-answer formatting.

The papers' own prompts live with their method (``agentrag_verl/methods/<paper>/judge.py``); this module holds only
what they all use. Decision: several gold answers are joined with ``" | "`` (after normalization they contain no
punctuation, so the separator is unambiguous).
"""

from __future__ import annotations

import string
from collections.abc import Iterable

from agentrag_verl.metrics import normalize_answer

__all__ = ["Message", "ANSWER_SEPARATOR", "template_slots", "format_answers", "system_user"]

Message = dict[str, str]
"""A chat message: ``{"role": "system" | "user" | "assistant", "content": str}``."""

ANSWER_SEPARATOR = " | "
"""Joins several gold answers in one slot."""


def template_slots(template: str) -> list[str]:
    """The named ``{slots}`` of a template, in order of appearance.

    >>> template_slots("<reasoning>{reasoning}</reasoning>\\n<conclusion>{conclusion}</conclusion>")
    ['reasoning', 'conclusion']
    """
    return [name for _, name, _, _ in string.Formatter().parse(template) if name]


def format_answers(answers: str | Iterable[str], normalize: bool = False) -> str:
    """Formats one or several gold answers for a prompt slot.

    Args:
        answers: A string or an iterable of strings (verl hands ``ground_truth.target`` over as a numpy array).
        normalize: Apply :func:`~agentrag_verl.metrics.normalize_answer` to each.

    Returns:
        The answers joined with :data:`ANSWER_SEPARATOR`.

    >>> format_answers(["The Eiffel Tower", "Eiffel Tower"], normalize=True)
    'eiffel tower | eiffel tower'
    """
    items = [answers] if isinstance(answers, str) else [str(a) for a in answers]
    if normalize:
        items = [normalize_answer(a) for a in items]
    return ANSWER_SEPARATOR.join(items)


def system_user(system: str, user: str) -> list[Message]:
    """``[system, user]`` chat messages.

    >>> [m["role"] for m in system_user("You are a judge.", "Statement 1: ...")]
    ['system', 'user']
    """
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]
