"""ReasonRAG's script for the scripted stand-in teacher (:mod:`agentrag_verl.warmstart.teacher`): the stage outputs
of Algorithm 1 in Figures 12-13's phrasing.

ReasonRAG is not one growing trajectory: each stage is its own chat (:mod:`agentrag_verl.methods.reasonrag.agent_loop`).
The teacher reads what a model sees in the stage's user turn, after the question: ``Previous Thoughts`` (the
transcript so far) and, in a Grounding stage, the retrieved ``<reference>``. Hops done = evidence blocks in the
previous thoughts.

- Reasoning: the next hop's query (``So the next query is <query>q</query>``), or, after the last hop, its fact and
  ``So the answer is <answer>a</answer>``; after an ``<evidence>None</evidence>`` it gives up (answer
  :data:`~agentrag_verl.warmstart.teacher.GIVE_UP_ANSWER`, rejected by the demonstration writer); a common-knowledge
  question is answered at once.
- Grounding: the hop's fact as evidence when the reference holds the hop's answer, else ``<evidence>None</evidence>``.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentrag_verl.methods.reasonrag.grammar import ANSWER_PHRASE, EVIDENCE_PHRASE, NO_EVIDENCE, QUERY_PHRASE
from agentrag_verl.metrics import normalize_answer
from agentrag_verl.warmstart.teacher import (
    GIVE_UP_ANSWER,
    NOT_FOUND,
    REASON_DIRECT,
    REASON_FIRST,
    REASON_NEXT,
    TeacherPlan,
)

__all__ = ["StagedTeacher", "SCRIPT"]

_REFERENCE = "<reference>"


@dataclass(frozen=True)
class StagedTeacher:
    """A :class:`~agentrag_verl.warmstart.teacher.TeacherScript` for ReasonRAG's stages (module docstring)."""

    def respond(self, plan: TeacherPlan, seen: str) -> str:
        thoughts, _, reference = seen.partition(_REFERENCE)
        evidence = [e.split("</evidence>", 1)[0].strip() for e in thoughts.split("<evidence>")[1:]]
        if reference:  # Grounding (Figure 13): the evidence of the hop the last query asked for
            hop = plan.hops[min(len(evidence), len(plan.hops) - 1)] if plan.hops else None
            found = hop is not None and normalize_answer(hop.answer) in normalize_answer(reference)
            return (
                f"{EVIDENCE_PHRASE} <evidence>{hop.fact}</evidence>" if found else f"<evidence>{NO_EVIDENCE}</evidence>"
            )
        if not plan.needs_search:
            return f"{REASON_DIRECT} {plan.fact} {ANSWER_PHRASE} <answer>{plan.answer}</answer>"
        if evidence and evidence[-1] == NO_EVIDENCE:
            return f"{NOT_FOUND} {ANSWER_PHRASE} <answer>{GIVE_UP_ANSWER}</answer>"
        if len(evidence) < len(plan.hops):
            reason = REASON_FIRST if not evidence else REASON_NEXT
            return f"{reason} {QUERY_PHRASE} <query>{plan.hops[len(evidence)].query}</query>"
        return f"{plan.hops[-1].fact} {ANSWER_PHRASE} <answer>{plan.answer}</answer>"


SCRIPT = StagedTeacher()
