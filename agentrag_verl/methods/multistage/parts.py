"""Multi-stage parts ("Learning When to Search", ``docs/methods/multistage.md``): staged answer reward r_a, search
reward r_s (Eq. 9: conciseness, query diversity), format reward r_f, and the total ``r = r_a + r_s + r_f``.

Query embeddings (Eq. 9, RC > 1) come from the retriever's ``POST /encode`` (``embedding.kind: retriever``) or an
OpenAI-compatible ``POST /embeddings`` (``embedding.kind: openai``), fetched by :func:`fetch_embeddings`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from agentrag_verl.formats import Format
from agentrag_verl.methods.multistage import reward as fn
from agentrag_verl.rewards.parts.common import JudgeCorrectness
from agentrag_verl.rewards.parts.core import Part, PartResult, RewardContext, resolve_format

__all__ = ["MultistageAnswer", "MultistageSearch", "MultistageFormat", "MultistageReward", "fetch_embeddings"]


async def fetch_embeddings(queries: list[str], embedding: Mapping[str, Any]) -> list[list[float]]:
    """Embed ``queries`` with the retriever's ``/encode`` or an OpenAI-compatible ``/embeddings`` endpoint.

    Raises:
        ValueError: ``embedding.url`` is unset or ``kind`` unknown.
    """
    import os

    import aiohttp

    kind = embedding.get("kind", "retriever")
    url = embedding.get("url")
    if not url:
        raise ValueError(
            "Multi-stage search reward needs query embeddings for RC > 1: set reward.reward_kwargs.embedding.url "
            "(the retriever root, e.g. http://127.0.0.1:8000, or an OpenAI-compatible /v1 root)"
        )
    headers = {}
    key_env = embedding.get("api_key_env")
    if key_env and os.environ.get(key_env):
        headers["Authorization"] = f"Bearer {os.environ[key_env]}"
    timeout = aiohttp.ClientTimeout(total=float(embedding.get("timeout_s", 30)))
    async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
        if kind == "retriever":
            async with session.post(url.rstrip("/") + "/encode", json={"queries": queries, "kind": "query"}) as r:
                r.raise_for_status()
                return (await r.json())["embeddings"]
        if kind == "openai":
            body = {"input": queries, "model": embedding.get("model", "")}
            async with session.post(url.rstrip("/") + "/embeddings", json=body) as r:
                r.raise_for_status()
                data = sorted((await r.json())["data"], key=lambda d: d.get("index", 0))
                return [d["embedding"] for d in data]
    raise ValueError(f"Unknown embedding kind {kind!r}; choose one of ['retriever', 'openai']")


class MultistageAnswer(Part):
    """Staged answer reward r_a (§3): stage 1 correct 1 / wrong ``-1 + β·RC``; stage 2 correct ``1 - β·RC`` / wrong
    -1. The stage: a fixed ``stage`` (two runs) or ``stage_switch_step`` against verl's training step (one run).

    Args:
        correct: The correctness part (:class:`~agentrag_verl.rewards.parts.JudgeCorrectness` in the paper, or
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
    embeddings. An unreachable embedding endpoint gives r_s = 0 for the sample (``ms_embedding_errors``); a missing
    endpoint configuration is an error.

    Args:
        format: The grammar whose queries are scored.
        embedding: ``{"kind": "retriever"|"openai", "url", "model", "api_key_env", "timeout_s"}``.
        pairwise: ``mean`` (text) or ``eq8`` (Eq. 8's N(N-1) denominator).
        rules: Conciseness rules (:class:`~agentrag_verl.methods.multistage.reward.ConcisenessRules`).
    """

    keys = ("ms_r_s", "ms_avg_sim", "ms_embedding_errors")

    def __init__(
        self,
        format: str | Format = "multistage",
        embedding: Mapping[str, Any] | None = None,
        pairwise: Literal["mean", "eq8"] = "mean",
        rules: fn.ConcisenessRules | None = None,
    ) -> None:
        self.format = resolve_format(format)
        self.embedding = dict(embedding or {})
        self.pairwise = pairwise
        self.rules = rules or fn.ConcisenessRules()

    async def compute(self, ctx: RewardContext) -> PartResult:
        queries = ctx.trajectory(self.format).queries
        r_s, avg_sim, errors = 0.0, 0.0, 0
        if len(queries) > 1:
            try:
                embeddings = await fetch_embeddings(queries, self.embedding)
            except ValueError:
                raise
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
