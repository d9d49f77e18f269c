"""AutoSearch's evaluation metrics: the intermediate answers' EM, t_c (Eq. 6) and over-search (OSR).

Per question, for the ``autosearch`` format (whose loop writes intermediate answers) and any run that produced
intermediate answers: ``intermediate_em``, ``t_c`` and ``over_search`` (the question was answered correctly by an
intermediate answer before the final retrieval step). They are the AutoSearch reward's own step view
(:func:`agentrag_verl.methods.autosearch.parts.step_view`), so the evaluation reports what the reward scores.
Per dataset: ``autosearch_osr``, the fraction of those questions that over-searched (column "OSR(AS)").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentrag_verl.agent_loops import fields as F
from agentrag_verl.eval.hooks import EvalHooks
from agentrag_verl.methods.autosearch.parts import step_view

__all__ = ["AutoSearchEvalHooks", "HOOKS"]


class AutoSearchEvalHooks(EvalHooks):
    columns = (("autosearch_osr", "OSR(AS)", True),)

    def question(
        self, format_name: str, response: str, golds: Sequence[str], fields: Mapping[str, Any], trajectory: Any
    ) -> dict[str, Any] | None:
        if not fields.get(F.INTERMEDIATE_ANSWERS) and format_name.strip().lower() != "autosearch":
            return None
        # a run that never searched cannot have over-searched, but it counts in the OSR denominator
        view = step_view(format_name, response, golds, fields, trajectory=trajectory)
        return {"intermediate_em": view.intermediate_em, "t_c": view.t_c, "over_search": view.over_search}

    def dataset(self, entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        over = [float(bool(e.get("over_search"))) for e in entries]
        return {"autosearch_osr": sum(over) / len(over) if over else None}


HOOKS = AutoSearchEvalHooks()
