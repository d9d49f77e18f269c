"""Judge-based evaluation metrics (optional): answer correctness and HiPRAG's over-/under-search steps, judged by
the reward code itself.

- Judge accuracy: the multi-stage paper's B.4 YES/NO judge on the extracted answer, sent as the multi-stage reward
  sends it (``correctness_request`` of :mod:`agentrag_verl.methods.multistage.judge`); a question without an answer
  is wrong without a call.
- HiPRAG OSR/USR (Eq. 2): the steps are judged by the HiPRAG reward's own detectors
  (``judge_steps`` of :mod:`agentrag_verl.methods.hiprag.judge`: Figure 5 judge on every search step against the
  policy's re-answer of its query, Figure 6 verifier on every non-search step, re-answers paired with steps as in
  the reward). Unlike the reward, which asks for them only when A = F = 1 (its gated bonus), evaluation judges
  every parsable step of every trajectory, as Eq. 2 pools over the test set.

The methods are found by name through :func:`agentrag_verl.registry.method_module` (the evaluation imports no
method). Decision: a failed verdict (after the client's retries) or a search step without a re-answer is left out
of the rates and counted in ``failures`` / ``missing_reanswers``; it is never guessed as optimal or sub-optimal.
The harness then fails the question (:func:`agentrag_verl.eval.harness.unjudged_metrics`): a failed verdict means the
metric could not be computed, and the question is retried by the next run, as a failed rollout is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentrag_verl.registry import method_module

__all__ = ["judge_correctness", "hiprag_step_judgements"]


async def judge_correctness(client: Any, prediction: str | None, golds: Sequence[str]) -> dict[str, Any]:
    """``{"correct": bool | None, "ok": bool, "called": bool}`` for one answer (multi-stage B.4 judge), and
    ``"error"`` (``"<kind>: <message>"``) when the verdict failed."""
    if prediction is None:
        return {"correct": False, "ok": True, "called": False}
    multistage = method_module("multistage", "judge")
    verdict = await client.judge(multistage.correctness_request(prediction, list(golds)))
    if not verdict.ok:
        return {"correct": None, "ok": False, "called": True, "error": f"{verdict.error_kind}: {verdict.error}"}
    return {"correct": bool(verdict.value), "ok": True, "called": True}


async def hiprag_step_judgements(
    over_client: Any, under_client: Any, response: str, extra_fields: Mapping[str, Any]
) -> dict[str, int]:
    """Over-/under-search counts of one HiPRAG-format trajectory (module docstring).

    Returns:
        ``search_steps``, ``non_search_steps`` (parsed), ``judged_search``, ``judged_non_search`` (with a valid
        verdict), ``over_search``, ``under_search``, ``failures`` (failed verdicts), ``missing_reanswers``
        (:meth:`agentrag_verl.methods.hiprag.judge.StepJudgements.counts`).
    """
    from agentrag_verl.formats import get_format

    hiprag = method_module("hiprag", "judge")
    clients = {"over_search": over_client, "under_search": under_client}

    async def client(detector: str) -> Any:
        return clients[detector]

    steps = get_format("hiprag").parse(response).steps
    return (await hiprag.judge_steps(steps, extra_fields, client)).counts()
