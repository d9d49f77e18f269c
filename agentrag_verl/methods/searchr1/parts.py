"""Search-R1 parts (``docs/methods/searchr1.md``): v0.1 exact-match reward and v0.3 outcome + format reward (=
HiPRAG's first two terms).

>>> import asyncio
>>> from agentrag_verl.rewards.record import Sample
>>> from agentrag_verl.rewards.parts import AnswerMetrics, FormatCheck, RewardContext
>>> ctx = RewardContext(Sample(response="<answer>Paris</answer>", golds=["Paris"]))  # correct, invalid format
>>> asyncio.run(ctx.get(OutcomeFormat(AnswerMetrics("searchr1"), FormatCheck("searchr1")))).value
0.8
"""

from __future__ import annotations

from agentrag_verl.methods.searchr1 import reward as fn
from agentrag_verl.rewards.parts.core import Part, PartResult, RewardContext

__all__ = ["ExactMatchReward", "OutcomeFormat"]


class ExactMatchReward(Part):
    """Search-R1 v0.1: 1.0 when the ``correct`` part's value is truthy (EM), else 0.0."""

    def __init__(self, correct: Part) -> None:
        self.correct = correct

    async def compute(self, ctx: RewardContext) -> PartResult:
        return PartResult(value=fn.exact_match_reward((await ctx.get(self.correct)).value))


class OutcomeFormat(Part):
    """Search-R1 v0.3 outcome + format ``A(1-λf) + λf·F`` (A: ``correct`` part; F: ``format_ok`` of ``format``).

    Args:
        correct: A part whose value is A (e.g. :class:`~agentrag_verl.rewards.parts.AnswerMetrics`).
        format: The :class:`~agentrag_verl.rewards.parts.FormatCheck` part (F = fully valid).
        lambda_f: λf (0.2).
    """

    def __init__(self, correct: Part, format: Part, lambda_f: float = 0.2) -> None:
        self.correct = correct
        self.format = format
        self.lambda_f = float(lambda_f)

    async def compute(self, ctx: RewardContext) -> PartResult:
        a = (await ctx.get(self.correct)).value
        f = (await ctx.get(self.format)).data.ok
        return PartResult(value=fn.outcome_format_reward(a, f, self.lambda_f))
