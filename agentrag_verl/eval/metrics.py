"""Per-question evaluation metrics and their aggregation per dataset (``docs/decisions.md#evaluation``). Pure
functions, no I/O.

Per question (:func:`question_metrics`), from the model's response and the agent loop's ``extra_fields``:

- ``em`` / ``cem`` / ``f1`` of the final answer (:mod:`agentrag_verl.metrics`; the answer is what the format's
  parser extracts from model text, so an answer inside retrieved passages never counts);
- ``format_ok``: the format's ``is_valid`` (Search-P1 Table 6 format compliance);
- ``n_search``: retrieval steps (RC / search depth SD): the search actions the environment answered with an
  observation, an empty query included, counted by :mod:`agentrag_verl.agent_loops.steps` (without step records:
  ``agentrag_num_searches``, else the parse);
- ``<method>``: each method's own metrics of the trajectory, or None (its :class:`~agentrag_verl.eval.hooks.
  EvalHooks`, found through the registry; e.g. AutoSearch's intermediate answers' EM, t_c and over-search).

Aggregated per dataset (:func:`aggregate`):

======================  =====================================================================================
key                     definition
======================  =====================================================================================
``em`` ``cem`` ``f1``   means over questions (fractions; tables show percentages)
``judge_acc``           mean judge correctness (multi-stage B.4 YES/NO) over judged questions; None without judge
``search_depth``        mean retrieval calls per question (SD)
``se``                  AutoSearch SE = EM / SD, in EM percentage points per search; None when SD = 0
each method's keys      its :meth:`~agentrag_verl.eval.hooks.EvalHooks.dataset` (e.g. ``autosearch_osr``,
                        ``hiprag_osr``, ``hiprag_usr``; definitions in the method's ``evaluation.py``)
``format_compliance``   mean ``format_ok``
``tokens``              mean policy tokens per question: trajectory tokens the model generated + auxiliary
                        generations (a method loop's re-answers or intermediate answers)
``reward/<design>``     mean reward of each reward design that scored the trajectories
======================  =====================================================================================

Per bucket (:func:`bucket_of`, when the questions carry the knowledge probe's labels, ``agentrag-verl data
knowledge``): the same metrics over the questions of each bucket, pooled over datasets, plus ``searched``, the share
of questions answered with at least one search. The buckets: ``known`` (the policy answers the question right
closed-book at or above the probe's threshold), ``common_unknown`` (common-knowledge questions it does not know) and
``corpus`` (the other questions it does not know: only the corpus holds their answer).

Decisions: the ``average`` row is the unweighted mean of the per-dataset values (the papers' "Avg." column), skipping
datasets where a metric is None; a failed judge verdict is left out of ``judge_acc`` / OSR / USR and counted in
``judge_failures`` (never scored as right or wrong); SE of the average row is the mean of the per-dataset SEs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentrag_verl.agent_loops import fields as F
from agentrag_verl.agent_loops.steps import retrieval_step_count
from agentrag_verl.data.knowledge import KNOWLEDGE_KEY
from agentrag_verl.eval.hooks import method_hooks
from agentrag_verl.metrics import cover_exact_match, exact_match, f1_score

__all__ = [
    "question_metrics",
    "search_efficiency",
    "aggregate",
    "table_columns",
    "bucket_of",
    "bucket_name",
    "bucket_metrics",
    "BUCKETS",
]

BUCKETS = ("known", "common_unknown", "corpus")
"""Question buckets by what the policy knows (module docstring), in table order."""

_HEAD_COLUMNS = (
    ("n", "N", False),
    ("em", "EM", True),
    ("cem", "CEM", True),
    ("f1", "F1", True),
    ("judge_acc", "Judge", True),
    ("search_depth", "SD", False),
    ("se", "SE", False),
)
_TAIL_COLUMNS = (("format_compliance", "Format", True), ("tokens", "Tokens/q", False))


def table_columns() -> tuple[tuple[str, str, bool], ...]:
    """``(metric key, column title, shown as a percentage)`` of the summary tables, in order: the shared metrics,
    then each method's (:attr:`~agentrag_verl.eval.hooks.EvalHooks.columns`), then format compliance and tokens."""
    methods = tuple(c for hooks in method_hooks().values() for c in hooks.columns)
    return _HEAD_COLUMNS + methods + _TAIL_COLUMNS


