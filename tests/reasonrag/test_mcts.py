"""MCTS over ReasonRAG's workflow against a scripted policy (FakeOpenAIServer) and retriever (FakeRetriever), both
over real HTTP: the tree, visit counts and values of a hand-computed example, UCT selection, budgets, the process
evaluation (Eq. 6) and its fallbacks."""

from __future__ import annotations

import math

import pytest

from agentrag_verl.methods.reasonrag.mcts import MCTSConfig, MCTSEnv, run_mcts, select
from agentrag_verl.methods.reasonrag.pairs import build_pairs
from agentrag_verl.methods.reasonrag.policy import PolicyClient, PolicyConfig
from agentrag_verl.methods.reasonrag.tree import Tree
from agentrag_verl.testing import FakeOpenAIServer, Fault
from agentrag_verl.tools.retriever_client import RetrieverClient, RetrieverConfig

from .conftest import GROUNDING_MARK, StagePolicy

QUESTION = "In what year did Orla Brennick found Marrow & Tilde Instruments?"
GOLDS = ["1934"]
A = "I need the founding year. So the next query is <query>Orla Brennick founded Marrow & Tilde</query>"
B = "So the answer is <answer>1950</answer>"
G1 = "Based on the query, the relevant evidence is <evidence>She founded it in 1934.</evidence>"
G0 = "<evidence>None</evidence>"


def after_evidence(user: str) -> str:
    return "So the answer is <answer>1934</answer>" if "1934" in user else "So the answer is <answer>1950</answer>"


def make_env(server: FakeOpenAIServer, retriever, judge=None) -> MCTSEnv:
    policy = PolicyClient(PolicyConfig(base_url=server.base_url, model="policy", api_key_env=None, max_retries=0))
    return MCTSEnv(policy, RetrieverClient(RetrieverConfig(url=retriever.url, topk=3)), topk=3, judge=judge)


# The hand-computed example: max_children 2, c_uct 1, alpha 0.5, k = 1 rollout, 5 iterations.
#   it 1: select root (no child) -> expand A (query; retrieve). Rollout from A: G1 (step 2), answer 1934 (step 3):
#         v = F1 1 * 0.5^3 = 0.125.                               A: N1 Q.125          root: N1 sum .125
#   it 2: root has 1 < 2 children -> expand B (answer 1950, terminal at depth 1): v = 0 * 0.5^1 = 0.
#                                                                 B: N1 Q0             root: N2 sum .125
#   it 3: root full. Eq. 5 with sum N = 2: A .125 + sqrt(2)/2 = .832, B 0 + sqrt(2)/2 = .707 -> A; A has no child ->
#         expand C (G1, evidence); rollout: answer 1934 at step 3: v = .125.   C: N1 Q.125   A: N2 Q.125   root: N3
#   it 4: sum N = 3: A .125 + sqrt(3)/3 = .702, B 0 + sqrt(3)/2 = .866 -> B, terminal: backpropagate its 0 again.
#                                                                 B: N2 Q0             root: N4 sum .25
#   it 5: sum N = 4: A .125 + 2/3 = .792, B 0 + 2/3 = .667 -> A (1 child) -> expand D (G0: "None"); rollout answers
#         1950: v = 0.                                            D: N1 Q0   A: N3 Q.25/3   root: N5 Q.25/5
HAND = MCTSConfig(max_rollouts=5, max_children=2, max_iter=5, c_uct=1.0, alpha=0.5, spre_rollouts=1)


