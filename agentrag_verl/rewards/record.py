"""The trajectory record the reward parts read: one sample as plain values (no verl import, no reward math).

:class:`Sample` is what a reward part (:mod:`agentrag_verl.rewards.parts`) sees: the decoded response, the gold
answers, the question, and the agent loop's ``extra_fields``. :func:`read_sample` builds it from verl's reward-loop
``DataProto`` (duck-typed: this module imports neither verl nor torch); tests and offline scoring build it directly:

>>> Sample(response="<answer>Paris</answer>", golds=["Paris"]).has_agent_fields
False

Where the inputs live (verl 0.9.1, ``AgentLoopWorker._compute_score``): each :meth:`run_single` call gets a
one-sample ``DataProto`` whose ``batch`` holds ``prompts`` / ``responses`` (unpadded, observation tokens
included; **no** ``response_mask``) and whose ``non_tensor_batch`` holds every dataset column of the sample
(``data_source``, ``reward_model``, ``extra_info``, ``raw_prompt``, ``index``, and on the V1 trainer
``global_steps`` and ``uid``), ``__num_turns__``, and ``tool_extra_fields`` = the agent loop's
``AgentLoopOutput.extra_fields`` (the ``agentrag_*`` keys of :mod:`agentrag_verl.agent_loops.fields`).

The response text is decoded whole; the format parsers treat observation blocks as opaque environment text, so
an answer inside retrieved documents never counts (``docs/decisions.md#answer-metrics``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentrag_verl.agent_loops import fields as F  # the extra_fields contract of our agent loops

__all__ = ["Sample", "read_sample", "gold_answers", "records", "as_int", "F"]


@dataclass
class Sample:
    """What a reward manager needs from one sample.

    Attributes:
        response: Decoded response text (model text and observations).
        golds: Gold answers.
        question: The question text ('' if unknown).
        question_id: Dataset id of the question (``extra_info.id`` / ``extra_info.index`` / ``index``), or None.
        extra_fields: The agent loop's ``extra_fields`` (``{}`` for loops that write none).
        global_step: Training step from verl (V1 trainer's ``global_steps`` column), or None.
        data_source: The dataset name.
        response_length: Number of response tokens.
        extra_info: The dataset's ``extra_info`` column.
    """

    response: str
    golds: list[str]
    question: str = ""
    question_id: str | None = None
    extra_fields: Mapping[str, Any] = field(default_factory=dict)
    global_step: int | None = None
    data_source: str = ""
    response_length: int = 0
    extra_info: Mapping[str, Any] = field(default_factory=dict)

    @property
    def has_agent_fields(self) -> bool:
        """Whether the agentrag agent loop wrote its ``extra_fields`` (else: single-turn / foreign loop)."""
        return F.STEPS in self.extra_fields


def _scalar(value: Any) -> Any:
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return value.item()
    return value


def gold_answers(ground_truth: Any) -> list[str]:
    """Gold answers from ``reward_model.ground_truth`` (``{"target": [...]}``, a list, or a string).

    >>> gold_answers({"target": ["Paris", "paris city"]}), gold_answers("x"), gold_answers(None)
    (['Paris', 'paris city'], ['x'], [])
    """
    gt = _scalar(ground_truth)
    if isinstance(gt, Mapping):
        gt = gt.get("target", gt.get("answers", gt.get("golden_answers")))
    if gt is None:
        return []
    if isinstance(gt, str):
        return [gt]
    try:
        return [str(g) for g in list(gt)]
    except TypeError:
        return [str(gt)]


def _question(non_tensor: Mapping[str, Any], extra_info: Mapping[str, Any]) -> str:
    q = extra_info.get("question")
    if q:
        return str(q)
    raw = non_tensor.get("raw_prompt")
    try:
        users = [m.get("content", "") for m in list(raw) if isinstance(m, Mapping) and m.get("role") == "user"]
        return str(users[-1]) if users else ""
    except TypeError:
        return ""


def read_sample(data: Any, tokenizer: Any) -> Sample:
    """Unpack the last sample of a reward-loop ``DataProto``; tolerant of missing columns (never raises on
    absent fields; a missing ``responses`` tensor is an error of the caller)."""
    item = data[len(data) - 1]
    responses = item.batch["responses"]
    n = int(responses.shape[-1])
    valid = n
    if "attention_mask" in item.batch.keys():
        valid = int(item.batch["attention_mask"][-n:].sum())
    ids = responses[:valid].tolist()
    response = tokenizer.decode(ids, skip_special_tokens=True)
    nt = item.non_tensor_batch
    extra_info = _scalar(nt.get("extra_info")) or {}
    if not isinstance(extra_info, Mapping):
        extra_info = {}
    reward_model = _scalar(nt.get("reward_model")) or {}
    golds = gold_answers(reward_model.get("ground_truth") if isinstance(reward_model, Mapping) else None)
    extra_fields = _scalar(nt.get("tool_extra_fields")) or {}
    if not isinstance(extra_fields, Mapping):
        extra_fields = {}
    qid = extra_info.get("id", extra_info.get("index", _scalar(nt.get("index"))))
    step = _scalar(nt.get("global_steps"))
    try:
        step = int(step) if step is not None else None
    except (TypeError, ValueError):
        step = None
    return Sample(
        response=response,
        golds=golds,
        question=_question(nt, extra_info),
        question_id=None if qid is None else str(qid),
        extra_fields=extra_fields,
        global_step=step,
        data_source=str(_scalar(nt.get("data_source", "")) or ""),
        response_length=valid,
        extra_info=extra_info,
    )


def records(value: Any) -> list[dict[str, Any]]:
    """The dict entries of a list-valued extra field (anything else -> ``[]``).

    >>> records([{"a": 1}, 3, None]), records(7)
    ([{'a': 1}], [])
    """
    value = _scalar(value)
    if isinstance(value, (list, tuple)) or (hasattr(value, "tolist") and not isinstance(value, (str, bytes))):
        items = value.tolist() if hasattr(value, "tolist") else value
        return [r for r in items if isinstance(r, Mapping)] if isinstance(items, list) else []
    return []


def as_int(value: Any, default: int = -1) -> int:
    """``int(value)`` for real integers (bools and others -> ``default``).

    >>> as_int(3), as_int("x"), as_int(True)
    (3, -1, -1)
    """
    value = _scalar(value)
    if isinstance(value, bool) or not isinstance(value, (int,)) and not hasattr(value, "__index__"):
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        return default
