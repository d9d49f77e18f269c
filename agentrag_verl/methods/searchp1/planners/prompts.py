"""The vote prompt of Search-P1's reference-planner generation (Eq. 5).

Search-P1 §3.2.1 merges the correct candidates by "LLM voting" that "identifies the minimal set of essential steps
across successful trajectories", but prints no prompt for it (Appendix D has Figures 7-9 only). This prompt is ours:
it shows the question, the gold answers and the numbered candidates, states that rule, and asks for the Figure 8
output format, so the reply is parsed by the same
:func:`~agentrag_verl.methods.searchp1.judge.parse_planner` as a candidate.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from agentrag_verl.judges.prompts import format_answers
from agentrag_verl.methods.searchp1.judge import ReferencePlan

__all__ = ["VOTE_TEMPLATE", "vote_messages"]

VOTE_TEMPLATE = (
    "You are an expert planner and reasoning optimizer. Several candidate plans were written for the same question, "
    "and each of them leads to the correct answer.\n"
    "Current Question: {question}\n"
    "Correct Answer: {golden_answers}\n"
    "Candidate plans:\n{candidates}\n"
    "Your task is to vote: identify the minimal set of essential search steps that the successful candidates agree "
    "on, and merge them into one reference plan.\n"
    "1. Optimized Reasoning Path: the essential search queries, in order. Format as a numbered list.\n"
    "2. Optimized Planner: A concise, step-by-step instruction on how a reasoning agent should solve this question "
    "correctly and efficiently.\n"
    "Important: keep only steps that are necessary; drop steps that only some candidates take or that are redundant.\n"
    "Output format:\n"
    "<correct_reasoning_path>\n1. ...\n</correct_reasoning_path>\n"
    "<optimized_planner>\n...\n</optimized_planner>"
)
"""Vote prompt (user turn); slots ``question``, ``golden_answers``, ``candidates``."""


def _candidate_text(i: int, plan: ReferencePlan) -> str:
    path = "\n".join(f"   {j}. {q}" for j, q in enumerate(plan.reasoning_path, start=1))
    return f"Candidate {i}:\n  Reasoning path:\n{path}\n  Planner: {plan.planner}"


def vote_messages(
    question: str, golden_answers: str | Iterable[str], candidates: Sequence[ReferencePlan]
) -> list[dict[str, str]]:
    """Chat messages asking the planner LLM to merge ``candidates`` (Eq. 5).

    >>> m = vote_messages("Q?", ["A"], [ReferencePlan(("x",), "p"), ReferencePlan(("x", "y"), "p2")])
    >>> "Candidate 2:" in m[0]["content"] and "2. y" in m[0]["content"]
    True
    """
    text = VOTE_TEMPLATE.format(
        question=question,
        golden_answers=format_answers(golden_answers),
        candidates="\n".join(_candidate_text(i, c) for i, c in enumerate(candidates, start=1)),
    )
    return [{"role": "user", "content": text}]