async def test_hand_computed_tree(fake_retriever):
    policy = StagePolicy(root=[A, B], grounding=[G1, G1, G0], reasoning=after_evidence)
    with FakeOpenAIServer(policy) as server:
        tree, stats = await run_mcts(QUESTION, GOLDS, make_env(server, fake_retriever), HAND, qid="q0")

    shape = [(n.id, n.parent, n.depth, n.stage, n.action, n.content) for n in tree.nodes]
    assert shape == [
        (0, None, 0, "reasoning", None, None),
        (1, 0, 1, "grounding", "query", "Orla Brennick founded Marrow & Tilde"),
        (2, 0, 1, "terminal", "answer", "1950"),
        (3, 1, 2, "reasoning", "evidence", "She founded it in 1934."),
        (4, 1, 2, "reasoning", "evidence", "None"),
    ]
    assert [n.visits for n in tree.nodes] == [5, 3, 2, 1, 1]
    expected_q = [0.25 / 5, 0.25 / 3, 0.0, 0.125, 0.0]
    assert [n.q for n in tree.nodes] == pytest.approx(expected_q)
    assert [n.estimate for n in tree.nodes] == pytest.approx([None, 0.125, 0.0, 0.125, 0.0])
    assert [n.estimator for n in tree.nodes] == [None, "spre", "outcome", "spre", "spre"]
    # SPRE rollouts (Eq. 1, k = 1): answer, total steps, F1, F1 * alpha^steps.
    assert tree.nodes[1].rollouts == [{"answer": "1934", "steps": 3, "f1": 1.0, "value": 0.125}]
    assert tree.nodes[4].rollouts == [{"answer": "1950", "steps": 3, "f1": 0.0, "value": 0.0}]
    # Pair values default to Q under SPRE.
    assert [n.reward for n in tree.nodes] == pytest.approx(expected_q)
    # The stage outputs are the policy's replies, closing tags restored after the server cut them at the stop.
    assert [n.text for n in tree.nodes[1:]] == [A, B, G1, G0]
    # Calls: it1 expand + 2 rollout steps, it2 expand, it3 expand + 1, it4 none, it5 expand + 1.
    assert stats.as_dict() == {
        "iterations": 5,
        "policy_calls": 8,
        "retrievals": 1,
        "judge_calls": 0,
        "judge_failures": 0,
        "rollouts": 3,
    }
    # One retrieval for the query; its hits are on the query node and in every Grounding prompt (Figure 13).
    assert [r["queries"] for r in fake_retriever.requests] == [["Orla Brennick founded Marrow & Tilde"]]
    assert [d["id"] for d in tree.nodes[1].docs] == [
        h["document"]["id"] for h in fake_retriever.search("Orla Brennick founded Marrow & Tilde", 3)
    ]
    grounding = [b for b in policy.bodies if GROUNDING_MARK in b["messages"][0]["content"]]
    assert len(grounding) == 3 and all("<reference>Doc 1(Title: " in b["messages"][1]["content"] for b in grounding)
    assert all(b["stop"] == ["</evidence>"] for b in grounding)
    assert all(b["stop"] == ["</query>", "</answer>"] for b in policy.bodies if b not in grounding)
    # Sibling expansions and rollouts are distinct samples: every call carries its own seed.
    assert len({b["seed"] for b in policy.bodies}) == len(policy.bodies)
    # RAG-ProGuide: at the root A (Q .083) over B (0); under A, C (.125) over D (0).
    pairs = build_pairs(tree)
    assert [(p["chosen"][0]["content"], p["rejected"][0]["content"]) for p in pairs] == [(A, B), (G1, G0)]
    assert [p["gap"] for p in pairs] == pytest.approx([0.25 / 3, 0.125])


async def test_seeds_make_the_search_reproducible(fake_retriever):
    policy = StagePolicy(root=[A, B], grounding=[G1, G1, G0], reasoning=after_evidence)
    with FakeOpenAIServer(policy) as server:
        await run_mcts(QUESTION, GOLDS, make_env(server, fake_retriever), HAND, qid="q0")
    first = [b["seed"] for b in policy.bodies]
    policy2 = StagePolicy(root=[A, B], grounding=[G1, G1, G0], reasoning=after_evidence)
    with FakeOpenAIServer(policy2) as server:
        await run_mcts(QUESTION, GOLDS, make_env(server, fake_retriever), HAND, qid="q0")
        await run_mcts(QUESTION, GOLDS, make_env(server, fake_retriever), HAND, qid="q1")
    seeds = [b["seed"] for b in policy2.bodies]
    assert seeds[: len(first)] == first  # same question id -> same seeds
    assert not set(seeds[len(first) :]) & set(first)  # another question -> other seeds


def _tree(children: list[tuple[int, float]]) -> Tree:
    """A root with children of the given (N, Q)."""
    tree = Tree.new("q", ["a"])
    for visits, q in children:
        child = tree.add_child(tree.root, stage="reasoning", text=f"{visits},{q}", action="evidence")
        child.visits, child.value_sum = visits, q * visits
    tree.root.visits = sum(v for v, _ in children)
    return tree


