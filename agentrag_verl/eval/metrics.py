"""Per-question evaluation metrics and their aggregation per dataset (``docs/decisions.md#evaluation``). Pure
functions, no I/O.

Per question (:func:`question_metrics`), from the model's response and the agent loop's ``extra_fields``:

- ``em`` / ``cem`` / ``f1`` of the final answer (:mod:`agentrag_verl.metrics`; the answer is what the format's
  parser extracts from model text, so an answer inside retrieved passages never counts);
- ``format_ok``: the format's ``is_valid`` (Search-P1 Table 6 format compliance);
- ``n_search``: retrieval steps (RC / search depth SD): the search actions the environment answered with an
  observation, an empty query included, counted by :mod:`agentrag_verl.agent_loops.steps` (without step records:
  ``agentrag_num_searches``, else the parse);
- ``autosearch``: the intermediate answers' EM, ``t_c`` (Eq. 6) and ``over_search`` (the question was answered
  correctly by an intermediate answer before the final retrieval step), for the ``autosearch`` format (whose loop
  writes intermediate answers) and any run that produced intermediate answers. They are the AutoSearch reward's own
  step view (``step_view`` of :mod:`agentrag_verl.methods.autosearch.parts`, found by name through
  :func:`agentrag_verl.registry.method_module`), so the evaluation reports what the reward scores: on the Search-R1
  grammar its retrieval steps are the response's ``<information>`` turns.

Aggregated per dataset (:func:`aggregate`):

======================  =====================================================================================
key                     definition
======================  =====================================================================================
``em`` ``cem`` ``f1``   means over questions (fractions; tables show percentages)
``judge_acc``           mean judge correctness (multi-stage B.4 YES/NO) over judged questions; None without judge
``search_depth``        mean retrieval calls per question (SD)
``se``                  AutoSearch SE = EM / SD, in EM percentage points per search; None when SD = 0
``autosearch_osr``      fraction of questions with intermediate answers whose t_c precedes the last search
``hiprag_osr``          HiPRAG Eq. 2: over-search steps / judged search steps, pooled over the dataset
``hiprag_usr``          HiPRAG Eq. 2: under-search steps / judged non-search steps, pooled
``format_compliance``   mean ``format_ok``
``tokens``              mean policy tokens per question: trajectory tokens the model generated + auxiliary
                        generations (HiPRAG re-answers, AutoSearch intermediate answers)
``reward/<design>``     mean reward of each reward design that scored the trajectories
======================  =====================================================================================

Decisions: the ``average`` row is the unweighted mean of the per-dataset values (the papers' "Avg." column), skipping
datasets where a metric is None; a failed judge verdict is left out of ``judge_acc`` / OSR / USR and counted in
``judge_failures`` (never scored as right or wrong); SE of the average row is the mean of the per-dataset SEs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentrag_verl.agent_loops.steps import retrieval_step_count
from agentrag_verl.metrics import cover_exact_match, exact_match, f1_score
from agentrag_verl.registry import method_module

__all__ = [
    "question_metrics",
    "search_efficiency",
    "aggregate",
    "TABLE_COLUMNS",
]

_NUM_SEARCHES = "agentrag_num_searches"
_INTERMEDIATE = "agentrag_intermediate_answers"

TABLE_COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("n", "N", False),
    ("em", "EM", True),
    ("cem", "CEM", True),
    ("f1", "F1", True),
    ("judge_acc", "Judge", True),
    ("search_depth", "SD", False),
    ("se", "SE", False),
    ("autosearch_osr", "OSR(AS)", True),
    ("hiprag_osr", "OSR(HiPRAG)", True),
    ("hiprag_usr", "USR(HiPRAG)", True),
    ("format_compliance", "Format", True),
    ("tokens", "Tokens/q", False),
)
"""``(metric key, column title, shown as a percentage)`` of the summary tables, in order."""


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
        n_search = fields.get(_NUM_SEARCHES)
    out: dict[str, Any] = {
        "prediction": pred,
        "em": exact_match(pred, golds),
        "cem": cover_exact_match(pred, golds),
        "f1": f1_score(pred, golds),
        "format_ok": bool(fmt.is_valid(response)),
        "n_search": int(n_search) if isinstance(n_search, int) else traj.num_searches,
        "n_steps": len(traj.steps),
        "autosearch": None,
    }
    if fields.get(_INTERMEDIATE) or format_name.strip().lower() == "autosearch":
        # an AutoSearch run that never searched cannot have over-searched, but it counts in the OSR denominator
        view = method_module("autosearch", "parts").step_view(fmt, response, golds, fields, trajectory=traj)
        out["autosearch"] = {"intermediate_em": view.intermediate_em, "t_c": view.t_c, "over_search": view.over_search}
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


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def dataset_metrics(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Aggregate one dataset's records (see the module docstring for each key)."""
    n = len(records)
    em = _mean(r["em"] for r in records) or 0.0
    depth = _mean(r["n_search"] for r in records) or 0.0
    judged = [r["judge"] for r in records if isinstance(r.get("judge"), Mapping)]
    judge_ok = [j for j in judged if j.get("ok")]
    autos = [r["autosearch"] for r in records if isinstance(r.get("autosearch"), Mapping)]
    hip = [r["hiprag"] for r in records if isinstance(r.get("hiprag"), Mapping)]
    out: dict[str, Any] = {
        "n": n,
        "em": em,
        "cem": _mean(r["cem"] for r in records) or 0.0,
        "f1": _mean(r["f1"] for r in records) or 0.0,
        "judge_acc": _mean(float(bool(j.get("correct"))) for j in judge_ok),
        "judge_failures": len(judged) - len(judge_ok),
        "search_depth": depth,
        "se": search_efficiency(em, depth),
        "autosearch_osr": _mean(float(bool(a.get("over_search"))) for a in autos) if autos else None,
        "hiprag_osr": _ratio(sum(h["over_search"] for h in hip), sum(h["judged_search"] for h in hip)),
        "hiprag_usr": _ratio(sum(h["under_search"] for h in hip), sum(h["judged_non_search"] for h in hip)),
        "hiprag_judge_failures": sum(h.get("failures", 0) for h in hip),
        "format_compliance": _mean(float(bool(r["format_ok"])) for r in records) or 0.0,
        "tokens": _mean(r["tokens"]["policy"] + r["tokens"].get("aux", 0) for r in records) or 0.0,
        "tokens_trajectory": _mean(r["tokens"]["policy"] for r in records) or 0.0,
        "search_depth_histogram": _histogram(r["n_search"] for r in records),
    }
    designs = sorted({d for r in records for d in (r.get("rewards") or {})})
    for design in designs:
        out[f"reward/{design}"] = _mean((r.get("rewards") or {}).get(design, {}).get("score") for r in records)
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
            optional ``judge``, ``autosearch``, ``hiprag``, ``rewards``), as :mod:`agentrag_verl.eval.harness` writes.
        datasets: Dataset order (default: order of first appearance).

    Returns:
        ``{"datasets": {name: metrics}, "average": metrics}``.

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
    for key in dict.fromkeys(keys):
        if key in ("judge_failures", "hiprag_judge_failures"):
            average[key] = sum(m.get(key, 0) for m in per.values())
        else:
            average[key] = _mean(m.get(key) for m in per.values())
    merged: dict[str, int] = {}
    for m in per.values():
        for k, v in m["search_depth_histogram"].items():
            merged[k] = merged.get(k, 0) + v
    average["search_depth_histogram"] = {k: merged[k] for k in sorted(merged, key=int)}
    return {"datasets": per, "average": average}
