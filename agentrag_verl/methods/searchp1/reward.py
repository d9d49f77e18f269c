"""Search-P1 path-centric reward (``docs/methods/searchp1.md``).

Paper: Search-P1: path-centric reward for agentic RAG, Eq. 4 (total), Eq. 6 (Track A, self-consistency),
Eq. 7 (Track B, reference alignment), Eq. 8 (soft outcome), Algorithm 3 (reward computation).

- ``R_path = max(S_self, S_ref)`` with ``S_self = r_planner · (n_exec/n_plan) · (n_exec/n_actions)`` and
  ``S_ref = (n_cov/|R_ref|) · (n_cov/n_actions)`` (:func:`path_reward`).
- ``R_outcome = 1`` if correct else ``α·acc_score + (1-α)·reason_score``, α = 0.8 (:func:`outcome_reward`).
- ``R = λp·R_path + λa·R_outcome + λf·r_f``, λp 0.3, λa 0.6, λf 0.1; an invalid trajectory (Alg. 3 l. 7) gets
  0 in total (:func:`total_reward`).

Decisions (``docs/methods/searchp1.md#decisions``), parameters here:

- ``efficiency=True`` (Eq. 6/7) keeps the ``n/n_actions`` factors; ``efficiency=False`` is Algorithm 3 lines 15/18,
  which drop them. Ratios are clipped to [0, 1]; ``n_actions`` (tool calls) is at least 1; a missing plan
  (``n_plan = 0``) or reference (``|R_ref| = 0``) gives that track 0.
- ``r_f`` ∈ {1.0 (FULL), 0.5 (HALF)} weighted by λf, so the contributions are Alg. 3's 0.1 / 0.05.
- Ablations: ``self_track=False`` (w/o self-consistency), ``ref_track=False`` (w/o reference alignment),
  ``soft=False`` (binary outcome).
"""

from __future__ import annotations

from typing import Any

__all__ = ["path_reward", "track_scores", "outcome_reward", "total_reward"]


def _ratio(num: float, den: float) -> float:
    if den <= 0:
        return 0.0
    return min(1.0, max(0.0, num / den))


def _field(evaluation: Any, name: str, alias: str) -> float:
    if isinstance(evaluation, dict):
        value = evaluation.get(name, evaluation.get(alias, 0))
    else:
        value = getattr(evaluation, name, getattr(evaluation, alias, 0))
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def track_scores(evaluation: Any, n_ref_steps: int, n_actions: int, *, efficiency: bool = True) -> tuple[float, float]:
    """``(S_self, S_ref)`` of Eq. 6 / Eq. 7 (or Alg. 3 l. 15/18 with ``efficiency=False``).

    Args:
        evaluation: A :class:`~agentrag_verl.methods.searchp1.judge.SearchP1Evaluation` (or a dict with its fields
            or Alg. 3's names).
        n_ref_steps: ``|R_ref|``, the number of steps of the reference path.
        n_actions: The trajectory's tool calls (at least 1 is used).
        efficiency: Keep the ``n/n_actions`` efficiency factor.

    >>> ev = {"planner_score": 1.0, "model_plan_steps": 3, "effective_steps_self": 2, "effective_steps_ref": 2}
    >>> [round(x, 6) for x in track_scores(ev, n_ref_steps=2, n_actions=4)]  # 1*(2/3)*(2/4), (2/2)*(2/4)
    [0.333333, 0.5]
    >>> [round(x, 6) for x in track_scores(ev, 2, 4, efficiency=False)]  # Alg. 3: 1*(2/3), 2/2
    [0.666667, 1.0]
    """
    r_planner = _field(evaluation, "planner_score", "planner_score")
    n_plan = _field(evaluation, "model_plan_steps", "model_plan_steps")
    n_exec = _field(evaluation, "effective_steps_self", "eff_steps_self")
    n_cov = _field(evaluation, "effective_steps_ref", "eff_steps_ref")
    actions = max(1, int(n_actions))
    s_self = r_planner * _ratio(n_exec, n_plan)
    s_ref = _ratio(n_cov, n_ref_steps)
    if efficiency:
        s_self *= _ratio(n_exec, actions)
        s_ref *= _ratio(n_cov, actions)
    return s_self, s_ref


def path_reward(
    evaluation: Any,
    n_ref_steps: int,
    n_actions: int,
    *,
    self_track: bool = True,
    ref_track: bool = True,
    efficiency: bool = True,
) -> float:
    """``R_path = max(S_self, S_ref)`` (Eq. 6-7, Alg. 3 l. 20); range ``[0, 1.2]`` (r_planner ≤ 1.2).

    Args:
        evaluation: The evaluator's score sheet (Figure 9).
        n_ref_steps: Steps of the reference path (0: no reference, Track B is 0).
        n_actions: Tool calls of the trajectory.
        self_track: Track A on (off: "w/o self-consistency").
        ref_track: Track B on (off: "w/o reference alignment").
        efficiency: Eq. 6/7 efficiency factor (off: Alg. 3).

    >>> ev = {"planner_score": 1.2, "model_plan_steps": 2, "effective_steps_self": 2, "effective_steps_ref": 1}
    >>> path_reward(ev, n_ref_steps=2, n_actions=2)  # S_self = 1.2*1*1, S_ref = (1/2)*(1/2)
    1.2
    >>> path_reward(ev, 2, 2, self_track=False)
    0.25
    """
    s_self, s_ref = track_scores(evaluation, n_ref_steps, n_actions, efficiency=efficiency)
    return max(s_self if self_track else 0.0, s_ref if ref_track else 0.0)


def outcome_reward(
    correct: bool, acc_score: float, reason_score: float, alpha: float = 0.8, *, soft: bool = True
) -> float:
    """Soft outcome (Eq. 8): 1.0 if correct, else ``α·acc_score + (1-α)·reason_score``; ``soft=False``: 0/1.

    >>> outcome_reward(True, 0.0, 0.0), outcome_reward(False, 0.5, 0.8), outcome_reward(False, 0.5, 0.8, soft=False)
    (1.0, 0.56, 0.0)
    """
    if correct:
        return 1.0
    if not soft:
        return 0.0
    return round(alpha * float(acc_score) + (1.0 - alpha) * float(reason_score), 12)


def total_reward(
    format_level: float,
    path: float,
    outcome: float,
    lambda_p: float = 0.3,
    lambda_a: float = 0.6,
    lambda_f: float = 0.1,
) -> float:
    """Eq. 4 / Alg. 3 l. 29: ``λp·R_path + λa·R_outcome + λf·r_f``; 0 when the format level is INVALID (0).

    Args:
        format_level: r_f before the weight: :class:`~agentrag_verl.methods.searchp1.grammar.FormatLevel` FULL 1.0 /
            HALF 0.5 / INVALID 0.0.
        path: R_path.
        outcome: R_outcome.
        lambda_p: Path weight (0.3).
        lambda_a: Outcome weight (0.6).
        lambda_f: Format weight (0.1).

    Returns:
        The reward; range ``[0, 0.3·1.2 + 0.6 + 0.1] = [0, 1.06]`` with the default weights.

    >>> total_reward(1.0, 0.5, 1.0)  # 0.15 + 0.6 + 0.1
    0.85
    >>> total_reward(0.5, 1.0, 0.0), total_reward(0.0, 1.0, 1.0)  # 0.3 + 0.05; invalid
    (0.35, 0.0)
    """
    r_f = float(format_level)
    if r_f <= 0:
        return 0.0
    return round(lambda_p * path + lambda_a * outcome + lambda_f * r_f, 12)
