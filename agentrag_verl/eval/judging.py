"""Judge-based evaluation metrics (optional): answer correctness and HiPRAG's over-/under-search steps.

- Judge accuracy: the multi-stage paper's B.4 YES/NO judge (:func:`agentrag_verl.judges.uses.
  multistage_correctness_request`) on the extracted answer; a question without an answer is wrong without a call.
- HiPRAG OSR/USR (Eq. 2): every search step's conclusion is compared with the policy's standalone re-answer of its
  query (Figure 5 judge; the re-answers come from ``hiprag_agent`` and are paired with the steps by
  :func:`agentrag_verl.agent_loops.steps.search_step_reanswers`, as in the reward), every non-search step is
  checked by the Figure 6 verifier. Unlike the reward (which judges only trajectories with A = F = 1), evaluation
  judges every parsable step of every trajectory, as Eq. 2 pools over the test set.

Decision: a failed verdict (after the client's retries) or a search step without a re-answer is left out of the
rates and counted in ``failures`` / ``missing_reanswers``; it is never guessed as optimal or sub-optimal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentrag_verl.judges import uses

__all__ = ["judge_correctness", "hiprag_step_judgements"]


async def judge_correctness(client: Any, prediction: str | None, golds: Sequence[str]) -> dict[str, Any]:
    """``{"correct": bool | None, "ok": bool, "called": bool}`` for one answer (multi-stage B.4 judge)."""
    if prediction is None:
        return {"correct": False, "ok": True, "called": False}
    verdict = await client.judge(uses.multistage_correctness_request(prediction, list(golds)))
    return {"correct": bool(verdict.value) if verdict.ok else None, "ok": bool(verdict.ok), "called": True}


async def hiprag_step_judgements(
    over_client: Any, under_client: Any, response: str, extra_fields: Mapping[str, Any]
) -> dict[str, int]:
    """Over-/under-search counts of one HiPRAG-format trajectory (module docstring).

    Returns:
        ``search_steps``, ``non_search_steps`` (parsed), ``judged_search``, ``judged_non_search`` (with a valid
        verdict), ``over_search``, ``under_search``, ``failures`` (failed verdicts), ``missing_reanswers``.
    """
    from agentrag_verl.agent_loops.steps import search_step_reanswers
    from agentrag_verl.formats import get_format
    from agentrag_verl.judges.policy import hiprag_step_optimal

    steps = list(get_format("hiprag").parse(response).steps)
    reanswers = search_step_reanswers(steps, extra_fields)  # the pairing the reward uses
    over_reqs: dict[int, Any] = {}
    under_reqs: dict[int, Any] = {}
    missing = 0
    for i, step in enumerate(steps):
        if step.is_search:
            text = reanswers[i]
            if text is None:
                missing += 1
                continue
            over_reqs[i] = uses.hiprag_over_search_request(step.conclusion or "", text)
        else:
            under_reqs[i] = uses.hiprag_under_search_request(step.reasoning or "", step.conclusion or "")
    out = {
        "search_steps": sum(1 for s in steps if s.is_search),
        "non_search_steps": sum(1 for s in steps if not s.is_search),
        "judged_search": 0,
        "judged_non_search": 0,
        "over_search": 0,
        "under_search": 0,
        "failures": 0,
        "missing_reanswers": missing,
    }
    for detector, client, reqs in (("over_search", over_client, over_reqs), ("under_search", under_client, under_reqs)):
        if not reqs:
            continue
        for verdict in await client.judge_many(list(reqs.values())):
            if not verdict.ok:
                out["failures"] += 1
                continue
            optimal = hiprag_step_optimal(verdict, detector)
            if detector == "over_search":
                out["judged_search"] += 1
                out["over_search"] += int(optimal is False)
            else:
                out["judged_non_search"] += 1
                out["under_search"] += int(optimal is False)
    return out
