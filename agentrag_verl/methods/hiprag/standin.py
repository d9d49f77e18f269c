"""HiPRAG's rules in the stand-in judge server (:mod:`agentrag_verl.standin`; a stand-in, not a model).

- Figure 5 (over-search: are the step's conclusion and the policy's standalone re-answer "semantically
  equivalent"?): **True** when at least ``coverage`` (0.8) of the content words of the shorter statement occur in
  the other one, after SQuAD normalization, without stopwords and with a final "s" dropped, and every name and number
  of the shorter statement (as in Figure 6 below) does too. "The capital of Italy is Rome." and "Rome is the capital
  city of Italy." are equivalent; "... is Milan." is not. The names and numbers carry the answer: a re-answer that
  restates the query ("In what year was the Royal Opera opened? The answer is 1843.") shares most words with a
  conclusion that answers it ("The Royal Opera opened in 1861."), and coverage alone called them equivalent.
- Figure 6 (under-search: is a step taken without a search factually correct?): checked against the stand-in's world
  (:func:`agentrag_verl.standin.world_passages`: by default the mini-wiki corpus and its common-knowledge answer
  table), as GPT-4.1-mini checks it against its own knowledge. **True** when one passage holds every name and number
  of the step's conclusion (capitalized words after the first, words with digits) and at least ``coverage`` (0.8) of
  its content words, as above. "The capital of Italy is Rome." is True; "... is Milan." and "Kessrow Bridge was
  built in 1861." (1761 in the corpus) are False; so is a conclusion with no content words, or a claim the world
  does not hold. The reasoning is not checked (Figure 6's second question, internal logic, needs reading, not
  rules).
"""

from __future__ import annotations

import re
from typing import Any

from agentrag_verl.methods.hiprag.judge import OVER_SEARCH_SYSTEM, UNDER_SEARCH_SYSTEM
from agentrag_verl.metrics import normalize_answer
from agentrag_verl.standin import world_passages

__all__ = ["equivalent", "supported", "reply"]

_STOPWORDS = frozenset(
    "a an the of in on at to for by with from and or is are was were be been it its this that which who whom what "
    "when where how as into about than city town".split()
)
_STATEMENTS = re.compile(r"Statement 1:(.*)\nStatement 2:(.*)", re.S)
_CONCLUSION = re.compile(r"<conclusion>(.*?)</conclusion>", re.S)


def _content_words(text: str) -> set[str]:
    """Normalized words without stopwords, a final "s" dropped ("Italy's" and "Italy", "metres" and "metre" match)."""
    words = (w for w in normalize_answer(text).split() if w not in _STOPWORDS)
    return {w[:-1] if len(w) > 3 and w.endswith("s") else w for w in words}


def equivalent(statement: str, other: str, coverage: float = 0.8) -> bool:
    """The over-search rule (module docstring).

    >>> equivalent("The capital of Italy is Rome.", "Rome is the capital city of Italy.")
    True
    >>> equivalent("The capital of Italy is Rome.", "The capital of Italy is Milan.")
    False
    >>> equivalent("The Royal Opera opened in 1861.", "When was the Royal Opera opened? The answer is 1843.")
    False
    """
    a, b = _content_words(statement), _content_words(other)
    if not a or not b:
        return False
    (short, text), long_ = ((a, statement), b) if len(a) <= len(b) else ((b, other), a)
    return len(short & long_) / len(short) >= coverage and _entities(text) <= long_


def _entities(text: str) -> set[str]:
    """The names and numbers of a statement: capitalized words after the first word, and words with a digit."""
    words = re.findall(r"[^\W_][\w'’.-]*", text)
    picked = " ".join(w for i, w in enumerate(words) if any(c.isdigit() for c in w) or (i > 0 and w[0].isupper()))
    return _content_words(picked)


_cache: dict[str, Any] = {}


def _passage_words() -> list[set[str]]:
    """The content words of each passage of the stand-in's world (recomputed when the world changes)."""
    passages = world_passages()
    if _cache.get("passages") is not passages:
        _cache.update(passages=passages, words=[_content_words(p) for p in passages])
    return _cache["words"]


def supported(conclusion: str, coverage: float = 0.8) -> bool:
    """The under-search rule (module docstring): does one passage of the world state ``conclusion``?

    >>> supported("The capital of Italy is Rome."), supported("The capital of Italy is Milan.")
    (True, False)
    """
    words, names = _content_words(conclusion), _entities(conclusion)
    if not words:
        return False
    need = coverage * len(words)
    return any(names <= p and len(words & p) >= need for p in _passage_words())


def reply(system: str, user: str) -> str | None:
    """The stand-in's reply to a HiPRAG judge request; None for any other prompt.

    Raises:
        ValueError: An over-search request without its two statements.
    """
    if system == OVER_SEARCH_SYSTEM:
        m = _STATEMENTS.search(user)
        if not m:
            raise ValueError("over-search request without 'Statement 1: ...\\nStatement 2: ...'")
        return f"<answer>{equivalent(m.group(1), m.group(2))}</answer>"
    if system == UNDER_SEARCH_SYSTEM:
        m = _CONCLUSION.search(user)
        if not m:
            raise ValueError("under-search request without '<conclusion>...</conclusion>'")
        return f"<answer>{supported(m.group(1))}</answer>"
    return None
