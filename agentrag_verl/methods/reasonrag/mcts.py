"""Monte Carlo Tree Search over ReasonRAG's workflow with SPRE node values (Zhang et al., §2.2 and Appendix A;
``docs/methods/reasonrag.md``).

One iteration (the authors' ``search`` loop, ``max_rollouts`` times):

1. **Selection** (Eq. 5): from the root, while the node is fully expanded (``max_children`` children) and not
   terminal, go to the child maximizing ``Q(s_i) + c_uct · sqrt(Σ_j N(s_j)) / (1 + N(s_i))`` (ties: the first
   child); stop at a node that can still be expanded, or at a terminal node.
2. **Expansion** (Eq. 4): one step from the policy under the node's stage prompt; the new child is the next state
   (a query is retrieved at once, so the child holds the hits its Grounding step will read). A terminal node is
   not expanded: it is evaluated again.
3. **Evaluation**: the child's value ``v``: a terminal child is worth its outcome ``F1 · α^depth``; otherwise, with
   ``value="spre"``, Eq. 1 over ``spre_rollouts`` rollouts of Algorithm 1 from the child (run concurrently), or with
   ``value="process_eval"``, the judge's score of the partial trajectory (Eq. 6, Figure 14; every node, as the
   authors' code does), falling back to SPRE rollouts (or 0) when the judge fails.
4. **Backpropagation** (Eq. 7): ``N(s) += 1`` and ``Q(s)`` = running mean of the values, on the path to the root.

The search stops early when no node can be expanded any more. Afterwards every node gets its pair value
``Node.reward`` (``pair_value``): ``q``, the node's ``Q`` (under ``value="spre"`` this is Eq. 1 with all
``N(s)`` rollouts that passed through the node), or ``tree_spre``, the authors' bottom-up SPRE over the tree's
own terminal nodes (:func:`~agentrag_verl.methods.reasonrag.spre.tree_spre_rewards`). ``auto`` picks ``q`` for SPRE
values and ``tree_spre`` for process-evaluation values (judge scores rate the reasoning, the pairs rate outcomes,
as in the paper: "we compute the F1 ... and use this correctness signal to estimate intermediate node rewards via
SPRE").

Each policy call carries a seed derived from (``seed``, question id, node, purpose), so sibling expansions and
rollouts are distinct samples and a seed-honouring server (vLLM) reproduces a tree. A question retrieves each
distinct query once (rollouts repeat queries).

Failures: a policy or retriever failure (after their retries) raises, so the question is not written and is tried
again on the next run; a judge failure applies ``process_eval_fallback``.

Deviation from the authors' code: they use UCB1 (``uct_formula="ucb1"``) and evaluate nodes only by the judge.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from agentrag_verl.methods.reasonrag.policy import Policy
from agentrag_verl.methods.reasonrag.spre import trajectory_value, tree_spre_rewards, ucb1_score, uct_score
from agentrag_verl.methods.reasonrag.tree import (
    GROUNDING_STOP,
    REASONING_STOP,
    Node,
    Stage,
    Tree,
    classify_step,
    state_messages,
)
from agentrag_verl.metrics import f1_score
from agentrag_verl.options import from_mapping

__all__ = ["MCTSConfig", "Retriever", "MCTSEnv", "QuestionStats", "run_mcts", "select", "backpropagate", "rollout"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MCTSConfig:
    """Search limits and value estimation. Defaults are the authors' (``ReasonRAGPipeline(max_iter=7,
    max_children=2, max_rollouts=64)``, ``c = 1.414``) where they exist, else our decisions (documented)."""

    max_rollouts: int = 64
    """MCTS iterations per question (the authors' ``max_rollouts``: select-expand-evaluate-backpropagate cycles)."""

    max_children: int = 2
    """Children per node (the authors' ``max_children``)."""

    max_iter: int = 7
    """Stage outputs per trajectory (Algorithm 1's N; the authors' ``max_iter``): R, (G, R) x 3."""

    c_uct: float = 1.414
    """Exploration weight ``c_uct`` of Eq. 5 (the authors' ``c``)."""

    uct_formula: Literal["paper", "ucb1"] = "paper"
    """``paper``: Eq. 5; ``ucb1``: the authors' code, ``Q + c · sqrt(ln N(parent) / N(s_i))``."""

    value: Literal["spre", "process_eval"] = "spre"
    """Node values: ``spre`` (Eq. 1 rollouts, needs only the policy) or ``process_eval`` (Eq. 6 LLM judge,
    Figure 14; needs a judge endpoint)."""

    spre_rollouts: int = 4
    """``k`` of Eq. 1: rollouts per expanded node (not given in the paper; our default)."""

    alpha: float = 0.9
    """Decay α of Eq. 1 in (0, 1] (not given in the paper; the authors' RAG-ProGuide post-processing uses 0.9)."""

    process_eval_fallback: Literal["rollout", "zero"] = "rollout"
    """When the judge fails: estimate the node by SPRE rollouts, or give it 0."""

    pair_value: Literal["auto", "q", "tree_spre"] = "auto"
    """Which node value ranks siblings for the preference pairs (module docstring)."""

    seed: int = 0
    """Base of the per-call seeds (reproducible trees with a server that honours seeds)."""

    keep_rollout_text: bool = False
    """Store the stage outputs of every SPRE rollout in the tree (large: k rollouts per node)."""

    def __post_init__(self) -> None:
        problems = []
        for name in ("max_rollouts", "max_children", "max_iter", "spre_rollouts"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                problems.append(f"mcts.{name} must be an integer >= 1, got {value!r}")
        if not 0.0 < self.alpha <= 1.0:
            problems.append(f"mcts.alpha must be in (0, 1] (Eq. 1), got {self.alpha}")
        if self.c_uct < 0:
            problems.append(f"mcts.c_uct must be >= 0, got {self.c_uct}")
        for name, choices in (
            ("uct_formula", ("paper", "ucb1")),
            ("value", ("spre", "process_eval")),
            ("process_eval_fallback", ("rollout", "zero")),
            ("pair_value", ("auto", "q", "tree_spre")),
        ):
            if getattr(self, name) not in choices:
                problems.append(f"mcts.{name}={getattr(self, name)!r}; choose one of {list(choices)}")
        if problems:
            raise ValueError("Invalid MCTS options: " + "; ".join(problems))

    @property
    def resolved_pair_value(self) -> Literal["q", "tree_spre"]:
        if self.pair_value != "auto":
            return self.pair_value  # type: ignore[return-value]
        return "q" if self.value == "spre" else "tree_spre"

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None = None, **overrides: Any) -> MCTSConfig:
        """Build from a mapping (e.g. a YAML section); unknown keys are an error listing the valid ones.

        >>> MCTSConfig.from_config({"max_rollouts": 8}, alpha=0.5).alpha
        0.5
        """
        return from_mapping(cls, config, what="MCTS option", where="mcts", overrides=overrides)


class Retriever(Protocol):
    """Search-R1 wire-format search (:class:`agentrag_verl.tools.RetrieverClient`)."""

    async def search(self, queries: Sequence[str], topk: int | None = None) -> list[list[dict[str, Any]]]: ...


@dataclass
class MCTSEnv:
    """What a search talks to.

    Attributes:
        policy: Writes stage outputs (:class:`~agentrag_verl.methods.reasonrag.policy.PolicyClient`).
        retriever: Answers queries (:class:`agentrag_verl.tools.RetrieverClient`).
        topk: Passages per query (ReasonRAG: BGE top-3).
        judge: A :class:`agentrag_verl.judges.JudgeClient` for ``value="process_eval"``.
    """

    policy: Policy
    retriever: Retriever
    topk: int = 3
    judge: Any = None


@dataclass
class QuestionStats:
    """Counters of one question's search."""

    iterations: int = 0
    policy_calls: int = 0
    retrievals: int = 0
    judge_calls: int = 0
    judge_failures: int = 0
    rollouts: int = 0

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


class _Search:
    """State of one question's search: the tree, the per-question retrieval cache, counters."""

    def __init__(self, tree: Tree, env: MCTSEnv, config: MCTSConfig, qid: str) -> None:
        self.tree, self.env, self.config, self.qid = tree, env, config, qid
        self.stats = QuestionStats()
        self._docs: dict[str, asyncio.Future] = {}

    def seed(self, *parts: Any) -> int:
        key = ":".join(str(p) for p in (self.config.seed, self.qid, *parts))
        return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") & 0x7FFFFFFF

    async def retrieve(self, query: str) -> list[dict[str, Any]]:
        """Hits for ``query``, once per distinct query of the question (rollouts repeat queries)."""
        future = self._docs.get(query)
        if future is None:
            future = asyncio.ensure_future(self._search(query))
            self._docs[query] = future
        try:
            return await asyncio.shield(future)
        except Exception:
            self._docs.pop(query, None)
            raise

    async def _search(self, query: str) -> list[dict[str, Any]]:
        self.stats.retrievals += 1
        hits = (await self.env.retriever.search([query], self.env.topk))[0]
        return [h.get("document", h) if isinstance(h, dict) else h for h in hits]

    async def step(
        self, thoughts: Sequence[str], stage: Stage, docs: Sequence[Any] | None, depth: int, seed: int
    ) -> tuple[str, Any, str | None, Stage, list[dict[str, Any]] | None]:
        """The stage output at ``depth`` (0-based) after ``thoughts``: ``(text, action, content, next_stage, docs)``.

        The output that uses up the ``max_iter`` budget ends the trajectory unless it answers (no retrieval then).
        """
        question = self.tree.question
        messages = state_messages(question, thoughts, stage, docs)
        stop = REASONING_STOP if stage == "reasoning" else GROUNDING_STOP
        self.stats.policy_calls += 1
        text = (await self.env.policy.generate(messages, stop=stop, seed=seed)).strip()
        action, content = classify_step(stage, text)
        next_docs = None
        if action == "answer" or (action == "invalid" and stage == "reasoning") or depth + 1 >= self.config.max_iter:
            next_stage: Stage = "terminal"
        elif action == "query":
            next_stage = "grounding"
            next_docs = await self.retrieve(content or "")
        else:  # evidence, or a grounding output without one (the agent loop goes back to Reasoning too)
            next_stage = "reasoning"
        return text, action, content, next_stage, next_docs

    async def expand(self, node: Node) -> Node:
        tree = self.tree
        seed = self.seed("expand", node.id, len(node.children))
        text, action, content, stage, docs = await self.step(
            tree.thoughts(node), node.stage, node.docs, node.depth, seed
        )
        return tree.add_child(
            node,
            stage=stage,
            text=text,
            action=action,
            content=content,
            docs=docs,
            # terminal only because the step budget ran out (a reasoning step without an action ends anyway)
            budget_exhausted=stage == "terminal"
            and action != "answer"
            and not (action == "invalid" and node.stage == "reasoning"),
        )

    async def rollout(self, node: Node, index: int) -> dict[str, Any]:
        """Algorithm 1 from ``node`` to an answer or the step budget."""
        thoughts = self.tree.thoughts(node)
        stage, docs, depth, answer = node.stage, node.docs, node.depth, node.answer
        while stage != "terminal" and depth < self.config.max_iter:
            text, action, content, stage, docs = await self.step(
                thoughts, stage, docs, depth, self.seed("rollout", node.id, index, depth)
            )
            thoughts.append(text)
            depth += 1
            answer = content if action == "answer" else None
        self.stats.rollouts += 1
        f1 = f1_score(answer, self.tree.golden_answers)
        value = trajectory_value(answer, self.tree.golden_answers, depth, self.config.alpha)
        out = {"answer": answer, "steps": depth, "f1": f1, "value": value}
        if self.config.keep_rollout_text:
            out["thoughts"] = thoughts[node.depth :]
        return out

    async def evaluate(self, node: Node) -> float:
        config = self.config
        if config.value == "process_eval":
            score = await self.process_eval(node)
            if score is not None:
                node.estimator, node.judge_score = "process_eval", score
                return score
            if config.process_eval_fallback == "zero":
                node.estimator = "fallback_zero"
                return 0.0
        if node.terminal:
            node.estimator = "outcome"
            return trajectory_value(node.answer, self.tree.golden_answers, node.depth, config.alpha)
        node.rollouts = await _gather_or_cancel([self.rollout(node, i) for i in range(config.spre_rollouts)])
        node.estimator = "spre"
        return sum(r["value"] for r in node.rollouts) / len(node.rollouts)  # Eq. 1

    async def process_eval(self, node: Node) -> float | None:
        from agentrag_verl.methods.reasonrag import grammar as reasonrag
        from agentrag_verl.methods.reasonrag.judge import node_value, process_score_request

        if self.env.judge is None:
            raise ValueError("mcts.value=process_eval needs a judge endpoint (--judge-url / --judge-model)")
        request = process_score_request(
            self.tree.question, self.tree.golden_answers, reasonrag.transcript(self.tree.thoughts(node))
        )
        self.stats.judge_calls += 1
        verdict = await self.env.judge.judge(request)
        if not verdict.ok:
            self.stats.judge_failures += 1
            logger.warning("process evaluation failed for %s node %d: %s", self.qid, node.id, verdict.error)
        return node_value(verdict, "rollout")


async def _gather_or_cancel(coros: list[Any]) -> list[Any]:
    """``asyncio.gather`` that cancels the other tasks when one fails (no orphan rollouts keep calling the policy)."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def select(tree: Tree, config: MCTSConfig) -> Node:
    """Selection (Eq. 5, or UCB1): descend through fully expanded non-terminal nodes by the UCT score.

    Returns:
        The first node that can still be expanded, or a terminal node.
    """
    node = tree.root
    while not node.terminal and len(node.children) >= config.max_children:
        children = tree.children(node)
        if config.uct_formula == "paper":
            total = sum(c.visits for c in children)
            node = max(children, key=lambda c: uct_score(c.q, c.visits, total, config.c_uct))
        else:
            node = max(children, key=lambda c: ucb1_score(c.q, c.visits, node.visits, config.c_uct))
    return node


def backpropagate(tree: Tree, node: Node, value: float) -> None:
    """Eq. 7: ``N(s) += 1`` and add ``value`` to the running mean ``Q(s)`` of every node from ``node`` to the root."""
    for n in tree.path(node):
        n.visits += 1
        n.value_sum += value


def _expandable(tree: Tree, config: MCTSConfig) -> bool:
    return any(not n.terminal and len(n.children) < config.max_children for n in tree.nodes)


def assign_rewards(tree: Tree, config: MCTSConfig) -> None:
    """Fill ``Node.reward`` (the pair value) of every node per ``config.pair_value``."""
    if config.resolved_pair_value == "q":
        for n in tree.nodes:
            n.reward = n.q if n.visits else None
        return
    terminal = {
        n.id: trajectory_value(n.answer, tree.golden_answers, n.depth, config.alpha)
        for n in tree.nodes
        if n.terminal and n.action == "answer"
    }
    rewards = tree_spre_rewards(
        {n.id: n.children for n in tree.nodes}, {n.id: n.visits for n in tree.nodes}, terminal, root=0
    )
    for n in tree.nodes:
        n.reward = rewards.get(n.id)


async def run_mcts(
    question: str,
    golden_answers: Sequence[str],
    env: MCTSEnv,
    config: MCTSConfig | None = None,
    qid: str = "",
) -> tuple[Tree, QuestionStats]:
    """Build one question's tree (module docstring).

    Args:
        question: The question.
        golden_answers: Its gold answers (F1 of Eq. 1, Figure 14's golden answers).
        env: Policy, retriever and (for ``process_eval``) judge.
        config: Limits and value estimation.
        qid: The question's id (part of the per-call seeds).

    Returns:
        The tree (with ``Node.reward`` filled) and the search's counters.

    Raises:
        PolicyError / RetrievalError: The policy or the retriever failed after their retries.
    """
    config = config or MCTSConfig()
    tree = Tree.new(question, golden_answers)
    search = _Search(tree, env, config, qid)
    for _ in range(config.max_rollouts):
        if not _expandable(tree, config):
            break
        search.stats.iterations += 1
        node = select(tree, config)
        if node.terminal:
            value = node.estimate if node.estimate is not None else await search.evaluate(node)
        else:
            node = await search.expand(node)
            value = await search.evaluate(node)
            node.estimate = value
        backpropagate(tree, node, value)
    assign_rewards(tree, config)
    return tree, search.stats


async def rollout(
    question: str, golden_answers: Sequence[str], env: MCTSEnv, config: MCTSConfig | None = None, qid: str = ""
) -> dict[str, Any]:
    """One run of Algorithm 1 (the inference workflow) from the question, with its Eq. 1 value.

    Returns:
        ``{"answer", "steps", "f1", "value", "thoughts"}``.
    """
    config = config or MCTSConfig()
    tree = Tree.new(question, golden_answers)
    return await _Search(tree, env, config, qid).rollout(tree.root, 0)
