"""Search-P1's rules in the stand-in judge server (:mod:`agentrag_verl.standin`; a stand-in, not a model).

- Figure 9 evaluator: a fixed, well-formed evaluation (planner score 0.6, one effective step, outcome scores 0.5),
  so a run exercises the evaluator's wiring (HTTP, parsing, the path reward) without a real judge.
- Figure 8 planner prompt and the vote prompt: a one-query plan naming the gold answer the prompt gives, so
  ``agentrag-verl planners generate`` can build a local reference-planner cache.
"""

from __future__ import annotations

import json
import re

__all__ = ["EVALUATION", "reply"]

EVALUATION = {
    "planner_score": 0.6,
    "model_plan_steps": 1,
    "effective_steps_self": 1,
    "effective_steps_ref": 1,
    "outcome_accuracy_score": 0.5,
    "outcome_reasoning_score": 0.5,
}
_QUESTION = re.compile(r"Current Question: (.*?)\n")
_ANSWER = re.compile(r"Correct Answer: (.*?)\n")


def reply(system: str, user: str) -> str | None:
    """The stand-in's reply to a Search-P1 evaluator or planner request; None for any other prompt."""
    if "Dual-Track Evaluation" in user:
        return json.dumps(EVALUATION)
    if "Optimized Reasoning Path" in user:
        question, answer = _QUESTION.search(user), _ANSWER.search(user)
        q = question.group(1).strip() if question else "the question"
        a = answer.group(1).strip() if answer else "unknown"
        return (
            f"<correct_reasoning_path>\n1. {q}\n</correct_reasoning_path>\n"
            f"<optimized_planner>\nSearch for the question once, then answer {a}.\n</optimized_planner>"
        )
    return None
