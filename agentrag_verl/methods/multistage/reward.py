"""Multi-stage reward of "Learning When to Search" (decisions: ``docs/methods/multistage.md#decisions``).

Paper: Learning When to Search: multi-stage reward for reasoning models in agentic RAG, §3 (answer reward with
stages, search reward Eq. 7-9, format reward), Table 4 ablations.

Total ``r = r_a + r_s + r_f`` (:func:`total_reward`):

- r_a (:func:`answer_reward`), β = 0.3. Stage 1: correct 1.0, wrong ``-1 + β·RC``. Stage 2: correct
  ``1 - β·RC``, wrong -1.0.
- r_s (:func:`search_reward`, Eq. 9): RC ≤ 1: 0 if the query is concise (RC = 0 counts as concise), -1.0 if not;
  RC > 1: ``-avg_sim``, the mean pairwise cosine similarity of the query embeddings.
- r_f (:func:`format_reward`): +1.0 when the response matches one of the two structures, else -1.0.

Decisions, parameters here:

- ``pairwise="mean"`` (default, the text's "mean of pairwise similarities": sum over pairs i<j divided by the
  number of pairs ``N(N-1)/2``); ``pairwise="eq8"`` divides by ``N(N-1)`` as Eq. 8 prints, halving it.
- Conciseness is rule-based (the paper names the rules, not thresholds): :class:`ConcisenessRules`; no leading
  question word, no trailing ``?``, at most ``max_query_words`` words, stopword/preposition ratio at most
  ``max_stopword_ratio``. The question words are the interrogatives (what, who, whom, whose, which, when, where,
  why, how), the paper's "question words". Auxiliaries (is, can, will, ...) do not count as question words by
  default: they open names as often as questions ("Will Smith birth date", "Can Tho population"), and a yes/no
  question usually ends in ``?`` or is stopword-heavy, which the other rules catch.
  ``ConcisenessRules(auxiliary_openers=True)`` (:data:`AUXILIARY_OPENERS`) restores the stricter reading.
- ``use_search_reward=False`` is the Table 4 "w/o search reward" ablation; stage 1 / stage 2 alone are the
  "w/o stage two" / "w/o stage one" ablations.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "QUESTION_WORDS",
    "AUXILIARY_OPENERS",
    "ConcisenessRules",
    "is_concise",
    "answer_reward",
    "search_reward",
    "format_reward",
    "total_reward",
    "average_pairwise_similarity",
    "stage_for_step",
    "restage",
]

QUESTION_WORDS = frozenset("what who whom whose which when where why how".split())
"""Interrogatives: a query starting with one is a natural-language question, not keywords."""
AUXILIARY_OPENERS = frozenset("is are was were do does did can could should would will".split())
"""Auxiliaries that open yes/no questions; leading question words only with ``auxiliary_openers`` (module docs)."""
STOPWORDS = frozenset(
    (
        "a an the of in on at to for from by with about as into onto over under between through during before after "
        "and or but is are was were be been being do does did that this these those it its which who whom whose "
        "what when where why how there their they he she his her him"
    ).split()
)


@dataclass(frozen=True)
class ConcisenessRules:
    """Rule-based query conciseness (multi-stage paper §3: "avoid redundant question words, prepositions, and
    irrelevant modifiers"). Thresholds are ours (the paper gives none)."""

    max_query_words: int = 12
    """Most words a concise query may have."""
    max_stopword_ratio: float = 0.5
    """Largest fraction of stopwords/prepositions among the query's words."""
    question_words: frozenset[str] = field(default=QUESTION_WORDS)
    """Words a concise query may not start with."""
    auxiliary_openers: bool = False
    """Also treat :data:`AUXILIARY_OPENERS` (is, can, will, ...) as question words (the stricter reading)."""
    stopwords: frozenset[str] = field(default=STOPWORDS)
    """Words counted by ``max_stopword_ratio``."""


def is_concise(query: str, rules: ConcisenessRules | None = None) -> bool:
    """Whether a query is concise: keywords, not a natural-language question.

    >>> is_concise("Eiffel Tower height"), is_concise("Will Smith birth date")
    (True, True)
    >>> is_concise("What is the height of the Eiffel Tower?"), is_concise("what year was Will Smith born")
    (False, False)
    >>> is_concise("Will Smith birth date", ConcisenessRules(auxiliary_openers=True))
    False
    """
    rules = rules or ConcisenessRules()
    text = (query or "").strip()
    if not text or text.endswith("?"):
        return False
    words = [w.strip(".,;:!\"'()").lower() for w in text.split()]
    words = [w for w in words if w]
    openers = rules.question_words | AUXILIARY_OPENERS if rules.auxiliary_openers else rules.question_words
    if not words or len(words) > rules.max_query_words or words[0] in openers:
        return False
    return sum(w in rules.stopwords for w in words) / len(words) <= rules.max_stopword_ratio


def _cosine(u: Sequence[float], v: Sequence[float]) -> float:
    nu = math.sqrt(sum(x * x for x in u))
    nv = math.sqrt(sum(x * x for x in v))
    if nu == 0 or nv == 0:
        return 0.0
    return sum(a * b for a, b in zip(u, v, strict=True)) / (nu * nv)


def average_pairwise_similarity(
    embeddings: Sequence[Sequence[float]], pairwise: Literal["mean", "eq8"] = "mean"
) -> float:
    """``avg_sim`` of Eq. 7-8 over the query embeddings (cosine, Eq. 7).

    >>> average_pairwise_similarity([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])  # pairs 1, 0, 0 -> 1/3
    0.3333333333333333
    >>> average_pairwise_similarity([[1.0, 0.0], [1.0, 0.0]], pairwise="eq8")  # 1 / (2*1)
    0.5
    """
    n = len(embeddings)
    if n < 2:
        return 0.0
    total = sum(_cosine(embeddings[i], embeddings[j]) for i in range(n) for j in range(i + 1, n))
    if pairwise == "mean":
        return total / (n * (n - 1) / 2)
    if pairwise == "eq8":
        return total / (n * (n - 1))
    raise ValueError(
        f"Unknown pairwise mode {pairwise!r}; choose one of ['mean', 'eq8']; set reward.reward_kwargs.pairwise"
    )


def answer_reward(correct: bool, retrieval_count: int, stage: Literal[1, 2], beta: float = 0.3) -> float:
    """Stage-dependent answer reward r_a (§3, "multi-stage reward").

    Args:
        correct: Whether the answer is correct (LLM judge YES in the paper).
        retrieval_count: RC, the number of retrieval calls.
        stage: 1 (wrong answers earn ``β·RC`` back: search more) or 2 (correct answers pay ``β·RC``).
        beta: β (0.3).

    >>> answer_reward(True, 2, 1), answer_reward(False, 2, 1)
    (1.0, -0.4)
    >>> answer_reward(True, 2, 2), answer_reward(False, 2, 2)
    (0.4, -1.0)
    """
    if stage not in (1, 2):
        raise ValueError(f"Unknown multi-stage stage {stage!r}; choose 1 or 2; set reward.reward_kwargs.stage")
    rc = max(0, int(retrieval_count))
    if stage == 1:
        return 1.0 if correct else round(-1.0 + beta * rc, 12)
    return round(1.0 - beta * rc, 12) if correct else -1.0


def search_reward(
    queries: Sequence[str],
    embeddings: Sequence[Sequence[float]] | None = None,
    concise: Callable[[str], bool] | ConcisenessRules | None = None,
    pairwise: Literal["mean", "eq8"] = "mean",
) -> float:
    """Search reward r_s (Eq. 9). Range ``[-1, 1]`` (``[-1, 0]`` for non-negative similarities).

    Args:
        queries: The trajectory's queries (RC = their number).
        embeddings: One embedding per query; needed when RC > 1.
        concise: Conciseness test for RC = 1 (a callable, or rules for :func:`is_concise`).
        pairwise: ``"mean"`` (default) or ``"eq8"`` (Eq. 8's N(N-1) denominator).

    >>> search_reward([]), search_reward(["Eiffel Tower height"]), search_reward(["What is it?"])
    (0.0, 0.0, -1.0)
    >>> search_reward(["a b", "a c"], [[1.0, 0.0], [0.0, 1.0]])
    -0.0
    """
    if len(queries) <= 1:
        if not queries:
            return 0.0
        check = concise if callable(concise) else (lambda q: is_concise(q, concise))
        return 0.0 if check(queries[0]) else -1.0
    if embeddings is None or len(embeddings) != len(queries):
        raise ValueError(
            f"search_reward needs one embedding per query ({len(queries)}); got {embeddings and len(embeddings)}"
        )
    return -average_pairwise_similarity(embeddings, pairwise)


def format_reward(ok: bool) -> float:
    """Format reward r_f: +1.0 when the response matches one of the two structures, else -1.0.

    >>> format_reward(True), format_reward(False)
    (1.0, -1.0)
    """
    return 1.0 if ok else -1.0


def total_reward(r_a: float, r_s: float, r_f: float, *, use_search_reward: bool = True) -> float:
    """``r = r_a + r_s + r_f``; ``use_search_reward=False`` drops r_s (Table 4 ablation).

    >>> total_reward(0.4, -0.5, 1.0), total_reward(0.4, -0.5, 1.0, use_search_reward=False)
    (0.9, 1.4)
    """
    return r_a + (r_s if use_search_reward else 0.0) + r_f


def stage_for_step(global_step: int | None, stage: Literal[1, 2] | None, switch_step: int | None) -> Literal[1, 2]:
    """The stage in force: a fixed ``stage`` (two-run schedule) wins; else stage 2 from ``switch_step`` on.

    >>> stage_for_step(10, None, 50), stage_for_step(50, None, 50), stage_for_step(99, 1, 50)
    (1, 2, 1)
    """
    if stage is not None:
        if stage not in (1, 2):
            raise ValueError(f"Unknown multi-stage stage {stage!r}; choose 1 or 2; set reward.reward_kwargs.stage")
        return stage
    if switch_step is None or global_step is None:
        return 1
    return 2 if global_step >= switch_step else 1


def restage(
    total: float, retrieval_count: int, from_stage: Literal[1, 2], to_stage: Literal[1, 2], beta: float = 0.3
) -> float:
    """A trajectory's total reward ``r`` scored in ``from_stage``, as ``to_stage`` scores it.

    Only r_a depends on the stage, and by the same amount for right and wrong answers: stage 1 pays ``β·RC`` more
    (a right answer 1 against ``1 - β·RC``, a wrong one ``-1 + β·RC`` against -1). So the stage of a scored
    trajectory can change without its judge verdict, which a training log does not keep. A run with the stage
    switch inside it compares its steps on one scale with this (``benchmarks/learning.py``).

    >>> restage(0.4 + 0.0 + 1.0, 2, 2, 1), restage(-0.4 - 0.2 + 1.0, 2, 1, 2)
    (2.0, -0.2)
    >>> restage(1.7, 1, 2, 2)
    1.7
    """
    rc = max(0, int(retrieval_count))
    return round(total + answer_reward(True, rc, to_stage, beta) - answer_reward(True, rc, from_stage, beta), 12)
