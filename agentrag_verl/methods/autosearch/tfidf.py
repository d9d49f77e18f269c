"""TF-IDF cosine similarity for AutoSearch's repeated-query rule (AutoSearch §4.1, Eq. 1;
``docs/methods/autosearch.md#decisions``).

A retrieval step is invalid when its query repeats an earlier one; the authors' code calls a query a repeat
when its TF-IDF cosine similarity to an earlier query exceeds 0.8. We implement TF-IDF with the standard
library, using the conventions of scikit-learn's ``TfidfVectorizer`` defaults (what such code uses):

- tokens: lowercase, regex ``(?u)\\b\\w\\w+\\b`` (words of two or more word characters);
- term frequency: raw counts; idf: smoothed, ``ln((1 + n) / (1 + df)) + 1``; vectors L2-normalized.

Decisions: the vectorizer for step t is fitted on the queries of steps 1..t (what is known at step t);
two queries equal after ``strip().lower()`` are repeats even when they have no token (scikit-learn would
give similarity 0, or fail on an empty vocabulary).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

__all__ = ["tfidf_vectors", "cosine", "repeated_queries", "REPEAT_THRESHOLD"]

REPEAT_THRESHOLD = 0.8
"""Cosine similarity above which a query repeats an earlier one (AutoSearch authors' code;
``docs/methods/autosearch.md``)."""

_TOKEN = re.compile(r"(?u)\b\w\w+\b")


def tfidf_vectors(texts: Sequence[str]) -> list[dict[str, float]]:
    """L2-normalized TF-IDF vectors (sparse dicts) of ``texts``, fitted on ``texts``.

    >>> v = tfidf_vectors(["what genre is suits", "what genre is suits"])
    >>> round(cosine(v[0], v[1]), 6)
    1.0
    """
    counts = [Counter(_TOKEN.findall(t.lower())) for t in texts]
    n = len(texts)
    df: Counter[str] = Counter()
    for c in counts:
        df.update(c.keys())
    idf = {term: math.log((1 + n) / (1 + d)) + 1.0 for term, d in df.items()}
    vectors = []
    for c in counts:
        v = {term: tf * idf[term] for term, tf in c.items()}
        norm = math.sqrt(sum(x * x for x in v.values()))
        vectors.append({term: x / norm for term, x in v.items()} if norm > 0 else {})
    return vectors


def cosine(u: dict[str, float], v: dict[str, float]) -> float:
    """Cosine similarity of two L2-normalized sparse vectors (0 when either is empty)."""
    if len(u) > len(v):
        u, v = v, u
    return sum(x * v.get(term, 0.0) for term, x in u.items())


def repeated_queries(queries: Sequence[str], threshold: float = REPEAT_THRESHOLD) -> list[bool]:
    """For each query, whether it repeats any earlier one (TF-IDF cosine ``> threshold``).

    Args:
        queries: The trajectory's queries in order.
        threshold: Similarity above which a query is a repeat.

    Returns:
        One flag per query; the first query is never a repeat.

    >>> repeated_queries(["what genre is suits", "what genre is suits", "what is the genre of suits"])
    [False, True, False]
    """
    flags = []
    for t, query in enumerate(queries):
        if t == 0:
            flags.append(False)
            continue
        key = query.strip().lower()
        if any(key == q.strip().lower() for q in queries[:t]):
            flags.append(True)
            continue
        vectors = tfidf_vectors(queries[: t + 1])
        flags.append(any(cosine(vectors[t], vectors[j]) > threshold for j in range(t)))
    return flags
