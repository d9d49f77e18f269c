"""The MCTS tree of ReasonRAG's workflow (Appendix A; ``docs/methods/reasonrag.md``): states, actions, transitions,
serialization.

A node is a state ``s = (x, y_<i, stage)``: the question ``x`` (held by the :class:`Tree`), the stage outputs on
the path from the root (``Tree.thoughts``), and the stage of the *next* action. The step output that led to the
node is ``Node.text``, with its action type (Query Generation / Evidence Extraction / Answer Generation):

==========  ===========================================  =====================================================
stage       the policy writes (prompt)                   next stage
==========  ===========================================  =====================================================
reasoning   ``So the next query is <query>q</query>``    grounding (the retriever runs on q; hits on the node)
            ``So the answer is <answer>a</answer>``      terminal
            neither (or an empty query): ``invalid``     terminal (the agent loop stops there too)
grounding   ``... <evidence>e</evidence>`` (Figure 13)   reasoning
            no evidence block: ``invalid``               reasoning (the agent loop appends it and goes on)
==========  ===========================================  =====================================================

Prompts are the format's own (:func:`agentrag_verl.methods.reasonrag.grammar.reasoning_messages` and
``grounding_messages``), so the MCTS, the DPO pairs and the inference agent loop see identical messages.

Budget: a trajectory has at most ``max_iter`` stage outputs (Algorithm 1's N; authors' code 7: R, (G, R) x 3). A
node that reaches it without an answer is terminal with ``budget_exhausted`` and no answer (value 0). Deviation:
the authors switch to an extra answer-generation prompt (not in the paper) at the last step, and our agent loop
pre-fills ``So the answer is <answer>``; a chat endpoint cannot pre-fill, so here such a branch simply ends without
an answer, which SPRE scores 0 (the paper prunes branches without a final answer).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from agentrag_verl.methods.reasonrag import grammar as reasonrag

__all__ = [
    "Stage",
    "ActionType",
    "ACTION_NAMES",
    "REASONING_STOP",
    "GROUNDING_STOP",
    "Node",
    "Tree",
    "classify_step",
    "state_messages",
]

Stage = Literal["reasoning", "grounding", "terminal"]
ActionType = Literal["query", "evidence", "answer", "invalid"]

ACTION_NAMES = {"query": "Query Generation", "evidence": "Evidence Extraction", "answer": "Answer Generation"}
"""Action types with the names of the paper's Table 1."""

# Stop strings per stage, as the ReasonRAG agent loop uses them (agent_loops/reasonrag_agent_loop.py).
REASONING_STOP = ("</query>", "</answer>")
GROUNDING_STOP = ("</evidence>",)

_WS = re.compile(r"\s+")


def classify_step(stage: Stage, text: str) -> tuple[ActionType, str | None]:
    """The action type and content of a stage output (see the module table).

    Args:
        stage: The stage the output was generated in (``reasoning`` or ``grounding``).
        text: The stage output, cut at its stop string.

    Returns:
        ``(action, content)``: the query, evidence or answer text (stripped), ``None`` for ``invalid``.

    >>> classify_step("reasoning", "I need the year. So the next query is <query>Orla Brennick</query>")
    ('query', 'Orla Brennick')
    >>> classify_step("grounding", "Based on the query, the relevant evidence is <evidence>1934</evidence>")
    ('evidence', '1934')
    >>> classify_step("reasoning", "I am not sure.")
    ('invalid', None)
    """
    if stage == "reasoning":
        action = reasonrag.ACTION_SPEC.extract_action(text)
        if action is None:
            return "invalid", None
        if action.kind == "answer":
            return "answer", action.content
        return ("query", action.content) if action.content else ("invalid", None)
    if stage == "grounding":
        evidence = [s.evidence for s in reasonrag.parse(text).steps if s.evidence is not None]
        return ("evidence", evidence[-1]) if evidence and evidence[-1] else ("invalid", None)
    raise ValueError(f"a terminal state has no next step (stage={stage!r})")


def state_messages(
    question: str, thoughts: Sequence[str], stage: Stage, docs: Sequence[Any] | None = None
) -> list[dict[str, str]]:
    """The chat messages of a state's next step (Eq. 4): Figure 12 for Reasoning, Figure 13 (with the retrieved
    ``docs``) for Grounding.

    >>> state_messages("Who?", [], "reasoning")[1]["content"]
    'Question: Who?'
    """
    if stage == "reasoning":
        return reasonrag.reasoning_messages(question, list(thoughts))
    if stage == "grounding":
        return reasonrag.grounding_messages(question, list(thoughts), docs or [])
    raise ValueError(f"a terminal state has no prompt (stage={stage!r})")


