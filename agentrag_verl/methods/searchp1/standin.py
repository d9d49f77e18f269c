"""Search-P1's rules in the stand-in judge server (:mod:`agentrag_verl.standin`; a stand-in, not a model).

- Figure 8 planner prompt: the reference path of a mini-wiki question is its hops' queries (the row's
  ``metadata.hops``, the plan the scripted teacher plays), as a strong planner would split a two-hop question;
  any other question gets a one-query plan (the question itself). The planner text names the gold answer the
  prompt gives. So ``agentrag-verl planners generate`` builds a local reference-planner cache.
- Figure 9 evaluator: a score sheet computed from the prompt by rules (:func:`evaluate`), so that the path reward
  and the soft outcome move with the trajectory as a real evaluator's would (a constant sheet would hand every
  trajectory the same credit and hide a reward that cannot teach):

  - ``outcome_accuracy_score``: 1.0 when the answer covers a gold answer (cover exact match), 0.5 when it shares a
    token with one (F1 > 0), else 0.0;
  - ``outcome_reasoning_score``: 1.0 right and grounded (a tool response holds the gold answer), 0.8 right but not
    grounded, 0.5 partial, else 0.0;
  - ``model_plan_steps``: the tool calls made (the plan as executed); ``effective_steps_self``: those with a new
    query (a repeat executes nothing new);
  - ``effective_steps_ref``: reference-path steps that some query covers (at least half of the step's words);
  - ``planner_score``: 1.2 right, grounded and the whole reference path covered; 1.0 right; 0.6 grounded; else 0.2.
"""

from __future__ import annotations

import functools
import json
import re

from agentrag_verl.judges.prompts import ANSWER_SEPARATOR
from agentrag_verl.methods.searchp1.judge import parse_reasoning_path
from agentrag_verl.metrics import cover_exact_match, f1_score, normalize_answer

__all__ = ["evaluate", "reply", "world_plans"]

_QUESTION = re.compile(r"Current Question: (.*?)\n")
_ANSWER = re.compile(r"Correct Answer: (.*?)\n")
_EVAL = re.compile(
    r"Correct Answer: (?P<gold>.*?)\nReference Planner: .*?\nReference Path: (?P<path>.*?)\n"
    r"Model Trajectory: (?P<trajectory>.*)\nScoring Criteria:",
    re.S,
)


def _covers(query: str, step: str) -> bool:
    words = set(normalize_answer(step).split())
    return bool(words) and len(words & set(normalize_answer(query).split())) >= len(words) / 2


def evaluate(golds: list[str], reference_path: list[str], trajectory: str) -> dict[str, float | int]:
    """The score sheet of Figure 9 by the rules of the module docstring.

    >>> ev = evaluate(["Rome"], ["capital of Italy"], "<reasoning>plan</reasoning><tool_call>capital of Italy"
    ...               "</tool_call><tool_response>Rome is the capital.</tool_response><answer>Rome</answer>")
    >>> ev["planner_score"], ev["effective_steps_ref"], ev["outcome_accuracy_score"], ev["outcome_reasoning_score"]
    (1.2, 1, 1.0, 1.0)
    >>> evaluate(["Rome"], ["capital of Italy"], "<reasoning>p</reasoning><answer>Paris</answer>")["planner_score"]
    0.2
    """
    from agentrag_verl.methods.searchp1.grammar import parse

    t = parse(trajectory)
    queries = [s.query for s in t.steps if s.query]
    answer = t.answer or ""
    right = bool(answer.strip()) and cover_exact_match(answer, golds) == 1.0
    partial = not right and f1_score(answer, golds) > 0
    grounded = any(
        normalize_answer(g) and normalize_answer(g) in normalize_answer(s.observation or "")
        for s in t.steps
        for g in golds
    )
    covered = sum(any(_covers(q, step) for q in queries) for step in reference_path)
    if right and grounded and covered == len(reference_path):
        planner = 1.2
    else:
        planner = 1.0 if right else 0.6 if grounded else 0.2
    return {
        "planner_score": planner,
        "model_plan_steps": len(queries),
        "effective_steps_self": len({normalize_answer(q) for q in queries}),
        "effective_steps_ref": covered,
        "outcome_accuracy_score": 1.0 if right else 0.5 if partial else 0.0,
        "outcome_reasoning_score": (1.0 if grounded else 0.8) if right else 0.5 if partial else 0.0,
    }


def reply(system: str, user: str) -> str | None:
    """The stand-in's reply to a Search-P1 evaluator or planner request; None for any other prompt."""
    if "Dual-Track Evaluation" in user:
        m = _EVAL.search(user)
        if m is None:
            return None
        golds = [g.strip() for g in m.group("gold").split(ANSWER_SEPARATOR.strip()) if g.strip()]
        path = list(parse_reasoning_path(m.group("path")))
        return json.dumps(evaluate(golds, path, m.group("trajectory")))
    if "Optimized Reasoning Path" in user:
        question, answer = _QUESTION.search(user), _ANSWER.search(user)
        q = question.group(1).strip() if question else "the question"
        a = answer.group(1).strip() if answer else "unknown"
        path = world_plans().get(q) or (q,)
        steps = "\n".join(f"{i}. {step}" for i, step in enumerate(path, 1))
        searches = "once" if len(path) == 1 else f"{len(path)} times, one step at a time"
        return (
            f"<correct_reasoning_path>\n{steps}\n</correct_reasoning_path>\n"
            f"<optimized_planner>\nSearch {searches}, then answer {a}.\n</optimized_planner>"
        )
    return None


@functools.cache
def world_plans() -> dict[str, tuple[str, ...]]:
    """``{question: its hops' queries}`` of every mini-wiki question that carries ``metadata.hops``."""
    from agentrag_verl.eval.data import MINI_WIKI_DIR

    plans = {}
    for path in sorted(MINI_WIKI_DIR.glob("*/*.jsonl")):
        for row in map(json.loads, path.read_text(encoding="utf-8").splitlines()):
            hops = (row.get("metadata") or {}).get("hops")
            if hops:
                plans[row["question"].strip()] = tuple(str(h["query"]) for h in hops)
    return plans
