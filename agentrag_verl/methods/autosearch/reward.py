"""AutoSearch per-step rewards (``docs/methods/autosearch.md``).

Paper: AutoSearch: Adaptive Search Depth for Efficient Agentic RAG, §4.1 (step format reward Eq. 1, outcome
Eq. 2), §4.2 (intermediate answers Eq. 4-5, optimal depth t_c Eq. 6, efficiency reward Eq. 7), §4.3 (quality
reward Eq. 8-9).

A trajectory has steps t = 1..T: retrieval steps 1..T-1, then the answer step T. :func:`step_rewards` returns
``r_t = base + efficiency + quality`` for each retrieval step and ``base + outcome`` for the answer step; the
agent-loop manager puts ``r_t`` on the last model-generated token of step t (GAE), or GRPO sums them.

- Base (Eq. 1): retrieval step valid 0, invalid -0.05; answer step valid +0.1, invalid -0.5.
- Outcome (Eq. 2): EM of the final answer, at step T only.
- t_c (Eq. 6): the first retrieval step (1-based) whose intermediate answer is an exact match, -1 if none.
- Efficiency (Eq. 7), retrieval steps: t_c = -1: +0.025 each; t ≤ t_c: ``0.4/(t_c+ε) - 0.05``; t > t_c: -0.1.
  Decision: Eq. 7's extra conditions ``t_c < T-1`` are read as "t_c is one of the retrieval steps".
- Quality (Eq. 9): ``F1(a_t) - max_{t'<t} F1(a_t')`` (empty max = 0); no clipping unless ``clip_quality``.

Ablations of Table 4 / §6 ("w/o base", "w/o search efficiency", "w/o search quality") are the ``use_*`` switches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "AutoSearchRewardConfig",
    "optimal_depth",
    "format_rewards",
    "outcome_reward",
    "efficiency_rewards",
    "quality_rewards",
    "step_rewards",
]


@dataclass(frozen=True)
class AutoSearchRewardConfig:
    """Constants and switches of the AutoSearch reward (defaults: the paper's)."""

    retrieval_valid: float = 0.0
    """Eq. 1: valid retrieval step."""
    retrieval_invalid: float = -0.05
    """Eq. 1: malformed or repeated-query retrieval step."""
    answer_valid: float = 0.1
    """Eq. 1: valid answer step."""
    answer_invalid: float = -0.5
    """Eq. 1: invalid answer step."""
    under_search: float = 0.025
    """Eq. 7, t_c = -1: reward of every retrieval step."""
    effective_scale: float = 0.4
    """Eq. 7, t ≤ t_c: numerator of ``scale/(t_c+ε) - offset``."""
    effective_offset: float = 0.05
    """Eq. 7, t ≤ t_c: the subtracted constant."""
    over_search: float = -0.1
    """Eq. 7, t > t_c."""
    epsilon: float = 1e-6
    """Eq. 7's ε."""
    clip_quality: tuple[float, float] | None = None
    """Optional ``(low, high)`` clip of the Eq. 9 quality reward; ``None`` = unclipped (paper)."""
    use_base: bool = True
    """Eq. 1 step format reward on."""
    use_outcome: bool = True
    """Eq. 2 outcome (EM at step T) on."""
    use_efficiency: bool = True
    """Eq. 7 on."""
    use_quality: bool = True
    """Eq. 9 on."""


def optimal_depth(intermediate_em: Sequence[bool | float]) -> int:
    """t_c (Eq. 6): the first 1-based retrieval step with an exact-match intermediate answer; -1 if none.

    >>> optimal_depth([0, 1, 1]), optimal_depth([0, 0])
    (2, -1)
    """
    for t, em in enumerate(intermediate_em, start=1):
        if em:
            return t
    return -1


def format_rewards(
    step_valid: Sequence[bool], final_valid: bool, config: AutoSearchRewardConfig | None = None
) -> list[float]:
    """Eq. 1 step format reward: retrieval steps 1..T-1, then the answer step T.

    >>> format_rewards([True, False], True)
    [0.0, -0.05, 0.1]
    >>> format_rewards([], False)
    [-0.5]
    """
    c = config or AutoSearchRewardConfig()
    return [c.retrieval_valid if ok else c.retrieval_invalid for ok in step_valid] + [
        c.answer_valid if final_valid else c.answer_invalid
    ]


def outcome_reward(final_em: bool | float) -> float:
    """Eq. 2 outcome reward at the answer step: the exact match of the final answer (1.0 or 0.0).

    >>> outcome_reward(True), outcome_reward(0.0)
    (1.0, 0.0)
    """
    return 1.0 if final_em else 0.0


def efficiency_rewards(n_retrieval: int, t_c: int, config: AutoSearchRewardConfig | None = None) -> list[float]:
    """Eq. 7 for retrieval steps 1..n_retrieval.

    >>> efficiency_rewards(3, -1)
    [0.025, 0.025, 0.025]
    >>> [round(r, 4) for r in efficiency_rewards(3, 2)]  # 0.4/2 - 0.05 = 0.15 for t <= 2, then -0.1
    [0.15, 0.15, -0.1]
    """
    c = config or AutoSearchRewardConfig()
    if t_c < 1:
        return [c.under_search] * n_retrieval
    eff = c.effective_scale / (t_c + c.epsilon) - c.effective_offset
    return [eff if t <= t_c else c.over_search for t in range(1, n_retrieval + 1)]


def quality_rewards(intermediate_f1: Sequence[float], config: AutoSearchRewardConfig | None = None) -> list[float]:
    """Eq. 9: each step's F1 gain over the best earlier intermediate answer (first step: over 0).

    >>> quality_rewards([0.5, 0.25, 1.0])
    [0.5, -0.25, 0.5]
    """
    c = config or AutoSearchRewardConfig()
    out, best = [], 0.0
    for f1 in intermediate_f1:
        q = float(f1) - best
        if c.clip_quality is not None:
            q = min(c.clip_quality[1], max(c.clip_quality[0], q))
        out.append(q)
        best = max(best, float(f1))
    return out


def step_rewards(
    step_valid: Sequence[bool],
    final_valid: bool,
    final_em: bool | float,
    intermediate_em: Sequence[bool | float],
    intermediate_f1: Sequence[float],
    config: AutoSearchRewardConfig | None = None,
) -> list[float]:
    """Per-step rewards ``[r_1, ..., r_{T-1}, r_T]``: retrieval steps, then the answer step.

    Args:
        step_valid: Eq. 1 validity of each retrieval step (length T-1).
        final_valid: Eq. 1 validity of the answer step.
        final_em: Eq. 2 exact match of the final answer.
        intermediate_em: EM of each retrieval step's intermediate answer (length T-1).
        intermediate_f1: F1 of each retrieval step's intermediate answer (length T-1).
        config: Constants and ablation switches.

    Returns:
        T floats. Ranges (defaults): a retrieval step lies in ``[-1.15, 1.35+]`` (base ≥ -0.05, efficiency in
        ``[-0.1, 0.35]``, quality in ``[-1, 1]``), the answer step in ``[-0.5, 1.1]``.

    Raises:
        ValueError: If the per-retrieval-step sequences differ in length.

    >>> [round(r, 4) for r in step_rewards([True, True], True, 1.0, [1, 1], [1.0, 1.0])]
    [1.35, -0.1, 1.1]
    """
    c = config or AutoSearchRewardConfig()
    n = len(step_valid)
    if len(intermediate_em) != n or len(intermediate_f1) != n:
        raise ValueError(
            f"AutoSearch step_rewards: {n} retrieval steps but {len(intermediate_em)} intermediate EMs and "
            f"{len(intermediate_f1)} F1s; pass one intermediate answer per retrieval step (pad missing ones with 0)"
        )
    rewards = [0.0] * (n + 1)
    if c.use_base:
        for i, r in enumerate(format_rewards(step_valid, final_valid, c)):
            rewards[i] += r
    if c.use_efficiency:
        for i, r in enumerate(efficiency_rewards(n, optimal_depth(intermediate_em), c)):
            rewards[i] += r
    if c.use_quality:
        for i, r in enumerate(quality_rewards(intermediate_f1, c)):
            rewards[i] += r
    if c.use_outcome:
        rewards[n] += outcome_reward(final_em)
    return rewards
