"""SPRE (Eq. 1), UCT (Eq. 5) and the bottom-up tree rewards as pure functions, plus the modules' >>> examples."""

from __future__ import annotations

import doctest
import importlib
import math

import pytest

from agentrag_verl.methods.reasonrag.spre import spre_value, trajectory_value, tree_spre_rewards, ucb1_score, uct_score


def test_spre_on_known_rollouts():
    # Three rollouts of a partial trajectory, golds ["Gustave Eiffel"], alpha 0.9:
    #   "Gustave Eiffel" in 3 steps:            F1 1.0 -> 0.9^3 = 0.729
    #   "Gustave Eiffel engineer" in 5 steps:   F1 0.8 (P 2/3, R 1) -> 0.8 * 0.9^5 = 0.4723920
    #   no answer (budget) in 7 steps:          0
    golds = ["Gustave Eiffel"]
    values = [
        trajectory_value("Gustave Eiffel", golds, 3, 0.9),
        trajectory_value("Gustave Eiffel engineer", golds, 5, 0.9),
        trajectory_value(None, golds, 7, 0.9),
    ]
    assert values == pytest.approx([0.729, 0.472392, 0.0])
    q = spre_value([(1.0, 3), (0.8, 5), (0.0, 7)], alpha=0.9)
    assert q == pytest.approx((0.729 + 0.472392) / 3)
    # alpha = 1 ignores length: plain Monte Carlo correctness.
    assert spre_value([(1.0, 3), (0.8, 5), (0.0, 7)], alpha=1.0) == pytest.approx(1.8 / 3)


def test_spre_prefers_the_shorter_correct_path():
    # Same answer, fewer steps -> higher value: the "shortest path" of SPRE.
    assert spre_value([(1.0, 1)], 0.9) > spre_value([(1.0, 3)], 0.9) > spre_value([(1.0, 5)], 0.9)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: spre_value([], 0.9), "at least one rollout"),
        (lambda: spre_value([(1.2, 1)], 0.9), r"v must be in \[0, 1\]"),
        (lambda: spre_value([(1.0, 1)], 0.0), r"alpha must be in \(0, 1\]"),
        (lambda: trajectory_value("a", ["a"], -1, 0.9), "steps must be >= 0"),
    ],
)
def test_spre_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_uct_formulas():
    # Eq. 5: Q + c sqrt(sum N) / (1 + N)
    assert uct_score(0.5, 3, 12, 1.414) == pytest.approx(0.5 + 1.414 * math.sqrt(12) / 4)
    assert uct_score(0.5, 0, 0, 1.414) == 0.5  # no visits anywhere: no exploration bonus
    # UCB1 (authors' code): unvisited first.
    assert ucb1_score(0.0, 0, 10, 1.414) == math.inf
    assert ucb1_score(0.5, 3, 12, 1.414) == pytest.approx(0.5 + 1.414 * math.sqrt(math.log(12) / 3))


def test_tree_spre_rewards_visit_weighted():
    # root 0 -> 1 (N 3) -> {3: answer 0.81 (N 2), 4: answer 0 (N 1)}; root -> 2: non-terminal leaf (no reward).
    children = {0: [1, 2], 1: [3, 4], 2: [], 3: [], 4: []}
    visits = {0: 4, 1: 3, 2: 1, 3: 2, 4: 1}
    rewards = tree_spre_rewards(children, visits, {3: 0.81, 4: 0.0})
    assert rewards[1] == pytest.approx((0.81 * 2 + 0.0 * 1) / 3)
    assert rewards[2] is None
    assert rewards[0] == pytest.approx(rewards[1])  # 2 has no reward, so only 1 counts


@pytest.mark.parametrize("module", ["spre", "tree", "pairs", "mcts", "policy", "train"])
def test_module_examples(module):
    result = doctest.testmod(importlib.import_module(f"agentrag_verl.methods.reasonrag.{module}"))
    assert result.attempted > 0 and result.failed == 0
