"""A verl reward manager from a composition of reward parts (:mod:`agentrag_verl.rewards.parts`).

Subclass :class:`ComposedRewardManager`, give it an options dataclass (from ``reward.reward_kwargs``) and a
:meth:`~ComposedRewardManager.build_reward` that returns a :class:`~agentrag_verl.rewards.parts.Reward`; the five
built-in managers are written this way. The base does the verl plumbing: it unpacks each sample
(:func:`~agentrag_verl.rewards.record.read_sample`), gives the parts lazily built, start-up-checked judge clients,
returns ``reward_score`` and a ``reward_extra_info`` with the same keys for every sample (:data:`COMMON_KEYS` then
the parts' keys), and, for a per-step reward, the placement under :data:`TOKEN_REWARDS_KEY` that
:class:`~agentrag_verl.rewards.managers.step_rewards.StepRewardAgentLoopManager` writes into ``rm_scores``.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, TypeVar

from agentrag_verl.rewards.managers.base import COMMON_KEYS, AgentRagRewardManager, options_from_config
from agentrag_verl.rewards.managers.sample import Sample
from agentrag_verl.rewards.parts import Reward

__all__ = ["ComposedRewardManager", "RewardOptions", "TOKEN_REWARDS_KEY"]

TOKEN_REWARDS_KEY = "_agentrag_token_rewards"
"""Private ``reward_extra_info`` key with the per-token placement (JSON ``[[token_index, reward], ...]``), removed
by the step-reward agent-loop worker before verl logs the info."""


_O = TypeVar("_O", bound="RewardOptions")


class RewardOptions:
    """Mixin for an options dataclass: ``from_config`` reads ``reward.reward_kwargs`` (unknown keys fail with the
    valid names; :func:`~agentrag_verl.rewards.managers.base.options_from_config`)."""

    @classmethod
    def from_config(cls: type[_O], config: Any) -> _O:
        """From ``reward.reward_kwargs`` (unknown keys fail)."""
        return options_from_config(cls, config)


class ComposedRewardManager(AgentRagRewardManager):
    """verl reward manager scoring each sample with the :class:`~agentrag_verl.rewards.parts.Reward` of
    :meth:`build_reward`.

    Class attributes:
        options_cls: Dataclass with ``from_config`` (e.g. ``@dataclass class O(RewardOptions)``).
        extra_keys: ``reward_extra_info`` keys after :data:`COMMON_KEYS`; ``None`` (default) = the parts' declared
            keys in part order. Set explicitly to fix the order; every key a part declares must be listed.
    """

    extra_keys: ClassVar[tuple[str, ...] | None] = None  # type: ignore[assignment]

    def __init__(self, config: Any, tokenizer: Any, compute_score: Any = None, **kwargs: Any) -> None:
        super().__init__(config, tokenizer, compute_score, **kwargs)
        self.reward: Reward = self.build_reward(self.options)
        declared = [k for k in self.reward.keys() if k not in COMMON_KEYS]
        if type(self).extra_keys is None:
            self._extra_keys = tuple(declared)
        else:
            self._extra_keys = tuple(type(self).extra_keys)
            unlisted = [k for k in declared if k not in self._extra_keys]
            if unlisted:
                raise TypeError(f"{type(self).__name__}.extra_keys misses keys its parts emit: {unlisted}")

    @property
    def keys(self) -> tuple[str, ...]:
        """All ``reward_extra_info`` keys of this manager, in order."""
        return COMMON_KEYS + self._extra_keys

    def build_reward(self, options: Any) -> Reward:
        """The composition, from the parsed options (called once, in ``__init__``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement build_reward(options) -> Reward")

    async def score(self, sample: Sample) -> dict[str, Any]:
        """Score one sample with the parts; adds ``score``, ``has_agent_fields`` and the per-step placement."""
        scored = await self.reward.score(sample, judge=lambda name, cfg: self.judge(name, cfg))
        info: dict[str, Any] = dict(scored.info)
        info["score"] = scored.score
        info["has_agent_fields"] = sample.has_agent_fields
        if scored.placements is not None:
            info[TOKEN_REWARDS_KEY] = json.dumps([[p, r] for p, r in scored.placements])
        return info
