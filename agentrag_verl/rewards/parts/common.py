"""Parts shared by every design: answer correctness (EM / CEM / F1), format validity per grammar, the search count.
The multi-stage paper's LLM-judge correctness is that method's part
(:class:`agentrag_verl.methods.multistage.parts.JudgeCorrectness`).

>>> import asyncio
>>> from agentrag_verl.rewards.record import Sample
>>> from agentrag_verl.rewards.parts.core import RewardContext
>>> ctx = RewardContext(Sample(response="<think>t</think><answer>the Paris</answer>", golds=["Paris"]))
>>> asyncio.run(ctx.get(AnswerMetrics("searchr1", metric="f1"))).info
{'em': 1.0, 'cem': 1.0, 'f1': 1.0}
>>> asyncio.run(ctx.get(FormatCheck("searchr1"))).info
{'format_ok': 1.0}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentrag_verl.formats import Format
from agentrag_verl.metrics import cover_exact_match, exact_match, f1_score
from agentrag_verl.rewards.parts.core import Part, PartResult, RewardContext, resolve_format

__all__ = ["AnswerMetrics", "FormatCheck", "FormatCheckResult", "SearchCount"]

Metric = Literal["em", "cem", "f1"]


class AnswerMetrics(Part):
    """EM, CEM and F1 of the format's final answer against the gold answers (``docs/decisions.md#answer-metrics``);
    value = ``metric``.

    Args:
        format: The trajectory format (name or :class:`~agentrag_verl.formats.Format`) that extracts the answer.
        metric: Which metric is the part's value: ``em``, ``cem`` (cover exact match) or ``f1``.
        punct: Answer normalization: ``delete`` punctuation (SQuAD) or replace it by a ``space`` (HiPRAG's code).
    """

    keys = ("em", "cem", "f1")

    def __init__(self, format: str | Format, metric: Metric = "em", punct: Literal["delete", "space"] = "delete"):
        if metric not in ("em", "cem", "f1"):
            raise ValueError(f"Unknown answer metric {metric!r}; choose one of ['em', 'cem', 'f1']")
        self.format = resolve_format(format)
        self.metric = metric
        self.punct = punct

    async def compute(self, ctx: RewardContext) -> PartResult:
        pred = ctx.trajectory(self.format).answer
        golds = ctx.record.golds
        info = {
            "em": exact_match(pred, golds, punct=self.punct),
            "cem": cover_exact_match(pred, golds, punct=self.punct),
            "f1": f1_score(pred, golds, punct=self.punct),
        }
        return PartResult(value=info[self.metric], info=info, data=pred)

    def __repr__(self) -> str:
        return f"AnswerMetrics({self.format.name!r}, metric={self.metric!r})"


@dataclass(frozen=True)
class FormatCheckResult:
    """:class:`FormatCheck` data: the grammar's structure rule as a number, and whether it is fully valid."""

    level: float
    """``check_format`` as a float: HiPRAG's F of ``(F, N)``, Search-P1's
    :class:`~agentrag_verl.methods.searchp1.grammar.FormatLevel` (1 / 0.5 / 0), else 1 / 0."""
    ok: bool
    """``level == 1``."""


class FormatCheck(Part):
    """Format validity per grammar: the paper's structure rule (``Format.check_format``); value = the level.

    HiPRAG: F of Algorithms 2-3; Search-P1: Algorithm 3's FULL 1.0 / HALF 0.5 / INVALID 0.0; the other grammars
    1.0 / 0.0. Logs ``format_ok`` (level 1).

    Args:
        format: The trajectory format (name or object).
        rule: ``check_format`` (the paper's rule) or ``is_valid`` (the uniform compliance test, 1.0 / 0.0).
    """

    keys = ("format_ok",)

    def __init__(self, format: str | Format, rule: Literal["check_format", "is_valid"] = "check_format") -> None:
        if rule not in ("check_format", "is_valid"):
            raise ValueError(f"Unknown format rule {rule!r}; choose one of ['check_format', 'is_valid']")
        self.format = resolve_format(format)
        self.rule = rule

    async def compute(self, ctx: RewardContext) -> PartResult:
        check = self.format.check_format if self.rule == "check_format" else self.format.is_valid
        raw = check(ctx.record.response)
        level = float(raw[0] if isinstance(raw, tuple) else raw)
        ok = level == 1.0
        return PartResult(value=level, info={"format_ok": float(ok)}, data=FormatCheckResult(level, ok))

    def __repr__(self) -> str:
        return f"FormatCheck({self.format.name!r})"


class SearchCount(Part):
    """RC, the number of search steps of the parsed trajectory; logs ``n_search``."""

    keys = ("n_search",)

    def __init__(self, format: str | Format) -> None:
        self.format = resolve_format(format)

    async def compute(self, ctx: RewardContext) -> PartResult:
        n = ctx.trajectory(self.format).num_searches
        return PartResult(value=float(n), info={"n_search": float(n)}, data=n)

    def __repr__(self) -> str:
        return f"SearchCount({self.format.name!r})"
