"""HiPRAG's rules in the stand-in judge server (:mod:`agentrag_verl.standin`; a stand-in, not a model).

- Figure 5 (over-search: are the step's conclusion and the policy's standalone re-answer "semantically
  equivalent"?): **True** when at least ``coverage`` (0.8) of the content words of the shorter statement occur in
  the other one, after SQuAD normalization, without stopwords and with a final "s" dropped. "The capital of Italy is
  Rome." and "Rome is the capital city of Italy." are equivalent; "... is Milan." is not.
- Figure 6 (under-search: is a non-search step correct?): **True**, always. Checking a step's facts needs world
  knowledge that rules do not have; answering "correct" makes every non-search step optimal, which is what HiPRAG's
  "over-search only" ablation (§5, ``under_search_detector: false``) counts. Runs against this server therefore
  train that ablation, and say so.
"""

from __future__ import annotations

import re

from agentrag_verl.methods.hiprag.judge import OVER_SEARCH_SYSTEM, UNDER_SEARCH_SYSTEM
from agentrag_verl.metrics import normalize_answer

__all__ = ["equivalent", "reply"]

_STOPWORDS = frozenset(
    "a an the of in on at to for by with from and or is are was were be been it its this that which who whom what "
    "when where how as into about than city town".split()
)
_STATEMENTS = re.compile(r"Statement 1:(.*)\nStatement 2:(.*)", re.S)


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
    """
    a, b = _content_words(statement), _content_words(other)
    if not a or not b:
        return False
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    return len(short & long_) / len(short) >= coverage


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
        return "<answer>True</answer>"
    return None
