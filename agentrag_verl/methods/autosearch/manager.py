"""AutoSearch reward manager (AutoSearch §4, ``docs/methods/autosearch.md#decisions``): per-step rewards Eq. 1, 2, 7,
9 placed on step-end tokens.

Composed of :mod:`agentrag_verl.rewards.parts`: :class:`~agentrag_verl.rewards.parts.AutoSearchStepRewards`
(:func:`agentrag_verl.methods.autosearch.reward.step_rewards`, ``[r_1..r_T]``) over the per-step view
:class:`~agentrag_verl.rewards.parts.AutoSearchSteps`. The manager returns ``reward_score = Σ r_t`` (what GRPO uses:
verl's GRPO sums token-level rewards anyway) plus, under the private key :data:`TOKEN_REWARDS_KEY`, the
``[[token_index, r_t], ...]`` placement (JSON text). The agent-loop worker
:class:`~agentrag_verl.rewards.managers.step_rewards.StepRewardAgentLoopWorker` pops that key and writes the
vector into ``rm_scores``, which verl's V1 trainer uses verbatim as ``token_level_scores`` (GAE).

Token positions come from the agent loop's ``agentrag_steps[*].end_token_index`` (retrieval steps in order, then the
final step, indexed by :mod:`agentrag_verl.agent_loops.steps`); index ``-1`` means the last response token. Without
the agent loop's fields every reward goes to the last token (``as_fallback_placement``). Intermediate answers
(Prompt 1) come from ``agentrag_intermediate_answers``, keyed by retrieval step; a retrieval step without one counts
EM = F1 = 0 (``as_missing_intermediate``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from agentrag_verl.methods.autosearch import reward as fn
from agentrag_verl.methods.autosearch.parts import AutoSearchStepFormat, AutoSearchStepRewards, AutoSearchSteps
from agentrag_verl.rewards import parts as P
from agentrag_verl.rewards.managers.base import options_from_config
from agentrag_verl.rewards.managers.composed import TOKEN_REWARDS_KEY, ComposedRewardManager
from agentrag_verl.rewards.registration import verl_reward_manager

__all__ = ["AutoSearchOptions", "AutoSearchRewardManager", "TOKEN_REWARDS_KEY"]


@dataclass(frozen=True)
class AutoSearchOptions(fn.AutoSearchRewardConfig):
    """``reward.reward_kwargs`` of :class:`AutoSearchRewardManager`: the reward constants and switches of
    :class:`~agentrag_verl.methods.autosearch.reward.AutoSearchRewardConfig`, plus:"""

    per_step: bool = True
    """Emit the per-token placement for the step-reward agent-loop worker. Set False when the worker is not
    configured (the sum then lands on the last token, as any outcome reward)."""
    repeat_threshold: float = 0.8
    """TF-IDF cosine above which a query repeats an earlier one (Eq. 1 invalid step)."""
    require_think: bool = True
    """A retrieval step must open with ``<think>``
    (see :func:`~agentrag_verl.methods.autosearch.grammar.step_validity`)."""

    @classmethod
    def from_config(cls, config: Any) -> AutoSearchOptions:
        """From ``reward.reward_kwargs`` (unknown keys fail); ``clip_quality`` may be a list."""
        opts = options_from_config(cls, config)
        if opts.clip_quality is not None:
            object.__setattr__(opts, "clip_quality", tuple(opts.clip_quality))
        return opts

    def reward_config(self) -> fn.AutoSearchRewardConfig:
        """The pure-function config part."""
        names = {f.name for f in fields(fn.AutoSearchRewardConfig)}
        return fn.AutoSearchRewardConfig(**{n: getattr(self, n) for n in names})


@verl_reward_manager("autosearch")
class AutoSearchRewardManager(ComposedRewardManager):
    """AutoSearch per-step reward; ``acc`` = EM (AutoSearch's metric)."""

    options_cls = AutoSearchOptions
    extra_keys = (
        "as_t_c",
        "as_steps",
        "as_retrieval_reward",
        "as_answer_reward",
        "as_over_search",
        "as_missing_intermediate",
        "as_fallback_placement",
    )

    def build_reward(self, o: AutoSearchOptions) -> P.Reward:
        """``[r_1..r_T]`` of :func:`~agentrag_verl.methods.autosearch.reward.step_rewards` on the Search-R1 grammar."""
        config = o.reward_config()
        answer = P.AnswerMetrics("autosearch", metric="em")
        steps = AutoSearchSteps("autosearch", o.repeat_threshold, o.require_think)
        return P.Reward(
            terms=[AutoSearchStepRewards(steps, answer, config)],
            acc="em",
            report=[answer, AutoSearchStepFormat(steps, config)],
            per_step=o.per_step,
        )
