"""One step indexing of a trajectory, shared by the agent loop (which writes the step records) and by the reward
parts and the evaluation (which read them). Pure Python; imports nothing heavy.

The agent loop writes one record per action of the model (``agentrag_steps``, :func:`step_record`); auxiliary
generations (HiPRAG re-answers, AutoSearch intermediate answers) carry the index of the record they belong to
(``"step"``). Everything that pairs a step with its position in the response, its intermediate answer or its
re-answer goes through this module:

- **Retrieval steps** are the records that received an observation (``observed``): every search action the
  environment answered, including an empty query (answered with an error notice) and a failed retrieval. These are
  AutoSearch's retrieval steps t = 1..T-1 (Eq. 1 counts each turn followed by an ``<information>`` block) and
  HiPRAG's search steps. Records written before the ``observed`` key existed fall back to ``kind == "search"``.
- :func:`intermediate_answers` maps AutoSearch's intermediate answers to retrieval steps t (Eq. 4-6),
  :func:`step_positions` the step-end token of every retrieval step and of the answer step T,
  :func:`retrieval_step_count` the number of retrieval steps (AutoSearch's search depth SD), and
  :func:`search_step_reanswers` pairs HiPRAG's parsed search steps with their policy re-answers.

>>> fields = {"agentrag_steps": [
...     {"kind": "invalid", "query": "", "end_token_index": 4, "observed": True},
...     {"kind": "search", "query": "capital of France", "end_token_index": 11, "observed": True},
...     {"kind": "answer", "end_token_index": 20, "observed": False}],
...     "agentrag_intermediate_answers": [{"step": 0, "answer": "Lyon"}, {"step": 1, "answer": "Paris"}]}
>>> intermediate_answers(fields, 2), step_positions(fields, 2)
((['Lyon', 'Paris'], 0), ([4, 11, 20], False))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from . import fields as F

__all__ = [
    "step_record",
    "step_records",
    "is_retrieval",
    "retrieval_record_indices",
    "retrieval_step_count",
    "intermediate_answers",
    "step_positions",
    "search_step_reanswers",
    "normalize_query",
]


def step_record(
    kind: str,
    end_token_index: int,
    *,
    observed: bool = False,
    query: str | None = None,
    doc_ids: Sequence[str] = (),
    retriever_error: str | None = None,
) -> dict[str, Any]:
    """One ``agentrag_steps`` record (plain JSON types), as the agent loops write it.

    Args:
        kind: ``"search"`` (an executed query), ``"answer"`` or ``"invalid"`` (malformed or empty action).
        end_token_index: Index into ``response_ids`` of the action's last model-generated token.
        observed: The environment appended an observation after the action (a retrieval step).
        query: The query of a search action (``""`` for an empty one).
        doc_ids: Ids of the retrieved passages.
        retriever_error: The retriever's failure, if any.

    >>> step_record("search", 7, observed=True, query="q")["observed"]
    True
    """
    return {
        F.STEP_KIND: kind,
        F.STEP_QUERY: query,
        F.STEP_DOC_IDS: list(doc_ids),
        F.STEP_END_TOKEN_INDEX: int(end_token_index),
        F.STEP_RETRIEVER_ERROR: retriever_error,
        F.STEP_OBSERVED: bool(observed),
    }


def _scalar(value: Any) -> Any:
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return value.item()
    return value


def _records(value: Any) -> list[Mapping[str, Any]]:
    value = _scalar(value)
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [r for r in value if isinstance(r, Mapping)]
    return []


def _int(value: Any, default: int = -1) -> int:
    value = _scalar(value)
    if isinstance(value, bool) or not (isinstance(value, int) or hasattr(value, "__index__")):
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def step_records(extra_fields: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """The ``agentrag_steps`` records of a sample (non-dict entries dropped)."""
    return _records((extra_fields or {}).get(F.STEPS))


def is_retrieval(record: Mapping[str, Any]) -> bool:
    """Whether a step record is a retrieval step: it received an observation (legacy records: a search).

    >>> is_retrieval({"kind": "invalid", "query": "", "observed": True}), is_retrieval({"kind": "search"})
    (True, True)
    """
    observed = record.get(F.STEP_OBSERVED)
    if isinstance(observed, bool):
        return observed
    return record.get(F.STEP_KIND) == F.KIND_SEARCH


def retrieval_record_indices(extra_fields: Mapping[str, Any] | None) -> list[int]:
    """Indices into ``agentrag_steps`` of the retrieval steps, in order (retrieval step t = position + 1)."""
    return [i for i, r in enumerate(step_records(extra_fields)) if is_retrieval(r)]


def retrieval_step_count(extra_fields: Mapping[str, Any] | None) -> int | None:
    """Number of retrieval steps the loop recorded (AutoSearch's T - 1, the search depth SD); ``None`` without
    step records."""
    records = step_records(extra_fields)
    return sum(1 for r in records if is_retrieval(r)) if records else None


def intermediate_answers(extra_fields: Mapping[str, Any] | None, n: int) -> tuple[list[str | None], int]:
    """AutoSearch's intermediate answer a_t of each retrieval step t = 1..n (Eq. 4-5), and how many are missing.

    A record's ``step`` indexes ``agentrag_steps``; it is mapped to that step's retrieval ordinal, so a failed
    generation leaves a gap instead of shifting later answers. When no step record is a retrieval step (no records:
    a response scored outside the agent loop) the answers are taken in order.

    >>> fields = {"agentrag_steps": [{"kind": "search"}, {"kind": "search"}],
    ...           "agentrag_intermediate_answers": [{"step": 1, "answer": "Paris"}]}
    >>> intermediate_answers(fields, 2)
    ([None, 'Paris'], 1)
    """
    from agentrag_verl.metrics import extract_answer

    recs = _records((extra_fields or {}).get(F.INTERMEDIATE_ANSWERS))
    ordinal = {index: t for t, index in enumerate(retrieval_record_indices(extra_fields))}
    answers: list[str | None] = [None] * n
    found = 0
    recs.sort(key=lambda r: _int(r.get(F.AUX_STEP), 0))
    for k, rec in enumerate(recs):
        slot = ordinal.get(_int(rec.get(F.AUX_STEP))) if ordinal else k
        if slot is None or slot >= n or answers[slot] is not None:
            continue
        ans, text = rec.get(F.AUX_ANSWER), rec.get(F.AUX_TEXT)
        if isinstance(ans, str):
            answers[slot] = ans
        elif isinstance(text, str):
            answers[slot] = extract_answer(text)
        found += answers[slot] is not None
    return answers, n - found


def step_positions(extra_fields: Mapping[str, Any] | None, n_retrieval: int) -> tuple[list[int], bool]:
    """Step-end token index of each retrieval step t = 1..n and of the answer step T, and whether any fell back to
    -1 (the last response token) because the records do not match ``n_retrieval`` retrieval steps.

    >>> step_positions({}, 2)
    ([-1, -1, -1], True)
    >>> step_positions({"agentrag_steps": [{"kind": "search", "end_token_index": 4},
    ...                                    {"kind": "answer", "end_token_index": 9}]}, 1)
    ([4, 9], False)
    """
    records = step_records(extra_fields)
    if not records:
        return [-1] * (n_retrieval + 1), True
    ends = [_int(r.get(F.STEP_END_TOKEN_INDEX)) for r in records if is_retrieval(r)]
    final = records[-1]
    final_end = -1 if is_retrieval(final) else _int(final.get(F.STEP_END_TOKEN_INDEX))
    pos = (ends + [-1] * n_retrieval)[:n_retrieval]
    return pos + [final_end], len(ends) != n_retrieval


def normalize_query(query: str | None) -> str:
    """Whitespace-collapsed, lower-cased query (the last-resort key of :func:`search_step_reanswers`).

    >>> normalize_query("  Capital of\\nFrance ")
    'capital of france'
    """
    return " ".join(str(query or "").split()).lower()


def search_step_reanswers(steps: Sequence[Any], extra_fields: Mapping[str, Any] | None) -> list[str | None]:
    """HiPRAG's over-search re-answer o' of each parsed step (``None`` for non-search steps and missing ones).

    The k-th parsed search step that has an observation is the k-th retrieval step of the loop's records, and its
    re-answer is the one whose ``step`` is that record's index. Only when that finds nothing (no step records,
    e.g. a response scored outside the agent loop, or a failed re-answer generation) is the re-answer looked up by
    the normalized query text.

    Args:
        steps: The parsed steps (:class:`agentrag_verl.formats.Step`: ``is_search``, ``query``, ``observation``).
        extra_fields: The agent loop's ``extra_fields``.

    >>> from agentrag_verl.formats import Step
    >>> parsed = [Step("non_search", (0, 1)), Step("search", (1, 2), query="", observation="query is empty"),
    ...           Step("search", (2, 3), query="Capital of France?", observation="Doc 1 ...")]
    >>> fields = {"agentrag_steps": [{"kind": "invalid", "query": "", "observed": True},
    ...                              {"kind": "search", "query": "capital of France", "observed": True}],
    ...           "agentrag_reanswers": [{"step": 1, "query": "capital of France", "text": "Paris"}]}
    >>> search_step_reanswers(parsed, fields)  # the non-search step and the empty query shift nothing
    [None, None, 'Paris']
    """
    by_record: dict[int, str] = {}
    by_query: dict[str, str] = {}
    for rec in _records((extra_fields or {}).get(F.REANSWERS)):
        text = rec.get(F.AUX_TEXT)
        if not isinstance(text, str):
            continue
        index = _int(rec.get(F.AUX_STEP))
        if index >= 0:
            by_record.setdefault(index, text)
        if isinstance(rec.get(F.AUX_QUERY), str):
            by_query.setdefault(normalize_query(rec[F.AUX_QUERY]), text)
    retrieval = retrieval_record_indices(extra_fields)
    out: list[str | None] = [None] * len(steps)
    k = 0
    for i, step in enumerate(steps):
        if not step.is_search:
            continue
        text = None
        if step.observation is not None:
            if k < len(retrieval):
                text = by_record.get(retrieval[k])
            k += 1
        if text is None:
            text = by_query.get(normalize_query(step.query))
        out[i] = text
    return out
