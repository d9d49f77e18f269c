"""Search-P1 reward manager (``docs/methods/searchp1.md#decisions``): Algorithm 3 with the dual-track evaluator
(Figure 9).

Composed of :mod:`agentrag_verl.rewards.parts`: :class:`~agentrag_verl.rewards.parts.SearchP1Reward` (Eq. 4) over
the format level, :class:`~agentrag_verl.rewards.parts.SearchP1Path` and
:class:`~agentrag_verl.rewards.parts.SearchP1Outcome`, both reading one
:class:`~agentrag_verl.rewards.parts.SearchP1Evaluator` call. The reference plan of a training question (Algorithm
1, built offline) is looked up by question id (``extra_info.id`` / ``extra_info.index``) in the planner cache
(:func:`load_planner_cache`: a JSON object ``{id: {"planner", "reasoning_path"}}`` or a JSONL file of ``{"id",
"planner", "reasoning_path"}`` lines); ``extra_info.ref_planner`` / ``extra_info.ref_reasoning_path`` in the data
take precedence. A question without a plan keeps Track A only (``|R_ref| = 0`` -> S_ref = 0), counted in
``sp1_missing_plan``. A failed evaluation falls back to
:data:`~agentrag_verl.methods.searchp1.judge.OUTCOME_ONLY_EVALUATION` (path 0, soft outcome 0).

App. B.2's variants are decided in ``docs/methods/searchp1.md#decisions``: self-consistency from three sampled paths
with Jaccard agreement is not implemented (Track A follows Eq. 6 / Alg. 3), and the "0.5 decay for partial matches" is
the evaluator's partial outcome score (0.5) inside Eq. 8.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from agentrag_verl.methods.searchp1.parts import (
    SearchP1Evaluator,
    SearchP1Outcome,
    SearchP1Path,
    SearchP1Reward,
    load_planner_cache,
)
from agentrag_verl.rewards import parts as P
from agentrag_verl.rewards.managers.base import validate_options
from agentrag_verl.rewards.managers.composed import ComposedRewardManager, RewardOptions
from agentrag_verl.rewards.registration import verl_reward_manager

__all__ = ["SearchP1Options", "SearchP1RewardManager", "load_planner_cache"]


@dataclass(frozen=True)
class SearchP1Options(RewardOptions):
    """``reward.reward_kwargs`` of :class:`SearchP1RewardManager`."""

    lambda_p: float = 0.3
    """Path weight λp (Eq. 4)."""
    lambda_a: float = 0.6
    """Outcome weight λa (Eq. 4)."""
    lambda_f: float = 0.1
    """Format weight λf (Eq. 4; r_f 1.0 / 0.5 -> 0.1 / 0.05)."""
    alpha: float = 0.8
    """Soft-outcome weight α (Eq. 8)."""
    efficiency: bool = True
    """Eq. 6/7 efficiency factor (False: Algorithm 3 l. 15/18)."""
    self_track: bool = True
    """Track A on (off: "w/o self-consistency")."""
    ref_track: bool = True
    """Track B on (off: "w/o reference alignment")."""
    soft_outcome: bool = True
    """Soft scoring on (off: binary outcome)."""
    correctness: Literal["em", "cem"] = "em"
    """Outcome correctness: exact match (Alg. 3) or cover match."""
    planner_cache: str | None = None
    """Path of the reference-planner cache (JSON or JSONL)."""
    judge: dict[str, Any] = field(default_factory=dict)
    """JudgeConfig of the evaluator (Figure 9)."""


@verl_reward_manager("searchp1")
class SearchP1RewardManager(ComposedRewardManager):
    """Search-P1 path-centric reward; ``acc`` = cover match (Search-P1's ACC)."""

    options_cls = SearchP1Options
    extra_keys = (
        "sp1_format_level",
        "sp1_path",
        "sp1_s_self",
        "sp1_s_ref",
        "sp1_outcome",
        "sp1_eval_ok",
        "sp1_missing_plan",
        "sp1_n_actions",
    )

    def build_reward(self, o: SearchP1Options) -> P.Reward:
        """Eq. 4: ``λp·R_path + λa·R_outcome + λf·r_f``, 0 for an INVALID format level."""
        validate_options(o)  # the choices (correctness, ...), also for options not read by from_config
        answer = P.AnswerMetrics("searchp1", metric=o.correctness)
        fmt = P.FormatCheck("searchp1")
        evaluator = SearchP1Evaluator("searchp1", o.judge, o.planner_cache)
        path = SearchP1Path(evaluator, o.self_track, o.ref_track, o.efficiency)
        outcome = SearchP1Outcome(answer, evaluator, o.alpha, o.soft_outcome)
        total = SearchP1Reward(fmt, path, outcome, o.lambda_p, o.lambda_a, o.lambda_f)
        return P.Reward(terms=[total], acc="cem", report=[answer, fmt, P.SearchCount("searchp1")])
