"""Multi-stage reward manager (``docs/methods/multistage.md#decisions``): ``r = r_a + r_s + r_f`` with the stage from
verl's training step.

Stage switch (both documented in the README):

- **One run, step threshold** (``stage_switch_step: N``): stage 1 before training step N, stage 2 from N on.
  The step comes from verl: on the V1 trainer (verl 0.9.1's default, ``trainer.use_v1=true``) every sample's
  ``global_steps`` column travels from the dataloader through the agent loop into the reward ``DataProto``
  (``AgentLoopWorkerTQ._run_prompt`` -> ``_compute_score`` kwargs);
  :func:`~agentrag_verl.rewards.managers.sample.read_sample` reads it. Validation batches carry the current step too.
- **Two runs** (``stage: 1`` then ``stage: 2`` resuming from the stage-1 checkpoint): a fixed ``stage`` wins
  over the threshold. If neither is set, or the step is unknown, stage 1 applies.

Composed of :mod:`agentrag_verl.rewards.parts`: :class:`~agentrag_verl.rewards.parts.MultistageReward` over the
staged answer, search and format parts. Correctness: the B.4 judge (YES/NO) with ``judge_fallback`` on failure, or
a string metric (``correctness: em | cem``). Query embeddings (Eq. 9, RC > 1): the retriever's ``POST /encode``
(``embedding.kind: retriever``) or an OpenAI-compatible ``POST /embeddings`` (``embedding.kind: openai``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from agentrag_verl.methods.multistage import reward as fn
from agentrag_verl.methods.multistage.parts import (
    JudgeCorrectness,
    MultistageAnswer,
    MultistageFormat,
    MultistageReward,
    MultistageSearch,
)
from agentrag_verl.rewards import parts as P
from agentrag_verl.rewards.managers.base import validate_options
from agentrag_verl.rewards.managers.composed import ComposedRewardManager, RewardOptions
from agentrag_verl.rewards.registration import verl_reward_manager
from agentrag_verl.tools.embeddings import EmbeddingClient

__all__ = ["MultistageOptions", "MultistageRewardManager"]


@dataclass(frozen=True)
class MultistageOptions(RewardOptions):
    """``reward.reward_kwargs`` of :class:`MultistageRewardManager`."""

    stage: Literal[1, 2] | None = None
    """Fixed stage 1 or 2 (two-run schedule); ``None`` = decide by ``stage_switch_step``."""
    stage_switch_step: int | None = None
    """Training step from which stage 2 applies (one-run schedule)."""
    beta: float = 0.3
    """β of the answer reward."""
    use_search_reward: bool = True
    """r_s on (off: Table 4 "w/o search reward")."""
    pairwise: Literal["mean", "eq8"] = "mean"
    """avg_sim: mean over pairs (text) or Eq. 8's N(N-1) denominator (halves it)."""
    max_query_words: int = 12
    """Conciseness rule: most words of a concise query."""
    max_stopword_ratio: float = 0.5
    """Conciseness rule: largest stopword/preposition fraction."""
    auxiliary_openers: bool = False
    """Conciseness rule: a query opening with an auxiliary (is, can, will, ...) is a question too. Off by default so
    that "Will Smith birth date" is concise (``docs/methods/multistage.md#decisions``)."""
    correctness: Literal["judge", "em", "cem"] = "judge"
    """Correct = LLM judge YES (paper), exact match, or cover exact match."""
    judge_fallback: Literal["exact_match", "cover_exact_match", "incorrect"] = "exact_match"
    """What decides when the judge fails."""
    judge: dict[str, Any] = field(default_factory=dict)
    """JudgeConfig of the correctness judge."""
    embedding: dict[str, Any] = field(default_factory=dict)
    """``{"kind": "retriever"|"openai", "url": ..., "model": ..., "api_key_env": ..., "timeout_s": 30}``."""


@verl_reward_manager("multistage")
class MultistageRewardManager(ComposedRewardManager):
    """Multi-stage reward; ``acc`` = judge correctness (the paper's ACC)."""

    options_cls = MultistageOptions
    extra_keys = ("ms_stage", "ms_r_a", "ms_r_s", "ms_r_f", "ms_avg_sim", "ms_judge_used", "ms_embedding_errors")

    def build_reward(self, o: MultistageOptions) -> P.Reward:
        """``r = r_a + r_s + r_f`` with correctness from the judge (paper) or a string metric."""
        validate_options(o)  # the choices (correctness, ...), also for options not read by from_config
        answer = P.AnswerMetrics("multistage", metric="cem" if o.correctness == "cem" else "em")
        correct: P.Part = answer
        if o.correctness == "judge":
            correct = JudgeCorrectness(answer, o.judge, o.judge_fallback)
        searches = P.SearchCount("multistage")
        fmt = P.FormatCheck("multistage")
        rules = fn.ConcisenessRules(
            max_query_words=o.max_query_words,
            max_stopword_ratio=o.max_stopword_ratio,
            auxiliary_openers=o.auxiliary_openers,
        )
        embedder = EmbeddingClient.from_config(o.embedding) if o.embedding.get("url") else None
        search = MultistageSearch("multistage", embedder, o.pairwise, rules) if o.use_search_reward else None
        total = MultistageReward(
            MultistageAnswer(correct, searches, o.stage, o.stage_switch_step, o.beta),
            search,
            MultistageFormat(fmt),
        )
        return P.Reward(terms=[total], acc=correct, report=[answer, fmt, searches])