def question_metrics(
    format_name: str, response: str, golds: Sequence[str], extra_fields: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The string metrics of one trajectory (module docstring).

    Args:
        format_name: The trajectory format (:func:`agentrag_verl.formats.get_format`).
        response: The decoded response (model text and observations).
        golds: Gold answers.
        extra_fields: The agent loop's ``extra_fields`` (``agentrag_*`` keys); ``{}`` for a bare response.

    >>> m = question_metrics("searchr1", "<think>x</think><answer>Paris</answer>", ["Paris"])
    >>> m["em"], m["cem"], m["f1"], m["format_ok"], m["n_search"], m["prediction"]
    (1.0, 1.0, 1.0, True, 0, 'Paris')
    """
    from agentrag_verl.formats import get_format

    fields = dict(extra_fields or {})
    fmt = get_format(format_name)
    traj = fmt.parse(response)
    pred = traj.answer
    n_search = retrieval_step_count(fields)
    if n_search is None:
        n_search = fields.get(F.NUM_SEARCHES)
    out: dict[str, Any] = {
        "prediction": pred,
        "em": exact_match(pred, golds),
        "cem": cover_exact_match(pred, golds),
        "f1": f1_score(pred, golds),
        "format_ok": bool(fmt.is_valid(response)),
        "n_search": int(n_search) if isinstance(n_search, int) else traj.num_searches,
        "n_steps": len(traj.steps),
    }
    for name, hooks in method_hooks().items():
        out[name] = hooks.question(format_name, response, golds, fields, traj)
    return out


def search_efficiency(em: float, search_depth: float) -> float | None:
    """AutoSearch SE = EM / SD, in EM percentage points per search step; None when no search was made.

    >>> search_efficiency(0.45, 1.5)
    30.0
    >>> print(search_efficiency(0.3, 0.0))
    None
    """
    if search_depth <= 0:
        return None
    return 100.0 * em / search_depth


def _mean(values: Iterable[float | None]) -> float | None:
    vals = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum(vals) / len(vals) if vals else None


def dataset_metrics(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Aggregate one dataset's records (see the module docstring for each key)."""
    n = len(records)
    em = _mean(r["em"] for r in records) or 0.0
    depth = _mean(r["n_search"] for r in records) or 0.0
    judged = [r["judge"] for r in records if isinstance(r.get("judge"), Mapping)]
    judge_ok = [j for j in judged if j.get("ok")]
    out: dict[str, Any] = {
        "n": n,
        "em": em,
        "cem": _mean(r["cem"] for r in records) or 0.0,
        "f1": _mean(r["f1"] for r in records) or 0.0,
        "judge_acc": _mean(float(bool(j.get("correct"))) for j in judge_ok),
        "judge_failures": len(judged) - len(judge_ok),
        "search_depth": depth,
        "se": search_efficiency(em, depth),
    }
    for name, hooks in method_hooks().items():
        out.update(hooks.dataset([r[name] for r in records if isinstance(r.get(name), Mapping)]))
    out |= {
        "format_compliance": _mean(float(bool(r["format_ok"])) for r in records) or 0.0,
        "tokens": _mean(r["tokens"]["policy"] + r["tokens"].get("aux", 0) for r in records) or 0.0,
        "tokens_trajectory": _mean(r["tokens"]["policy"] for r in records) or 0.0,
        "search_depth_histogram": _histogram(r["n_search"] for r in records),
    }
    designs = sorted({d for r in records for d in (r.get("rewards") or {})})
    for design in designs:
        out[f"reward/{design}"] = _mean((r.get("rewards") or {}).get(design, {}).get("score") for r in records)
    return out


def bucket_of(record: Mapping[str, Any]) -> str | None:
    """The bucket of a record (:data:`BUCKETS`) from its row's knowledge label; None without one.

    A result record keeps the question row's fields beside ``id``/``question``/``golden_answers`` under its own
    ``metadata`` (:func:`agentrag_verl.eval.harness.build_record`), so the row's ``metadata`` (type, label) is one
    level down.

    >>> def rec(meta): return {"metadata": {"metadata": meta}}
    >>> common = rec({"type": "common-knowledge", "knowledge": {"known": False}})
    >>> bucket_of(common), bucket_of(rec({"knowledge": {"known": True}})), bucket_of(rec({})), bucket_of({})
    ('common_unknown', 'known', None, None)
    """
    fields = record.get("metadata")
    meta = fields.get("metadata") if isinstance(fields, Mapping) else None
    label = meta.get(KNOWLEDGE_KEY) if isinstance(meta, Mapping) else None
    if not isinstance(label, Mapping):
        return None
    return bucket_name(bool(label.get("known")), meta.get("type") == "common-knowledge")


def bucket_name(known: bool, common_knowledge: bool) -> str:
    """The bucket rule (:data:`BUCKETS`): known first, then common-knowledge questions the policy does not know, then
    the rest (corpus-only)."""
    return "known" if known else "common_unknown" if common_knowledge else "corpus"


def bucket_metrics(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """:func:`dataset_metrics` per bucket, over the records that have one (none: ``{}``), plus ``searched`` (the
    share answered with a search), ``direct`` (answered without one) and ``direct_format`` (the share of those that
    are well-formed: whether the no-search path holds up, e.g. when sampled; None without any).

    >>> recs = [{"dataset": "c", "em": 1.0, "cem": 1.0, "f1": 1.0, "format_ok": ok, "n_search": n,
    ...          "tokens": {"policy": 9, "aux": 0}, "metadata": {"metadata": {"knowledge": {"known": True}}}}
    ...         for ok, n in [(True, 0), (False, 0), (True, 0), (True, 1)]]
    >>> b = bucket_metrics(recs)["known"]
    >>> b["searched"], b["direct"], round(b["direct_format"], 4)
    (0.25, 3, 0.6667)
    """
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        if (bucket := bucket_of(r)) is not None:
            groups.setdefault(bucket, []).append(r)
    out = {}
    for b in BUCKETS:
        if b in groups:
            direct = [r for r in groups[b] if not r["n_search"]]
            out[b] = {
                **dataset_metrics(groups[b]),
                "searched": _mean(float(r["n_search"] > 0) for r in groups[b]),
                "direct": len(direct),
                "direct_format": _mean(float(bool(r["format_ok"])) for r in direct) if direct else None,
            }
    return out


def _histogram(values: Iterable[int]) -> dict[str, int]:
    counts: dict[int, int] = {}
    for v in values:
        counts[int(v)] = counts.get(int(v), 0) + 1
    return {str(k): counts[k] for k in sorted(counts)}


def aggregate(records: Iterable[Mapping[str, Any]], datasets: Sequence[str] | None = None) -> dict[str, Any]:
    """Per-dataset metrics plus the ``average`` row (unweighted mean over datasets).

    Args:
        records: Result records (``dataset``, ``em``, ``cem``, ``f1``, ``format_ok``, ``n_search``, ``tokens``,
            optional ``judge``, one entry per method with evaluation hooks, ``rewards``), as
            :mod:`agentrag_verl.eval.harness` writes.
        datasets: Dataset order (default: order of first appearance).

    Returns:
        ``{"datasets": {name: metrics}, "average": metrics}``, and ``"buckets": {bucket: metrics}`` when the records
        carry knowledge labels.

    >>> recs = [
    ...     {"dataset": "a", "em": 1.0, "cem": 1.0, "f1": 1.0, "format_ok": True, "n_search": 2,
    ...      "tokens": {"policy": 10, "aux": 0}},
    ...     {"dataset": "b", "em": 0.0, "cem": 0.0, "f1": 0.5, "format_ok": False, "n_search": 0,
    ...      "tokens": {"policy": 30, "aux": 0}},
    ... ]
    >>> agg = aggregate(recs)
    >>> agg["datasets"]["a"]["se"], agg["datasets"]["b"]["se"], agg["average"]["em"], agg["average"]["tokens"]
    (50.0, None, 0.5, 20.0)
    """
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        groups.setdefault(str(r["dataset"]), []).append(r)
    order = [d for d in (datasets or list(groups)) if d in groups]
    per = {d: dataset_metrics(groups[d]) for d in order}
    average: dict[str, Any] = {"n": sum(m["n"] for m in per.values())}
    keys = [k for m in per.values() for k in m if k not in average and k != "search_depth_histogram"]
    summed = {"judge_failures", *(k for hooks in method_hooks().values() for k in hooks.summed)}
    for key in dict.fromkeys(keys):
        if key in summed:
            average[key] = sum(m.get(key, 0) for m in per.values())
        else:
            average[key] = _mean(m.get(key) for m in per.values())
    merged: dict[str, int] = {}
    for m in per.values():
        for k, v in m["search_depth_histogram"].items():
            merged[k] = merged.get(k, 0) + v
    average["search_depth_histogram"] = {k: merged[k] for k in sorted(merged, key=int)}
    out = {"datasets": per, "average": average}
    if buckets := bucket_metrics([r for d in order for r in groups[d]]):
        out["buckets"] = buckets
    return out
