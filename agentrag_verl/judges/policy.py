"""What a reward does with a judge verdict that failed (timeout, HTTP error, unparsable reply after retries).

A failed :class:`~agentrag_verl.judges.client.Verdict` has ``ok=False``; the functions here turn any verdict into
the value the reward consumes, applying the use's error policy. Failures are counted by the client's metrics
(``judge/failures/<kind>``) whatever the policy.

- HiPRAG step judges (``docs/methods/hiprag.md#decisions``), :class:`HipragErrorPolicy`: ``exclude`` (default; the step
  leaves the bonus's numerator and denominator), ``optimal`` (counts as correct, as the authors' code does) or
  ``suboptimal`` (counts as over-/under-search).
- Multi-stage correctness (B.4 judge), :class:`CorrectnessFallback`: ``exact_match`` (default), ``cover_exact_match``
  (the string metrics decide) or ``incorrect``.
- ReasonRAG process score (Eq. 6), :class:`ProcessScoreFallback`: ``rollout`` (default; ``None``, the caller
  estimates the node by SPRE rollouts, Eq. 1) or ``zero``.
- Search-P1 evaluator (Figure 9): :data:`OUTCOME_ONLY_EVALUATION` (path reward 0, outcome by exact match).
- Search-P1 planner (Figure 8): ``None``, the question has no reference plan (Track B of Eq. 7 is off).

Decisions: the multi-stage default falls back to exact match rather than cover match because cover match rewards
long answers listing many candidates; ReasonRAG falls back to its own primary estimator (SPRE rollouts) rather
than a made-up value; a failed Search-P1 evaluation must not hand out path credit, so Eq. 6/7 see zero effective
steps and Eq. 8 sees zero soft scores, leaving the exact-match outcome and the format reward.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any, Literal, TypeVar

from agentrag_verl.judges.client import Verdict
from agentrag_verl.judges.parsers import ReferencePlan, SearchP1Evaluation
from agentrag_verl.metrics import cover_exact_match, exact_match

__all__ = [
    "HipragErrorPolicy",
    "CorrectnessFallback",
    "ProcessScoreFallback",
    "OUTCOME_ONLY_EVALUATION",
    "hiprag_step_optimal",
    "multistage_is_correct",
    "reasonrag_node_value",
    "searchp1_evaluation_or_fallback",
    "searchp1_plan_or_none",
]

E = TypeVar("E", bound=enum.Enum)


def _choose(enum_cls: type[E], value: Any, key: str) -> E:
    if isinstance(value, enum_cls):
        return value
    try:
        return enum_cls(value)
    except ValueError:
        choices = [m.value for m in enum_cls]
        raise ValueError(f"Unknown judge error policy {value!r}; choose one of {choices}; set {key}") from None


class HipragErrorPolicy(str, enum.Enum):
    """HiPRAG: how a step whose judge failed enters the process bonus ``Ncorr / N``
    (``docs/methods/hiprag.md#decisions``)."""

    EXCLUDE = "exclude"
    """The step leaves numerator and denominator; if no step is judged the bonus is 0 (our default)."""
    OPTIMAL = "optimal"
    """The step counts as correct (what the authors' code does, since it counts errors as successes)."""
    SUBOPTIMAL = "suboptimal"
    """The step counts as over-/under-search."""


class CorrectnessFallback(str, enum.Enum):
    """Multi-stage paper: what decides correctness when the YES/NO judge fails."""

    EXACT_MATCH = "exact_match"
    """Exact match against the references (normalized as SQuAD / Search-R1 do)."""
    COVER_EXACT_MATCH = "cover_exact_match"
    """Cover exact match (a normalized reference is a substring of the prediction)."""
    INCORRECT = "incorrect"
    """The answer counts as wrong."""


class ProcessScoreFallback(str, enum.Enum):
    """ReasonRAG: the node value when the process evaluation (Figure 14) fails."""

    ROLLOUT = "rollout"
    """Return ``None``: the caller estimates the node by SPRE rollouts (Eq. 1)."""
    ZERO = "zero"
    """Value 0."""


OUTCOME_ONLY_EVALUATION = SearchP1Evaluation(
    planner_score=0.2,
    model_plan_steps=1,
    effective_steps_self=0,
    effective_steps_ref=0,
    outcome_accuracy_score=0.0,
    outcome_reasoning_score=0.0,
)
"""Stands in for a failed Search-P1 evaluation: ``S_self = S_ref = 0`` (Eq. 6/7, zero effective steps) and soft
outcome 0 (Eq. 8), so the trajectory keeps only its exact-match outcome and format reward."""


def hiprag_step_optimal(
    verdict: Verdict[bool],
    detector: Literal["over_search", "under_search"],
    policy: HipragErrorPolicy | str = HipragErrorPolicy.EXCLUDE,
) -> bool | None:
    """Whether a HiPRAG step is optimal (neither over- nor under-search) given its judge verdict.

    Over-search (Figure 5): the judge's True means the conclusion equals the standalone re-answer, so the search
    was redundant: not optimal. Under-search (Figure 6): True means the non-search step is correct: optimal.

    Args:
        verdict: The judge's verdict for the step.
        detector: Which detector judged it.
        policy: The error policy for a failed verdict.

    Returns:
        True (optimal), False (over-/under-search) or ``None`` (failed and excluded).

    Raises:
        ValueError: Unknown ``detector`` or ``policy``.

    >>> hiprag_step_optimal(Verdict(True, "<answer>True</answer>", True), "over_search")
    False
    >>> print(hiprag_step_optimal(Verdict(None, None, False, "timeout"), "under_search", "exclude"))
    None
    """
    policy = _choose(HipragErrorPolicy, policy, "reward.reward_kwargs.judge_error_policy")
    if detector not in ("over_search", "under_search"):
        raise ValueError(f"Unknown HiPRAG detector {detector!r}; choose one of ['over_search', 'under_search']")
    if verdict.ok:
        return not verdict.value if detector == "over_search" else bool(verdict.value)
    if policy is HipragErrorPolicy.EXCLUDE:
        return None
    return policy is HipragErrorPolicy.OPTIMAL


def multistage_is_correct(
    verdict: Verdict[bool],
    prediction: str | None,
    references: str | Iterable[str],
    fallback: CorrectnessFallback | str = CorrectnessFallback.EXACT_MATCH,
) -> bool:
    """Answer correctness for the multi-stage reward: the judge's YES/NO, or the fallback when it failed.

    Args:
        verdict: The judge's verdict.
        prediction: The extracted answer (``None``: no answer, never correct).
        references: The gold answers.
        fallback: What decides when the verdict failed.

    Returns:
        Whether the answer counts as correct.

    >>> multistage_is_correct(Verdict(None, None, False, "timeout"), "Paris", ["paris"])
    True
    """
    fallback = _choose(CorrectnessFallback, fallback, "reward.reward_kwargs.judge_fallback")
    if prediction is None:
        return False
    if verdict.ok:
        return bool(verdict.value)
    if fallback is CorrectnessFallback.EXACT_MATCH:
        return exact_match(prediction, references) == 1.0
    if fallback is CorrectnessFallback.COVER_EXACT_MATCH:
        return cover_exact_match(prediction, references) == 1.0
    return False


def reasonrag_node_value(
    verdict: Verdict[float], fallback: ProcessScoreFallback | str = ProcessScoreFallback.ROLLOUT
) -> float | None:
    """A ReasonRAG node value from the process evaluation (Eq. 6), or the fallback when it failed.

    Returns:
        The score in [0, 1]; ``None`` when the caller should estimate the node by rollouts (Eq. 1).

    >>> print(reasonrag_node_value(Verdict(None, "no score", False, "parse_error")))
    None
    """
    fallback = _choose(ProcessScoreFallback, fallback, "mcts.process_eval_fallback")
    if verdict.ok:
        return float(verdict.value)  # type: ignore[arg-type]
    return None if fallback is ProcessScoreFallback.ROLLOUT else 0.0


def searchp1_evaluation_or_fallback(verdict: Verdict[SearchP1Evaluation]) -> SearchP1Evaluation:
    """The Search-P1 score sheet, or :data:`OUTCOME_ONLY_EVALUATION` when the evaluator failed."""
    return verdict.value if verdict.ok and verdict.value is not None else OUTCOME_ONLY_EVALUATION


def searchp1_plan_or_none(verdict: Verdict[ReferencePlan]) -> ReferencePlan | None:
    """The reference plan, or ``None`` (no reference: Track B of Eq. 7 is off for the question) on failure."""
    return verdict.value if verdict.ok else None
