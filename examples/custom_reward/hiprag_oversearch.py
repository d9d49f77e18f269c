"""Worked example: HiPRAG's gated process bonus plus AutoSearch's over-search penalty, as one verl reward manager.

``R = A(1-λf) + λf·F + λp·A·F·Ncorr/N + Σ_{t > t_c} penalty``

- ``A(1-λf) + λf·F``: Search-R1 v0.3 outcome + format (HiPRAG Eq. 1's first terms), A = cover exact match, F = the
  HiPRAG format checker (Algorithms 2-3);
- ``λp·A·F·Ncorr/N``: HiPRAG's process bonus, gated on A = F = 1, from the over-/under-search judges (§3.2);
- ``penalty`` (-0.1): AutoSearch's Eq. 7 over-search term alone: every search step after the first step whose
  intermediate answer was already an exact match (t > t_c, Eq. 6) costs ``penalty``. The search steps come from the
  HiPRAG parse, the intermediate answers from the agent loop (``agent_loops.yaml``: the HiPRAG loop with
  ``intermediate_answers: true``).

With ``per_step: true`` the penalties sit on the penalised steps' last model tokens and the rest on the last token,
written into ``rm_scores`` by ``StepRewardAgentLoopManager`` (PPO-GAE); ``per_step: false`` puts the sum on the last
token (GRPO). Every formula comes from :mod:`agentrag_verl.rewards` through the parts; this file only composes them.

Use it (``config/hiprag_oversearch_gae.yaml`` sets all of this)::

    reward.reward_manager.source=importlib
    reward.reward_manager.module.path=/abs/path/examples/custom_reward/hiprag_oversearch.py
    reward.reward_manager.name=HipragOverSearchRewardManager
"""

# No ``from __future__ import annotations`` here: verl loads a reward module given by file path without adding it to
# ``sys.modules``, and ``dataclasses`` then cannot resolve string annotations (AttributeError at load time).
from dataclasses import dataclass, field
from typing import Any

from agentrag_verl.methods.autosearch.parts import AutoSearchEfficiency, AutoSearchSteps, over_search_penalty
from agentrag_verl.methods.hiprag.parts import HipragProcessBonus, HipragStepOptimality
from agentrag_verl.methods.searchr1.parts import OutcomeFormat
from agentrag_verl.rewards import parts as P
from agentrag_verl.rewards.managers.composed import ComposedRewardManager, RewardOptions

__all__ = ["HipragOverSearchOptions", "HipragOverSearchRewardManager"]


@dataclass(frozen=True)
class HipragOverSearchOptions(RewardOptions):
    """``reward.reward_kwargs`` of :class:`HipragOverSearchRewardManager`."""

    lambda_f: float = 0.2
    """Format weight λf (HiPRAG Eq. 1)."""
    lambda_p: float = 0.4
    """Process-bonus weight λp (HiPRAG Eq. 1)."""
    over_search_penalty: float = -0.1
    """Reward of each search step after t_c (AutoSearch Eq. 7, t > t_c)."""
    per_step: bool = True
    """Place the penalties on their steps' end tokens (needs StepRewardAgentLoopManager); False: the sum, last token."""
    judge: dict[str, Any] = field(default_factory=dict)
    """JudgeConfig of HiPRAG's over-/under-search judges (``base_url``, ``model``, ``api_key_env``, ...)."""


class HipragOverSearchRewardManager(ComposedRewardManager):
    """HiPRAG's hierarchical reward plus AutoSearch's over-search penalty; ``acc`` = CEM."""

    options_cls = HipragOverSearchOptions

    def build_reward(self, o: HipragOverSearchOptions) -> P.Reward:
        answer = P.AnswerMetrics("hiprag", metric="cem")
        fmt = P.FormatCheck("hiprag")
        judged_steps = HipragStepOptimality("hiprag", judge=o.judge)
        search_steps = AutoSearchSteps("hiprag")
        return P.Reward(
            terms=[
                OutcomeFormat(answer, fmt, o.lambda_f),
                HipragProcessBonus(answer, fmt, judged_steps, o.lambda_p),
                AutoSearchEfficiency(search_steps, over_search_penalty(o.over_search_penalty)),
            ],
            acc="cem",
            report=[answer, fmt, P.SearchCount("hiprag")],
            per_step=o.per_step,
        )
