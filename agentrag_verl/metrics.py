"""Answer metrics shared by evaluation and rewards (``docs/decisions.md#answer-metrics``).

Normalization is SQuAD's, as used by Search-R1 and FlashRAG: lowercase, delete ASCII punctuation
(``string.punctuation``), remove the articles *a/an/the*, collapse whitespace. HiPRAG's code replaces
punctuation by a space instead (``punct="space"``), so "U.S.-born" becomes "u s born" rather than "usborn".

Decisions where the sources are silent:

- ``pred=None`` (no answer extracted) scores 0 on every metric.
- Golds may be one string or any sequence of strings (verl hands ``ground_truth.target`` over as a numpy
  array); non-string entries are converted with ``str``.
- Cover match ignores golds that normalize to the empty string: the empty string is a substring of
  everything, so such a gold would mark any prediction correct.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Literal

__all__ = [
    "normalize_answer",
    "exact_match",
    "cover_exact_match",
    "f1_score",
    "extract_answer",
]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_DELETE_PUNCT = str.maketrans("", "", string.punctuation)
_SPACE_PUNCT = str.maketrans(string.punctuation, " " * len(string.punctuation))
_ANSWER_SPAN = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
# FlashRAG's F1 rule: these answers score 0 against anything but themselves.
_SPECIAL_ANSWERS = frozenset({"yes", "no", "noanswer"})


def normalize_answer(s: str, punct: Literal["delete", "space"] = "delete") -> str:
    """Normalize an answer string for comparison.

    Args:
        s: The answer text.
        punct: ``"delete"`` removes ASCII punctuation (SQuAD / Search-R1 / FlashRAG); ``"space"`` replaces it
            with a space (HiPRAG's code).

    Returns:
        Lowercased text without punctuation and articles, single-spaced.

    >>> normalize_answer("The  Eiffel Tower!")
    'eiffel tower'
    >>> normalize_answer("U.S.-born", punct="space")
    'u s born'
    """
    if punct == "delete":
        table = _DELETE_PUNCT
    elif punct == "space":
        table = _SPACE_PUNCT
    else:
        raise ValueError(
            f'Unknown punct mode {punct!r}; choose "delete" (SQuAD/FlashRAG) or "space" (punctuation becomes a space).'
        )
    text = s.lower().translate(table)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _as_gold_list(golds: str | Iterable[str]) -> list[str]:
    if isinstance(golds, str):
        return [golds]
    if golds is None:
        raise ValueError("golds is None; pass the gold answer string or a list of gold answers.")
    return [g if isinstance(g, str) else str(g) for g in golds]


def _best_over_golds(
    pred: str | None, golds: str | Iterable[str], punct: Literal["delete", "space"], score: Callable[[str, str], float]
) -> float:
    """The best ``score(normalized prediction, normalized gold)`` over the golds; 0.0 without a prediction."""
    if pred is None:
        return 0.0
    p = normalize_answer(pred, punct)
    return max((score(p, normalize_answer(g, punct)) for g in _as_gold_list(golds)), default=0.0)


def exact_match(pred: str | None, golds: str | Iterable[str], punct: Literal["delete", "space"] = "delete") -> float:
    """1.0 if the normalized prediction equals any normalized gold, else 0.0.

    >>> exact_match("the Eiffel Tower", ["Eiffel Tower", "La tour Eiffel"])
    1.0
    >>> exact_match("Eiffel", "Eiffel Tower")
    0.0
    """
    return _best_over_golds(pred, golds, punct, lambda p, g: float(p == g))


def cover_exact_match(
    pred: str | None, golds: str | Iterable[str], punct: Literal["delete", "space"] = "delete"
) -> float:
    """Cover exact match (CEM, FlashRAG ``acc`` / Sub-EM): 1.0 if any normalized gold is a substring of the
    normalized prediction.

    >>> cover_exact_match("It was built by Gustave Eiffel.", ["Gustave Eiffel"])
    1.0
    >>> cover_exact_match("Eiffel", ["Gustave Eiffel"])
    0.0
    """
    return _best_over_golds(pred, golds, punct, lambda p, g: float(bool(g) and g in p))


def f1_score(pred: str | None, golds: str | Iterable[str], punct: Literal["delete", "space"] = "delete") -> float:
    """Token-level F1 between normalized texts, maximized over golds (FlashRAG rule: if either side normalizes
    to yes/no/noanswer and they differ, that gold scores 0).

    >>> round(f1_score("Gustave Eiffel engineer", ["Gustave Eiffel"]), 4)
    0.8
    >>> f1_score("no", ["yes"])
    0.0
    """
    return _best_over_golds(pred, golds, punct, _token_f1)


def _token_f1(p: str, g: str) -> float:
    if (p in _SPECIAL_ANSWERS or g in _SPECIAL_ANSWERS) and p != g:
        return 0.0
    p_tokens, g_tokens = p.split(), g.split()
    num_same = sum((Counter(p_tokens) & Counter(g_tokens)).values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(p_tokens)
    recall = num_same / len(g_tokens)
    return 2 * precision * recall / (precision + recall)


def extract_answer(text: str | None) -> str | None:
    """Return the stripped content of the **last** ``<answer>...</answer>`` span, or None if there is none.

    Pass only model-generated text: an answer inside the prompt or an injected observation must not count.

    >>> extract_answer("<answer>Paris</answer> wait <answer> Lyon </answer>")
    'Lyon'
    >>> extract_answer("<answer>unclosed") is None
    True
    """
    if not text:
        return None
    last = None
    for last in _ANSWER_SPAN.finditer(text):
        pass
    return None if last is None else last.group(1).strip()