@pytest.mark.parametrize(
    ("children", "c_uct", "expected"),
    [
        # Eq. 5, sum N = 11: 0.6 + sqrt(11)/11 = 0.902 vs 0.2 + sqrt(11)/2 = 1.858: exploration wins.
        ([(10, 0.6), (1, 0.2)], 1.0, 1),
        # With c_uct = 0.1: 0.630 vs 0.366: exploitation wins.
        ([(10, 0.6), (1, 0.2)], 0.1, 0),
        # Greedy (c = 0) picks the best Q; ties go to the first child.
        ([(3, 0.5), (1, 0.7), (2, 0.7)], 0.0, 1),
        # Equal visits: the higher Q wins whatever c is.
        ([(2, 0.1), (2, 0.3)], 5.0, 1),
    ],
)
def test_uct_picks_what_eq5_says(children, c_uct, expected):
    tree = _tree(children)
    config = MCTSConfig(max_children=len(children), c_uct=c_uct)
    total = sum(v for v, _ in children)
    scores = [q + c_uct * math.sqrt(total) / (1 + v) for v, q in children]
    assert scores.index(max(scores)) == expected
    assert select(tree, config) is tree.nodes[1 + expected]


def test_ucb1_variant_and_descent():
    # Authors' UCB1: Q + c sqrt(ln N(parent) / N): 0.6 + sqrt(ln 11 / 10) = 1.090 vs 0.2 + sqrt(ln 11) = 1.749.
    tree = _tree([(10, 0.6), (1, 0.2)])
    assert select(tree, MCTSConfig(uct_formula="ucb1", c_uct=1.0)) is tree.nodes[2]
    # Selection descends through fully expanded nodes and stops at the first one that can be expanded.
    grand = tree.add_child(tree.nodes[2], stage="reasoning", text="g", action="evidence")
    grand.visits = 1
    assert select(tree, MCTSConfig(uct_formula="ucb1", c_uct=1.0)) is tree.nodes[2]  # 1 of 2 children
    # A terminal node is returned as is (it is re-evaluated, not expanded).
    tree.nodes[2].stage = "terminal"
    assert select(tree, MCTSConfig(uct_formula="ucb1", c_uct=1.0)) is tree.nodes[2]


async def test_step_budget_ends_branches_without_answer(fake_retriever):
    # max_iter 2: R (query), G (evidence) uses the budget: the evidence node is terminal with no answer, value 0.
    policy = StagePolicy(root=[A], grounding=[G1], reasoning=after_evidence)
    config = MCTSConfig(max_rollouts=10, max_children=1, max_iter=2, alpha=0.5, spre_rollouts=2)
    with FakeOpenAIServer(policy) as server:
        tree, stats = await run_mcts(QUESTION, GOLDS, make_env(server, fake_retriever), config)
    assert [(n.action, n.stage, n.budget_exhausted) for n in tree.nodes[1:]] == [
        ("query", "grounding", False),
        ("evidence", "terminal", True),
    ]
    # A's 2 rollouts hit the budget after G too: value 0. Nothing left to expand after 2 iterations.
    assert tree.nodes[1].rollouts == [{"answer": None, "steps": 2, "f1": 0.0, "value": 0.0}] * 2
    assert stats.iterations == 2 and [n.q for n in tree.nodes] == [0.0, 0.0, 0.0]


async def test_reasoning_without_action_is_a_dead_end(fake_retriever):
    policy = StagePolicy(root=["I cannot decide.", B], grounding=[G1], reasoning=after_evidence)
    config = MCTSConfig(max_rollouts=2, max_children=2, alpha=0.5)
    with FakeOpenAIServer(policy) as server:
        tree, _ = await run_mcts(QUESTION, ["1950"], make_env(server, fake_retriever), config)
    assert [(n.action, n.stage, n.estimate) for n in tree.nodes[1:]] == [
        ("invalid", "terminal", 0.0),
        ("answer", "terminal", 0.5),  # F1 1 * 0.5^1
    ]


def judge_reply(body) -> str:
    user = body["messages"][-1]["content"]
    if "1950" in user.split("Agent Thoughts:", 1)[1]:
        return "The answer is wrong. So the score is 10"
    if "1934" in user.split("Agent Thoughts:", 1)[1]:
        return "Sound. So the score is 0.9"
    return "Incomplete. So the score is 50"


