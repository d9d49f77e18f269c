"""HiPRAG hierarchical process reward (``docs/methods/hiprag.md``).

Paper: HiPRAG: Hierarchical Process Rewards for Efficient Agentic Retrieval Augmented Generation, Eq. 1
(reward), Eq. 2 (OSR / USR), §3.2 detectors.

``R = A(1 - λf) + λf·F + λp·A·F·Ncorr/N`` with A the cover exact match of the answer, F the format checker
(Algorithms 2-3), N the number of steps and Ncorr the steps that are neither over- nor under-search. The first two
terms are Search-R1 v0.3's outcome + format reward; the third is the gated process bonus (:func:`process_bonus`).

Decisions (``docs/methods/hiprag.md#decisions``), each a parameter:

- ``denominator="all"`` (paper): divide Ncorr by all N steps; ``"search"`` is the authors' code, which divides
  by the number of *search* steps only (the bonus can then exceed λp). With no step in the denominator the
  bonus is 0.
- Judge failures: a step whose verdict failed is passed here as ``None``; :func:`count_optimal_steps` drops it
  from numerator and denominator (policy ``exclude``). The policies ``optimal`` / ``suboptimal`` are applied
  before, by :func:`agentrag_verl.methods.hiprag.judge.step_optimal`.
- Ablations "over-search only" / "under-search only": switch a detector off with :func:`step_optimality`; its
  steps count as optimal.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from agentrag_verl.methods.searchr1.reward import outcome_format_reward

__all__ = ["hierarchical_reward", "process_bonus", "count_optimal_steps", "step_optimality"]


def step_optimality(
    is_search: Sequence[bool],
    over_search: Sequence[bool | None],
    under_search: Sequence[bool | None],
    *,
    over_search_detector: bool = True,
    under_search_detector: bool = True,
) -> list[bool | None]:
    """Per-step optimality from the two detectors' findings (HiPRAG §3.2).

    Args:
        is_search: Whether each step searched.
        over_search: Per step, whether the over-search detector flagged it (``None``: failed and excluded, or not a
            search step).
        under_search: Per step, whether the under-search detector flagged it (``None`` likewise).
        over_search_detector: Detector on; off = every search step is optimal (ablation "under-search only").
        under_search_detector: Detector on; off = every non-search step is optimal (ablation "over-search only").

    Returns:
        Per step True (optimal), False (over-/under-search) or ``None`` (excluded).

    >>> step_optimality([True, False], [True, None], [None, False])
    [False, True]
    >>> step_optimality([True, False], [True, None], [None, True], over_search_detector=False)
    [True, False]
    """
    out: list[bool | None] = []
    for i, search in enumerate(is_search):
        if search:
            flag = over_search[i] if i < len(over_search) else None
            out.append(True if not over_search_detector else (None if flag is None else not flag))
        else:
            flag = under_search[i] if i < len(under_search) else None
            out.append(True if not under_search_detector else (None if flag is None else not flag))
    return out


def count_optimal_steps(optimal: Sequence[bool | None]) -> tuple[int, int]:
    """``(Ncorr, N)`` over the steps that were judged (``None`` = excluded by the ``exclude`` policy).

    >>> count_optimal_steps([True, False, None, True])
    (2, 3)
    """
    judged = [o for o in optimal if o is not None]
    return sum(1 for o in judged if o), len(judged)


def process_bonus(
    answer_correct: bool | float,
    format_ok: bool | float,
    n_steps: int,
    n_optimal: int,
    lambda_p: float = 0.4,
    *,
    denominator: Literal["all", "search"] = "all",
    n_search_steps: int | None = None,
) -> float:
    """The gated process bonus of Eq. 1, ``λp·A·F·Ncorr/N``: 0 unless A = F = 1.

    Args:
        answer_correct: A (HiPRAG: cover exact match of the answer).
        format_ok: F (Algorithms 2-3).
        n_steps: N, steps counted in the denominator (judged steps under ``exclude``).
        n_optimal: Ncorr, optimal steps among them.
        lambda_p: Process-bonus weight (0.4; ablations 0.2 / 0.6; 0 = no bonus).
        denominator: ``"all"`` (paper) divides by ``n_steps``; ``"search"`` (authors' code) by ``n_search_steps``.
        n_search_steps: Number of search steps, required for ``denominator="search"``.

    Returns:
        The bonus; in ``[0, λp]`` for ``"all"``; 0 when the denominator is 0.

    >>> process_bonus(True, True, n_steps=4, n_optimal=3)  # 0.4 * 3/4
    0.30000000000000004
    >>> process_bonus(True, False, 4, 4), process_bonus(True, True, 0, 0)
    (0.0, 0.0)
    """
    if not (answer_correct and format_ok) or lambda_p == 0:
        return 0.0
    if denominator == "all":
        den = n_steps
    elif denominator == "search":
        if n_search_steps is None:
            raise ValueError('denominator="search" needs n_search_steps (the number of search steps)')
        den = n_search_steps
    else:
        raise ValueError(
            f"Unknown HiPRAG denominator {denominator!r}; choose one of ['all', 'search']; "
            "set reward.reward_kwargs.denominator"
        )
    if den <= 0:
        return 0.0
    return lambda_p * n_optimal / den


def hierarchical_reward(
    answer_correct: bool | float,
    format_ok: bool | float,
    n_steps: int,
    n_optimal: int,
    lambda_f: float = 0.2,
    lambda_p: float = 0.4,
    *,
    denominator: Literal["all", "search"] = "all",
    n_search_steps: int | None = None,
) -> float:
    """HiPRAG Eq. 1: ``A(1-λf) + λf·F + λp·A·F·Ncorr/N`` = Search-R1 v0.3 outcome + format
    (:func:`~agentrag_verl.methods.searchr1.reward.outcome_format_reward`) + :func:`process_bonus`.

    Args:
        answer_correct: A (HiPRAG: cover exact match of the answer).
        format_ok: F (Algorithms 2-3).
        n_steps: N, steps counted in the denominator (judged steps under ``exclude``).
        n_optimal: Ncorr, optimal steps among them.
        lambda_f: Format weight (0.2).
        lambda_p: Process-bonus weight (0.4; ablations 0.2 / 0.6; 0 = Search-R1 v0.3 baseline).
        denominator: ``"all"`` (paper) divides by ``n_steps``; ``"search"`` (authors' code) by ``n_search_steps``.
        n_search_steps: Number of search steps, required for ``denominator="search"``.

    Returns:
        The reward; in ``[0, 1 + λp]`` for ``"all"`` (the bonus only exists when A = F = 1).

    >>> hierarchical_reward(True, True, n_steps=4, n_optimal=3)  # 0.8 + 0.2 + 0.4 * 3/4
    1.3
    >>> hierarchical_reward(True, False, 4, 4)  # no bonus without F
    0.8
    >>> round(hierarchical_reward(True, True, 4, 4, denominator="search", n_search_steps=2), 6)  # 1 + 0.4 * 4/2
    1.8
    """
    base = outcome_format_reward(answer_correct, format_ok, lambda_f)
    bonus = process_bonus(
        answer_correct, format_ok, n_steps, n_optimal, lambda_p, denominator=denominator, n_search_steps=n_search_steps
    )
    return base + bonus


def read_score(score: float, lambda_f: float = 0.2, lambda_p: float = 0.4) -> dict[str, bool]:
    """What an Eq. 1 reward (default λf, λp) says about its trajectory: ``right`` (A = 1: at least 1 - λf) and
    ``over_search`` (right and well-formed, but paid less than the full process bonus: a step was judged
    sub-optimal).

    >>> read_score(1.4), read_score(1.2)
    ({'right': True, 'over_search': False}, {'right': True, 'over_search': True})
    >>> read_score(0.2)
    {'right': False, 'over_search': False}
    """
    right_from = hierarchical_reward(True, False, 1, 0, lambda_f, lambda_p) - 1e-6
    formatted = hierarchical_reward(True, True, 1, 0, lambda_f, lambda_p) - 1e-6
    full = hierarchical_reward(True, True, 1, 1, lambda_f, lambda_p) - 1e-6
    right = score >= right_from
    return {"right": right, "over_search": right and formatted <= score < full}
