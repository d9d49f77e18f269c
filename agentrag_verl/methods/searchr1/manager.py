"""Search-R1 reward manager: v0.1 exact match or v0.3 outcome + format, on the Search-R1 format."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentrag_verl.methods.searchr1.parts import ExactMatchReward, OutcomeFormat
from agentrag_verl.rewards import parts as P
from agentrag_verl.rewards.managers.composed import ComposedRewardManager, RewardOptions
from agentrag_verl.rewards.registration import verl_reward_manager

__all__ = ["SearchR1Options", "SearchR1RewardManager"]


@dataclass(frozen=True)
class SearchR1Options(RewardOptions):
    """``reward.reward_kwargs`` of :class:`SearchR1RewardManager`."""

    variant: Literal["outcome_format", "em"] = "outcome_format"
    """``outcome_format`` (v0.3, λf) or ``em`` (v0.1: exact match only)."""
    lambda_f: float = 0.2
    """Format weight λf of v0.3."""
    format: str = "searchr1"
    """Trajectory format used to parse and check responses."""


@verl_reward_manager("searchr1")
class SearchR1RewardManager(ComposedRewardManager):
    """Search-R1 baseline; ``acc`` = EM (Search-R1's metric)."""

    options_cls = SearchR1Options
    extra_keys = ()

    def build_reward(self, o: SearchR1Options) -> P.Reward:
        """v0.3 :class:`~agentrag_verl.rewards.parts.OutcomeFormat` or v0.1 exact match, over ``o.format``."""
        answer = P.AnswerMetrics(o.format, metric="em")
        fmt = P.FormatCheck(o.format, rule="is_valid")
        if o.variant == "em":
            term: P.Part = ExactMatchReward(answer)
        elif o.variant == "outcome_format":
            term = OutcomeFormat(answer, fmt, o.lambda_f)
        else:
            raise ValueError(
                f"Unknown Search-R1 variant {o.variant!r}; choose one of ['outcome_format', 'em']; "
                "set reward.reward_kwargs.variant"
            )
        return P.Reward(terms=[term], acc="em", report=[answer, fmt, P.SearchCount(o.format)])
