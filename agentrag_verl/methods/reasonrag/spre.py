"""ReasonRAG's value functions as pure functions (Process vs. Outcome Reward, Zhang et al.;
``docs/methods/reasonrag.md``).

- :func:`trajectory_value`: the summand of **Eq. 1**, ``v(rollout) · α^step(rollout)`` with ``v`` the F1 of the
  rollout's answer against the golds (``docs/decisions.md#answer-metrics``, FlashRAG rule) and ``step`` the number
  of stage outputs of the whole trajectory, from the question to the answer (the authors' code:
  ``f1 * beta ** node.step``).
- :func:`spre_value`: **Eq. 1**, Shortest Path Reward Estimation, the mean of those values over ``k`` rollouts.
- :func:`uct_score`: **Eq. 5** (Appendix A), ``Q(s_i) + c_uct · sqrt(Σ_j N(s_j)) / (1 + N(s_i))`` over the
  children ``s_j`` of the selected node. :func:`ucb1_score` is what the authors' code computes instead
  (``Q + c · sqrt(ln N(parent) / N(s_i))``, +inf for an unvisited node); both are offered
  (``MCTSConfig.uct_formula``).
- :func:`tree_spre_rewards`: the authors' bottom-up post-processing of a finished tree (their
  ``calculate_mcts_reward_bottom_up``): a terminal node with an answer is worth ``F1 · α^depth``, an inner node the
  visit-weighted mean of its children's rewards (children without a reward left out), any other node nothing.
  This turns the trajectories the tree itself explored into SPRE rewards; it is the pair value when node values come
  from the LLM process evaluation (Eq. 6), which scores partial trajectories but not their outcome.

Decisions: α is not given in the paper (it says α ∈ (0, 1]); the authors' code uses 0.95 while searching and 0.9 in
the post-processing that produced RAG-ProGuide: our default is 0.9 (``MCTSConfig.alpha``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from agentrag_verl.metrics import f1_score

__all__ = ["trajectory_value", "spre_value", "uct_score", "ucb1_score", "tree_spre_rewards"]


def _check_alpha(alpha: float) -> None:
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"SPRE decay alpha must be in (0, 1] (Eq. 1), got {alpha}; set mcts.alpha")


def trajectory_value(answer: str | None, golden_answers: str | Iterable[str], steps: int, alpha: float) -> float:
    """One rollout's term of Eq. 1: ``F1(answer, golds) · α^steps`` (0 without an answer).

    Args:
        answer: The rollout's final answer, ``None`` when it ended without one.
        golden_answers: The gold answers.
        steps: Stage outputs of the whole trajectory (Reasoning and Grounding outputs, the answer included).
        alpha: The decay α in (0, 1].

    Returns:
        The value in [0, 1].

    >>> trajectory_value("1934", ["1934"], steps=3, alpha=0.5)
    0.125
    >>> trajectory_value(None, ["1934"], steps=1, alpha=0.9)
    0.0
    """
    _check_alpha(alpha)
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    return f1_score(answer, golden_answers) * alpha**steps


def spre_value(rollouts: Sequence[tuple[float, int]], alpha: float) -> float:
    """Eq. 1: ``Q_t = (1/k) Σ_i v(rollout_i) · α^step(rollout_i)``.

    Args:
        rollouts: ``(v, steps)`` per rollout: the correctness score in [0, 1] (F1) and the trajectory's steps.
        alpha: The decay α in (0, 1].

    Returns:
        The mean value.

    Raises:
        ValueError: No rollouts, a score outside [0, 1], or α outside (0, 1].

    >>> spre_value([(1.0, 3), (0.5, 1), (0.0, 5)], alpha=0.5)  # (0.125 + 0.25 + 0) / 3
    0.125
    """
    _check_alpha(alpha)
    if not rollouts:
        raise ValueError("spre_value needs at least one rollout (k >= 1); set mcts.spre_rollouts >= 1")
    total = 0.0
    for v, steps in rollouts:
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"rollout correctness v must be in [0, 1] (Eq. 1), got {v}")
        total += v * alpha**steps
    return total / len(rollouts)


def uct_score(q: float, visits: int, sibling_visits: int, c_uct: float) -> float:
    """Eq. 5: ``Q(s_i) + c_uct · sqrt(Σ_j N(s_j)) / (1 + N(s_i))``.

    Args:
        q: ``Q(s_i)``, the child's mean value.
        visits: ``N(s_i)``.
        sibling_visits: ``Σ_j N(s_j)`` over all children of the parent (``s_i`` included).
        c_uct: The exploration weight.

    >>> round(uct_score(0.125, 1, 2, 1.0), 4)  # 0.125 + sqrt(2) / 2
    0.8321
    """
    return q + c_uct * math.sqrt(sibling_visits) / (1 + visits)


def ucb1_score(q: float, visits: int, parent_visits: int, c_uct: float) -> float:
    """The authors' code: ``Q + c · sqrt(ln N(parent) / N(s_i))``; +inf when ``N(s_i) = 0``.

    >>> round(ucb1_score(0.5, 2, 4, 1.414), 4)
    1.6772
    """
    if visits == 0:
        return math.inf
    return q + c_uct * math.sqrt(math.log(max(parent_visits, 1)) / visits)


def tree_spre_rewards(
    children: Mapping[int, Sequence[int]],
    visits: Mapping[int, int],
    terminal_values: Mapping[int, float],
    root: int = 0,
) -> dict[int, float | None]:
    """Bottom-up SPRE rewards of a finished tree (the authors' post-processing).

    A leaf in ``terminal_values`` (a terminal node with an answer: ``F1 · α^depth``) keeps that value; another leaf
    has no reward (``None``); an inner node gets ``Σ_c r_c N_c / Σ_c N_c`` over its children with a reward, or
    ``None`` when none has one or their visits sum to 0.

    Args:
        children: Node id -> child ids.
        visits: Node id -> ``N``.
        terminal_values: Terminal node id -> its value.
        root: The root id.

    Returns:
        Node id -> reward or ``None``, for every node reachable from ``root``.

    >>> # root 0 -> (1 -> 3), 2; node 0 gets (0.5 * 3 + 0.0 * 1) / 4
    >>> tree_spre_rewards({0: [1, 2], 1: [3], 2: [], 3: []}, {0: 4, 1: 3, 2: 1, 3: 2}, {2: 0.0, 3: 0.5})
    {3: 0.5, 1: 0.5, 2: 0.0, 0: 0.375}
    """
    out: dict[int, float | None] = {}
    # Iterative post-order, so deep trees cannot hit the recursion limit.
    stack: list[tuple[int, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        kids = list(children.get(node, ()))
        if not expanded and kids:
            stack.append((node, True))
            stack.extend((k, False) for k in reversed(kids))
            continue
        if not kids:
            out[node] = terminal_values.get(node)
            continue
        rated = [k for k in kids if out.get(k) is not None]
        total = sum(visits.get(k, 0) for k in rated)
        out[node] = sum(out[k] * visits.get(k, 0) for k in rated) / total if total > 0 else None  # type: ignore[operator]
    return out