@dataclass
class Node:
    """One state of the tree with its MCTS statistics.

    Attributes:
        id: Index in :attr:`Tree.nodes` (the root is 0).
        parent: Parent id (``None`` for the root).
        depth: Stage outputs from the root to this node (the root has 0).
        stage: Stage of the next action; ``terminal`` when the trajectory ended here.
        text: The stage output that led here (``""`` at the root).
        action: Its action type (``None`` at the root).
        content: The query / evidence / answer inside ``text``.
        docs: Retriever hits of a query node (the next Grounding step reads them).
        budget_exhausted: Terminal because ``max_iter`` stage outputs were used without an answer.
        children: Child ids in expansion order.
        visits: ``N(s)``: evaluations backpropagated through this node (Eq. 7).
        value_sum: Sum of those values; ``Q(s) = value_sum / visits``.
        estimate: The value this node got when it was created (SPRE rollouts, process evaluation or, for a
            terminal node, its outcome); re-selecting a terminal node backpropagates it again.
        estimator: How ``estimate`` was obtained: ``outcome``, ``spre``, ``process_eval`` or ``fallback_zero``.
        rollouts: SPRE rollouts from this node: ``{"answer", "steps", "f1", "value"}``.
        judge_score: The process-evaluation score (Eq. 6), when one was used.
        reward: The pair value filled in after the search (see ``MCTSConfig.pair_value``).
    """

    id: int
    parent: int | None
    depth: int
    stage: Stage
    text: str = ""
    action: ActionType | None = None
    content: str | None = None
    docs: list[dict[str, Any]] | None = None
    budget_exhausted: bool = False
    children: list[int] = field(default_factory=list)
    visits: int = 0
    value_sum: float = 0.0
    estimate: float | None = None
    estimator: str | None = None
    rollouts: list[dict[str, Any]] = field(default_factory=list)
    judge_score: float | None = None
    reward: float | None = None

    @property
    def q(self) -> float:
        """``Q(s)``: the mean of the values backpropagated through the node (0 before any visit)."""
        return self.value_sum / self.visits if self.visits else 0.0

    @property
    def terminal(self) -> bool:
        return self.stage == "terminal"

    @property
    def answer(self) -> str | None:
        """The final answer of a terminal answer node."""
        return self.content if self.action == "answer" else None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["q"] = self.q
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Node:
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**fields)


@dataclass
class Tree:
    """A question's search tree: ``nodes[0]`` is the root (stage ``reasoning``)."""

    question: str
    golden_answers: list[str]
    nodes: list[Node] = field(default_factory=list)

    @classmethod
    def new(cls, question: str, golden_answers: Sequence[str]) -> Tree:
        return cls(question, list(golden_answers), [Node(id=0, parent=None, depth=0, stage="reasoning")])

    @property
    def root(self) -> Node:
        return self.nodes[0]

    def add_child(self, parent: Node, **fields: Any) -> Node:
        node = Node(id=len(self.nodes), parent=parent.id, depth=parent.depth + 1, **fields)
        self.nodes.append(node)
        parent.children.append(node.id)
        return node

    def children(self, node: Node) -> list[Node]:
        return [self.nodes[i] for i in node.children]

    def path(self, node: Node) -> list[Node]:
        """Nodes from the root to ``node`` (both included)."""
        out = [node]
        while out[-1].parent is not None:
            out.append(self.nodes[out[-1].parent])  # type: ignore[index]
        return out[::-1]

    def thoughts(self, node: Node) -> list[str]:
        """``y_<i``: the stage outputs from the root to ``node`` (its own ``text`` included)."""
        return [n.text for n in self.path(node)[1:]]

    def messages(self, node: Node) -> list[dict[str, str]]:
        """The prompt of ``node``'s next step (what its children were generated from)."""
        return state_messages(self.question, self.thoughts(node), node.stage, node.docs)

    def walk(self) -> Iterator[Node]:
        """Nodes in breadth-first order."""
        queue = deque([self.root])
        while queue:
            node = queue.popleft()
            yield node
            queue.extend(self.children(node))

    def to_dict(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "golden_answers": self.golden_answers,
            "nodes": [n.to_dict() for n in self.nodes],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Tree:
        return cls(data["question"], list(data["golden_answers"]), [Node.from_dict(n) for n in data["nodes"]])


def normalize_text(text: str | None) -> str:
    """Whitespace-collapsed text, for comparing step outputs.

    >>> normalize_text("  So the answer is\\n <answer>a</answer> ")
    'So the answer is <answer>a</answer>'
    """
    return _WS.sub(" ", text or "").strip()
