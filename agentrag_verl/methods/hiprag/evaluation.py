"""HiPRAG's evaluation metrics: over- and under-search rates (Eq. 2), judged by the reward's own detectors.

For every ``hiprag``-format trajectory, when the evaluation has a judge: the steps are judged by
:func:`agentrag_verl.methods.hiprag.judge.judge_steps` (Figure 5 judge on every search step against the policy's
re-answer of its query, Figure 6 verifier on every non-search step, re-answers paired with steps as in the reward).
Unlike the reward, which asks for them only when A = F = 1 (its gated bonus), evaluation judges every parsable step
of every trajectory, as Eq. 2 pools over the test set.

Per dataset: ``hiprag_osr`` (over-search steps / judged search steps, pooled), ``hiprag_usr`` (under-search steps /
judged non-search steps, pooled) and ``hiprag_judge_failures`` (summed in the average row). Decision: a failed
verdict (after the client's retries) or a search step without a re-answer is left out of the rates and counted in
``failures`` / ``missing_reanswers``; it is never guessed as optimal or sub-optimal. The harness then fails the
question (:meth:`HipragEvalHooks.failed`): the metric could not be computed, and the next run retries it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentrag_verl.eval.hooks import EvalHooks
from agentrag_verl.methods.hiprag.grammar import FORMAT
from agentrag_verl.methods.hiprag.judge import judge_steps

__all__ = ["HipragEvalHooks", "HOOKS", "step_judgements"]


async def step_judgements(
    over_client: Any, under_client: Any, response: str, extra_fields: Mapping[str, Any]
) -> dict[str, int]:
    """Over-/under-search counts of one HiPRAG-format trajectory.

    Returns:
        ``search_steps``, ``non_search_steps`` (parsed), ``judged_search``, ``judged_non_search`` (with a valid
        verdict), ``over_search``, ``under_search``, ``failures`` (failed verdicts), ``missing_reanswers``
        (:meth:`agentrag_verl.methods.hiprag.judge.StepJudgements.counts`).
    """
    clients = {"over_search": over_client, "under_search": under_client}

    async def client(detector: str) -> Any:
        return clients[detector]

    return (await judge_steps(FORMAT.parse(response).steps, extra_fields, client)).counts()


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


class HipragEvalHooks(EvalHooks):
    columns = (("hiprag_osr", "OSR(HiPRAG)", True), ("hiprag_usr", "USR(HiPRAG)", True))
    summed = ("hiprag_judge_failures",)

    async def judged(
        self, judge: Any, format_name: str, response: str, fields: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        if format_name.strip().lower() != FORMAT.name:
            return None
        return await step_judgements(judge, judge, response, fields)

    def dataset(self, entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return {
            "hiprag_osr": _ratio(sum(e["over_search"] for e in entries), sum(e["judged_search"] for e in entries)),
            "hiprag_usr": _ratio(sum(e["under_search"] for e in entries), sum(e["judged_non_search"] for e in entries)),
            "hiprag_judge_failures": sum(e.get("failures", 0) for e in entries),
        }

    def failed(self, entry: Mapping[str, Any]) -> str | None:
        return "hiprag_osr/hiprag_usr" if entry.get("failures") else None


HOOKS = HipragEvalHooks()
