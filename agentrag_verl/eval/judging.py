"""Judge accuracy (optional): answer correctness judged by a method's own YES/NO answer judge.

The prompt is the first declared method's answer judge (:attr:`agentrag_verl.registry.Method.answer_judge`; among
the built-in methods, the multi-stage paper's B.4 correctness judge), sent as that method's reward sends it. A
question without an answer is wrong without a call. A method's own judged metrics (e.g. over- and under-search
rates) are its evaluation hooks (:mod:`agentrag_verl.eval.hooks`).

Decision: a failed verdict (after the client's retries) is left out of the rate and counted in ``judge_failures``;
it is never guessed as right or wrong. The harness then fails the question
(:func:`agentrag_verl.eval.harness.unjudged_metrics`): a failed verdict means the metric could not be computed, and
the question is retried by the next run, as a failed rollout is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["judge_correctness", "answer_judge_request"]


def answer_judge_request(prediction: str, golds: Sequence[str]) -> Any:
    """The :class:`~agentrag_verl.judges.client.JudgeRequest` of the first method that declares an answer judge.

    Raises:
        ValueError: No declared method has one.
    """
    from agentrag_verl.registry import methods

    method = next((m for m in methods() if m.answer_judge), None)
    if method is None:
        raise ValueError(
            "No method declares an answer judge (Method.answer_judge), so judge accuracy cannot be computed; "
            "drop --judge-metrics or install a method that declares one."
        )
    return method.load("answer_judge")(prediction, list(golds))


async def judge_correctness(client: Any, prediction: str | None, golds: Sequence[str]) -> dict[str, Any]:
    """``{"correct": bool | None, "ok": bool, "called": bool}`` for one answer, and ``"error"``
    (``"<kind>: <message>"``) when the verdict failed."""
    if prediction is None:
        return {"correct": False, "ok": True, "called": False}
    verdict = await client.judge(answer_judge_request(prediction, golds))
    if not verdict.ok:
        return {"correct": None, "ok": False, "called": True, "error": f"{verdict.error_kind}: {verdict.error}"}
    return {"correct": bool(verdict.value), "ok": True, "called": True}
