"""RAG-ProGuide: step-level preference pairs from finished MCTS trees, and the dataset statistics of Table 1
(Zhang et al., §2.2.3; decisions in ``docs/methods/reasonrag.md#decisions``).

For every node with at least two children that have a pair value (``Node.reward``), every pair of those children
is a candidate (the authors' code; with ``max_children=2`` that is one pair per node). The higher-valued child is
*chosen*, the lower *rejected*. Branches that never reached a final answer are pruned first (§2.2.3: "we prune all
branches that do not yield a final answer"; ``prune_unanswered``, on by default): a child takes part only if it
answered, or one of its descendants in the tree or one of its SPRE rollouts did (:func:`answered_nodes`). The pruning
applies to the pairs; the search's statistics (visits, Q) are those of the whole tree. A pair is kept when

- the reward gap is at least ``min_gap`` (0.01, the paper: "pairs with a reward difference less than 0.01" are
  removed; compared with a 1e-9 tolerance so 0.11 - 0.10 counts as 0.01),
- the two step texts differ (the paper: "we discard preference pairs with identical response sequences"); with
  ``distinct="content"`` (default, the authors' code) they must also differ in their action content, i.e. two
  queries with the same query text or two answers with the same answer are not a preference however their prose
  differs,
- the chosen step is a well-formed action (query / evidence / answer; the authors' code drops pairs whose chosen
  step is "Other"). With ``prune_unanswered=False`` a rejected step may be malformed (``invalid``); by default such
  a step, which ends its branch without an answer, is pruned.

Each pair is written in TRL's conversational preference format, ready for ``DPOTrainer``: ``prompt`` is the chat
messages the policy saw for that step (Figure 12 / 13 system prompt; the question and the previous steps, and for
evidence extraction the retrieved passages), ``chosen`` / ``rejected`` one assistant message each. Metadata rides
along: values, gap, action types, stage, depth, question id and source.

Statistics (:func:`dataset_statistics`, Table 1 and Figure 3): questions per source, actions (the chosen step's
type), pair types ("Q-A" = chosen query vs rejected answer), iterations (the chosen step's position in the
trajectory, 1-based), tokens of the chosen step (a tokenizer's count, or whitespace words without one) and the reward
gap distribution.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Literal

from agentrag_verl.methods.reasonrag.tree import ACTION_NAMES, Node, Tree, normalize_text

__all__ = ["PairConfig", "answered_nodes", "build_pairs", "dataset_statistics", "statistics_markdown"]

_LETTER = {"query": "Q", "evidence": "E", "answer": "A", "invalid": "I"}
_GAP_TOLERANCE = 1e-9


@dataclass(frozen=True)
class PairConfig:
    """Pair filters (module docstring)."""

    min_gap: float = 0.01
    """Smallest reward difference kept (the paper: 0.01)."""

    distinct: Literal["content", "text"] = "content"
    """``content``: the steps must differ in text and in action content (authors' code); ``text``: in text only."""

    prune_unanswered: bool = True
    """Leave out branches that never reached a final answer (§2.2.3); False keeps them (e.g. a malformed step as the
    rejected side, or a query whose rollouts never answered)."""

    def __post_init__(self) -> None:
        if self.min_gap < 0:
            raise ValueError(f"pairs.min_gap must be >= 0, got {self.min_gap}")
        if self.distinct not in ("content", "text"):
            raise ValueError(f"pairs.distinct={self.distinct!r}; choose 'content' or 'text'")


def _same(a: Node, b: Node, distinct: str) -> bool:
    if normalize_text(a.text) == normalize_text(b.text):
        return True
    if distinct == "content" and a.action == b.action and a.content is not None and b.content is not None:
        return normalize_text(a.content).lower() == normalize_text(b.content).lower()
    return False


def answered_nodes(tree: Tree) -> set[int]:
    """Ids of the nodes whose branch yields a final answer: an answer node, a node with a descendant in the tree that
    answered, or a node one of whose SPRE rollouts ended in an answer.

    >>> tree = Tree.new("q", ["a"])
    >>> query = tree.add_child(tree.root, stage="grounding", text="So the next query is <query>x</query>",
    ...                        action="query", content="x")
    >>> stuck = tree.add_child(tree.root, stage="terminal", text="I am not sure.", action="invalid")
    >>> evidence = tree.add_child(query, stage="reasoning", text="<evidence>e</evidence>", action="evidence")
    >>> evidence.rollouts = [{"answer": None, "steps": 2}, {"answer": "a", "steps": 3}]
    >>> sorted(answered_nodes(tree))  # the root, the query (through its child) and the evidence (a rollout)
    [0, 1, 3]
    """
    reached: set[int] = set()
    for node in reversed(tree.nodes):  # children are appended after their parent: visit them first
        if (
            (node.action == "answer" and node.content is not None)
            or any(isinstance(r, Mapping) and r.get("answer") is not None for r in node.rollouts)
            or any(c in reached for c in node.children)
        ):
            reached.add(node.id)
    return reached


def build_pairs(
    tree: Tree, config: PairConfig | None = None, *, question_id: str = "", source: str = ""
) -> list[dict[str, Any]]:
    """The preference pairs of one finished tree (module docstring).

    Args:
        tree: A tree whose nodes have ``reward`` filled (:func:`~agentrag_verl.methods.reasonrag.mcts.run_mcts` does).
        config: Filters.
        question_id: Written into each pair.
        source: Dataset name written into each pair (Table 1 per-source counts).

    Returns:
        Pair records (JSON-serializable), in breadth-first order of their parent node.
    """
    config = config or PairConfig()
    answered = answered_nodes(tree) if config.prune_unanswered else None
    pairs: list[dict[str, Any]] = []
    for parent in tree.walk():
        rated = [
            c
            for c in tree.children(parent)
            if c.reward is not None and c.action is not None and (answered is None or c.id in answered)
        ]
        if len(rated) < 2:
            continue
        prompt = None
        for a, b in combinations(rated, 2):
            gap = abs(a.reward - b.reward)  # type: ignore[operator]
            if gap + _GAP_TOLERANCE < config.min_gap:
                continue
            chosen, rejected = (a, b) if a.reward > b.reward else (b, a)  # type: ignore[operator]
            if chosen.action not in ACTION_NAMES or _same(chosen, rejected, config.distinct):
                continue
            if prompt is None:
                prompt = tree.messages(parent)
            pairs.append(
                {
                    "prompt": prompt,
                    "chosen": [{"role": "assistant", "content": chosen.text}],
                    "rejected": [{"role": "assistant", "content": rejected.text}],
                    "chosen_value": chosen.reward,
                    "rejected_value": rejected.reward,
                    "gap": gap,
                    "chosen_action": chosen.action,
                    "rejected_action": rejected.action,
                    "stage": parent.stage,
                    "depth": chosen.depth,
                    "question_id": question_id,
                    "source": source,
                    "question": tree.question,
                    "golden_answers": tree.golden_answers,
                    "node_ids": [parent.id, chosen.id, rejected.id],
                    "visits": [chosen.visits, rejected.visits],
                }
            )
    return pairs


def _summary(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"count": 0, "avg": 0.0, "min": 0.0, "median": 0.0, "max": 0.0}
    return {
        "count": len(values),
        "avg": statistics.fmean(values),
        "min": min(values),
        "median": statistics.median(values),
        "max": max(values),
    }


def _counts_with_share(counter: Mapping[str, int], total: int) -> dict[str, dict[str, float]]:
    return {k: {"count": v, "share": v / total if total else 0.0} for k, v in sorted(counter.items())}


def dataset_statistics(
    pairs: Iterable[Mapping[str, Any]],
    questions_searched: Mapping[str, int] | None = None,
    count_tokens: Callable[[str], int] | None = None,
    gap_bins: int = 10,
) -> dict[str, Any]:
    """Table 1 / Figure 3 statistics of a pair set.

    Args:
        pairs: Pair records from :func:`build_pairs`.
        questions_searched: Source -> questions whose trees were built (Table 1 counts only questions with a pair).
        count_tokens: Token counter for the chosen steps; whitespace words when ``None``.
        gap_bins: Bins of the reward-gap histogram over [0, 1].

    Returns:
        A JSON-serializable dict.

    >>> pair = {"question_id": "q1", "source": "nq", "chosen_action": "answer", "rejected_action": "query",
    ...         "depth": 1, "gap": 0.5, "chosen": [{"role": "assistant", "content": "So the answer is <answer>x"
    ...         "</answer>"}]}
    >>> s = dataset_statistics([pair])
    >>> s["questions"]["total"], s["actions"]["Answer Generation"]["count"], s["pair_types"]
    (1, 1, {'A-Q': 1})
    """
    pairs = list(pairs)
    count = count_tokens or (lambda text: len(text.split()))
    by_source: dict[str, set[str]] = {}
    actions: Counter[str] = Counter()
    pair_types: Counter[str] = Counter()
    depths, tokens, gaps = [], [], []
    histogram = [0] * gap_bins
    for p in pairs:
        by_source.setdefault(p.get("source") or "", set()).add(p["question_id"])
        actions[ACTION_NAMES[p["chosen_action"]]] += 1
        pair_types[f"{_LETTER[p['chosen_action']]}-{_LETTER[p['rejected_action']]}"] += 1
        depths.append(p["depth"])
        tokens.append(count(p["chosen"][-1]["content"]))
        gaps.append(p["gap"])
        histogram[min(gap_bins - 1, max(0, math.floor(p["gap"] * gap_bins)))] += 1
    total_questions = sum(len(v) for v in by_source.values())
    out: dict[str, Any] = {
        "questions": {
            "total": total_questions,
            "by_source": _counts_with_share({k: len(v) for k, v in by_source.items()}, total_questions),
        },
        "pairs": len(pairs),
        "actions": _counts_with_share(actions, len(pairs)),
        "pair_types": dict(sorted(pair_types.items())),
        "iteration": _summary(depths),
        "tokens": {**_summary(tokens), "unit": "tokenizer" if count_tokens else "whitespace words"},
        "reward_gap": {
            **_summary(gaps),
            "histogram": {f"{i / gap_bins:.1f}-{(i + 1) / gap_bins:.1f}": n for i, n in enumerate(histogram)},
        },
    }
    if questions_searched is not None:
        searched = sum(questions_searched.values())
        out["questions"]["searched"] = searched
        out["questions"]["searched_by_source"] = dict(sorted(questions_searched.items()))
    return out


def statistics_markdown(stats: Mapping[str, Any]) -> str:
    """Render :func:`dataset_statistics` as the paper's Table 1 (markdown)."""

    def fmt(s: Mapping[str, float]) -> str:
        return f"{s['avg']:.1f}/{s['min']:g}/{s['median']:g}/{s['max']:g}"

    q = stats["questions"]
    lines = ["| Statistics | Number |", "|---|---|", f"| Questions | {q['total']} |"]
    for source, v in q["by_source"].items():
        lines.append(f"| - {source or '(no source)'} | {v['count']} ({100 * v['share']:.1f}%) |")
    if "searched" in q:
        lines.append(f"| Questions searched (with or without pairs) | {q['searched']} |")
    lines.append(f"| Actions | {stats['pairs']} |")
    for name in ACTION_NAMES.values():
        v = stats["actions"].get(name, {"count": 0, "share": 0.0})
        lines.append(f"| - {name} | {v['count']} ({100 * v['share']:.1f}%) |")
    lines.append(f"| Avg./Min./Med./Max. Iteration | {fmt(stats['iteration'])} |")
    lines.append(f"| Avg./Min./Med./Max. Tokens ({stats['tokens']['unit']}) | {fmt(stats['tokens'])} |")
    lines.append(f"| Avg./Min./Med./Max. Reward gap | {fmt(stats['reward_gap'])} |")
    lines.append("")
    lines.append(
        "Pair types (chosen-rejected; A answer, Q query, E evidence, I invalid): "
        + ", ".join(f"{k} {v}" for k, v in stats["pair_types"].items())
    )
    return "\n".join(lines) + "\n"