async def test_process_evaluation_values(fake_retriever):
    """Eq. 6: node values are the judge's Figure 14 scores; pair values are the tree's SPRE (authors)."""
    from agentrag_verl.judges import JudgeClient, JudgeConfig

    policy = StagePolicy(root=[A, B], grounding=[G1], reasoning=after_evidence)
    config = MCTSConfig(max_rollouts=3, max_children=2, c_uct=1.0, alpha=0.5, value="process_eval")
    with FakeOpenAIServer(policy) as server, FakeOpenAIServer(judge_reply) as judge_server:
        judge = JudgeClient(JudgeConfig(base_url=judge_server.base_url, model="fake-model", api_key_env=None))
        tree, stats = await run_mcts(QUESTION, GOLDS, make_env(server, fake_retriever, judge), config)
        await judge.aclose()
        judged = [r.body["messages"] for r in judge_server.requests]
    # it1 A -> 0.5; it2 B -> 0.1; it3: A .5 + sqrt(2)/2 = 1.207 > B .1 + .707 -> expand C under A -> 0.9.
    assert [n.text for n in tree.nodes[1:]] == [A, B, G1]
    assert [n.judge_score for n in tree.nodes] == [None, 0.5, 0.1, 0.9]
    assert [n.visits for n in tree.nodes] == [3, 2, 1, 1]
    assert [n.q for n in tree.nodes] == pytest.approx([0.5, 0.7, 0.1, 0.9])
    assert stats.judge_calls == 3 and stats.policy_calls == 3 and stats.rollouts == 0
    # Figure 14 system prompt; the user turn has the golden answers and the transcript so far.
    assert "So the score is" in judged[2][0]["content"]
    assert judged[2][1]["content"].endswith(f"Agent Thoughts: {A} {G1}")
    assert "Golden Answers: 1934" in judged[2][1]["content"]
    # Pair values (tree SPRE): only B is a terminal answer (F1 0); C and A have no finished trajectory below.
    assert [n.reward for n in tree.nodes] == [0.0, None, 0.0, None]


@pytest.mark.parametrize(("fallback", "expected"), [("rollout", 0.125), ("zero", 0.0)])
async def test_process_evaluation_failure_falls_back(fake_retriever, fallback, expected):
    from agentrag_verl.judges import JudgeClient, JudgeConfig

    policy = StagePolicy(root=[A], grounding=[G1], reasoning=after_evidence)
    config = MCTSConfig(
        max_rollouts=1, alpha=0.5, spre_rollouts=1, value="process_eval", process_eval_fallback=fallback
    )
    with FakeOpenAIServer(policy) as server, FakeOpenAIServer(Fault.server_error(503)) as judge_server:
        judge = JudgeClient(
            JudgeConfig(base_url=judge_server.base_url, model="fake-model", api_key_env=None, max_retries=0)
        )
        tree, stats = await run_mcts(QUESTION, GOLDS, make_env(server, fake_retriever, judge), config)
        await judge.aclose()
    node = tree.nodes[1]
    assert stats.judge_failures == 1 and node.judge_score is None
    # rollout: SPRE from A (G1, answer 1934 at step 3: 0.5^3); zero: 0 without rollouts.
    assert node.estimate == pytest.approx(expected)
    assert node.estimator == ("spre" if fallback == "rollout" else "fallback_zero")


async def test_policy_failure_raises(fake_retriever):
    from agentrag_verl.methods.reasonrag.policy import PolicyError

    with FakeOpenAIServer(Fault.server_error()) as server:
        with pytest.raises(PolicyError, match="failed after 1 attempts"):
            await run_mcts(QUESTION, GOLDS, make_env(server, fake_retriever), HAND)


def test_config_errors_name_the_option():
    with pytest.raises(ValueError, match=r"mcts\.alpha must be in \(0, 1\]"):
        MCTSConfig(alpha=1.5)
    with pytest.raises(ValueError, match=r"mcts\.value='rollouts'; choose one of \['spre', 'process_eval'\]"):
        MCTSConfig(value="rollouts")
    with pytest.raises(ValueError, match=r"Unknown MCTS option\(s\) \['max_rollout'\]"):
        MCTSConfig.from_config({"max_rollout": 3})
