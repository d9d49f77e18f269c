"""Multi-stage parts ("Learning When to Search"; ``docs/methods/multistage.md``): the judge's answer correctness
(B.4), staged answer reward r_a, search reward r_s (Eq. 9: conciseness, query diversity), format reward r_f, and the
total ``r = r_a + r_s + r_f``.

Query embeddings (Eq. 9, RC > 1) come from an :class:`~agentrag_verl.tools.embeddings.Embedder` the reward manager
builds (the retriever's ``POST /encode`` or an OpenAI-compatible ``POST /embeddings``); no part holds HTTP code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from agentrag_verl.formats import Format
from agentrag_verl.methods.multistage import reward as fn
from agentrag_verl.methods.multistage.judge import correctness_request, is_correct
from agentrag_verl.rewards.parts.common import AnswerMetrics
from agentrag_verl.rewards.parts.core import Part, PartResult, RewardContext, resolve_format
from agentrag_verl.tools.embeddings import Embedder

__all__ = [
    "JudgeCorrectness",
    "MultistageAnswer",
    "MultistageSearch",
    "MultistageFormat",
    "MultistageReward",
]


class JudgeCorrectness(Part):
    """LLM-as-judge correctness (B.4 "Instruction for Judge LLM"): 1.0 if the judge says YES.

    No answer scores 0 without a call. A failed verdict is decided by ``fallback``
    (:func:`agentrag_verl.methods.multistage.judge.is_correct`).

    Args:
        answer: The :class:`~agentrag_verl.rewards.parts.AnswerMetrics` part whose extracted answer is judged (and
            whose metrics the fallback uses).
        judge: JudgeConfig mapping (``base_url``, ``model``, ``api_key_env``, ...).
        fallback: ``exact_match``, ``cover_exact_match`` or ``incorrect`` on judge failure.
        judge_name: Name of the manager's judge client (``judge/<name>/...`` metrics).
    """

    keys = ("judge_requests", "judge_failures")

    def __init__(
        self,
        answer: AnswerMetrics,
        judge: Mapping[str, Any] | None = None,
        fallback: Literal["exact_match", "cover_exact_match", "incorrect"] = "exact_match",
        judge_name: str = "judge",
    ) -> None:
        self.answer = answer
        self.judge = dict(judge or {})
        self.fallback = fallback
        self.judge_name = judge_name

    async def compute(self, ctx: RewardContext) -> PartResult:
        pred = (await ctx.get(self.answer)).data
        if pred is None:
            return PartResult(value=0.0)
        client = await ctx.judge(self.judge_name, self.judge)
        verdict = await client.judge(correctness_request(pred, ctx.record.golds))
        correct = is_correct(verdict, pred, ctx.record.golds, self.fallback)
        return PartResult(value=float(correct), info={"judge_requests": 1.0, "judge_failures": float(not verdict.ok)})


class MultistageAnswer(Part):
    """Staged answer reward r_a (§3): stage 1 correct 1 / wrong ``-1 + β·RC``; stage 2 correct ``1 - β·RC`` / wrong
    -1. The stage: a fixed ``stage`` (two runs) or ``stage_switch_step`` against verl's training step (one run).

    Args:
        correct: The correctness part (:class:`JudgeCorrectness` in the paper, or
            :class:`~agentrag_verl.rewards.parts.AnswerMetrics`).
        searches: The :class:`~agentrag_verl.rewards.parts.SearchCount` part (RC).
        stage: Fixed stage 1 or 2, or ``None``.
        stage_switch_step: Training step from which stage 2 applies, or ``None``.
        beta: β (0.3).
    """

    keys = ("ms_stage", "ms_r_a", "ms_judge_used")

    def __init__(
        self,
        correct: Part,
        searches: Part,
        stage: int | None = None,
        stage_switch_step: int | None = None,
        beta: float = 0.3,
    ) -> None:
        self.correct = correct
        self.searches = searches
        self.stage = stage
        self.stage_switch_step = stage_switch_step
        self.beta = float(beta)

    async def compute(self, ctx: RewardContext) -> PartResult:
        correct = bool((await ctx.get(self.correct)).value)
        stage = fn.stage_for_step(ctx.record.global_step, self.stage, self.stage_switch_step)
        rc = (await ctx.get(self.searches)).data
        r_a = fn.answer_reward(correct, rc, stage, self.beta)
        info = {
            "ms_stage": float(stage),
            "ms_r_a": r_a,
            "ms_judge_used": float(isinstance(self.correct, JudgeCorrectness)),
        }
        return PartResult(value=r_a, info=info)


class MultistageSearch(Part):
    """Search reward r_s (Eq. 9): RC ≤ 1: 0 if the query is concise, -1 if not; RC > 1: ``-avg_sim`` of the query
    embeddings. An unreachable embedding endpoint gives r_s = 0 for the sample (``ms_embedding_errors``); no embedder
    is an error once a response has two or more queries.

    Args:
        format: The grammar whose queries are scored.
        embedder: Embeds the queries (:class:`~agentrag_verl.tools.embeddings.EmbeddingClient`, or any
            :class:`~agentrag_verl.tools.embeddings.Embedder`).
        pairwise: ``mean`` (text) or ``eq8`` (Eq. 8's N(N-1) denominator).
        rules: Conciseness rules (:class:`~agentrag_verl.methods.multistage.reward.ConcisenessRules`).
    """

    keys = ("ms_r_s", "ms_avg_sim", "ms_embedding_errors")

    def __init__(
        self,
        format: str | Format = "multistage",
        embedder: Embedder | None = None,
        pairwise: Literal["mean", "eq8"] = "mean",
        rules: fn.ConcisenessRules | None = None,
    ) -> None:
        self.format = resolve_format(format)
        self.embedder = embedder
        self.pairwise = pairwise
        self.rules = rules or fn.ConcisenessRules()

    async def compute(self, ctx: RewardContext) -> PartResult:
        queries = ctx.trajectory(self.format).queries
        r_s, avg_sim, errors = 0.0, 0.0, 0
        if len(queries) > 1:
            if self.embedder is None:
                raise ValueError(
                    "Multi-stage search reward needs query embeddings for RC > 1: set "
                    "reward.reward_kwargs.embedding.url (the retriever root, e.g. http://127.0.0.1:8000, or an "
                    "OpenAI-compatible /v1 root)"
                )
            try:
                embeddings = await self.embedder.embed(queries)
            except Exception:
                errors = 1  # endpoint down: r_s = 0 for this sample, counted
            else:
                r_s = fn.search_reward(queries, embeddings, pairwise=self.pairwise)
                avg_sim = -r_s
        else:
            r_s = fn.search_reward(queries, concise=self.rules)
        return PartResult(value=r_s, info={"ms_r_s": r_s, "ms_avg_sim": avg_sim, "ms_embedding_errors": float(errors)})


class MultistageFormat(Part):
    """Format reward r_f: +1 when the :class:`~agentrag_verl.rewards.parts.FormatCheck` part is valid, else -1."""

    keys = ("ms_r_f",)

    def __init__(self, format: Part) -> None:
        self.format = format

    async def compute(self, ctx: RewardContext) -> PartResult:
        r_f = fn.format_reward((await ctx.get(self.format)).data.ok)
        return PartResult(value=r_f, info={"ms_r_f": r_f})


class MultistageReward(Part):
    """``r = r_a + r_s + r_f`` (:func:`agentrag_verl.methods.multistage.reward.total_reward`); ``search=None`` is
    Table 4's "w/o search reward" ablation (r_s not computed)."""

    def __init__(self, answer: MultistageAnswer, search: MultistageSearch | None, format: MultistageFormat) -> None:
        self.answer = answer
        self.search = search
        self.format = format

    async def compute(self, ctx: RewardContext) -> PartResult:
        r_a = (await ctx.get(self.answer)).value
        r_s = (await ctx.get(self.search)).value if self.search is not None else 0.0
        r_f = (await ctx.get(self.format)).value
        return PartResult(value=fn.total_reward(r_a, r_s, r_f, use_search_reward=self.search is not None))
