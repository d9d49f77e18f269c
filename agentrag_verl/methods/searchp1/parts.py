"""Search-P1 parts (``docs/methods/searchp1.md``): the dual-track evaluation (Figure 9 judge against the reference
plan), the path score ``R_path = max(S_self, S_ref)`` (Eq. 6-7), the soft outcome (Eq. 8) and the total of Eq. 4 /
Algorithm 3.

The reference plan of a training question (Algorithm 1, built offline) is looked up by question id
(``extra_info.id`` / ``extra_info.index``) in the planner cache: a JSON object ``{id: {"planner", "reasoning_path"}}``
or a JSONL file of ``{"id", "planner", "reasoning_path"}`` lines (``reasoning_path``: the numbered queries R_ref);
``extra_info.ref_planner`` / ``extra_info.ref_reasoning_path`` in the data take precedence. A question without a
plan keeps Track A only (``|R_ref| = 0`` -> S_ref = 0), counted in ``sp1_missing_plan``. A failed evaluation falls
back to :data:`~agentrag_verl.methods.searchp1.judge.OUTCOME_ONLY_EVALUATION` (path 0, soft outcome 0).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from agentrag_verl.formats import Format
from agentrag_verl.methods.searchp1 import reward as fn
from agentrag_verl.methods.searchp1.judge import evaluation_or_fallback, evaluation_request
from agentrag_verl.rewards.parts.core import Part, PartResult, RewardContext, resolve_format

__all__ = ["SearchP1Evaluator", "SearchP1Path", "SearchP1Outcome", "SearchP1Reward", "load_planner_cache"]


@lru_cache(maxsize=4)
def load_planner_cache(path: str) -> dict[str, dict[str, Any]]:
    """``{question_id: {"planner": str, "reasoning_path": [str]}}`` from a JSON or JSONL cache file.

    Raises:
        FileNotFoundError: The file does not exist (the message names ``reward.reward_kwargs.planner_cache``).
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(
            f"Search-P1 planner cache {path} not found; build it before training (Algorithm 1) or fix "
            "reward.reward_kwargs.planner_cache"
        )
    text = p.read_text(encoding="utf-8")
    out: dict[str, dict[str, Any]] = {}
    stripped = text.lstrip()
    if stripped.startswith("{") and "\n{" not in stripped:
        obj = json.loads(text)
        if isinstance(obj, dict) and "id" not in obj:
            return {str(k): v for k, v in obj.items() if isinstance(v, dict)}
        records = [obj]
    else:
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
    for rec in records:
        qid = rec.get("id", rec.get("question_id"))
        if qid is not None:
            out[str(qid)] = rec
    return out


@dataclass(frozen=True)
class Evaluation:
    """:class:`SearchP1Evaluator` data."""

    evaluation: Any
    """The score sheet (:class:`~agentrag_verl.methods.searchp1.judge.SearchP1Evaluation`, or the outcome-only
    fallback)."""
    n_ref_steps: int
    """``|R_ref|`` (0 without a plan)."""
    n_actions: int
    """Tool calls of the trajectory."""


class SearchP1Evaluator(Part):
    """The Figure 9 evaluator: one judge call per trajectory against its reference plan; value 1.0 if it answered.

    Args:
        format: The Search-P1 grammar (its tool calls are the actions).
        judge: JudgeConfig of the evaluator.
        planner_cache: Path of the reference-planner cache (JSON or JSONL), or ``None``.
    """

    keys = ("sp1_eval_ok", "sp1_missing_plan", "judge_requests", "judge_failures")

    def __init__(
        self,
        format: str | Format = "searchp1",
        judge: Mapping[str, Any] | None = None,
        planner_cache: str | None = None,
    ) -> None:
        self.format = resolve_format(format)
        self.judge = dict(judge or {})
        self.planner_cache = planner_cache

    def plan(self, record: Any) -> tuple[str, list[str]] | None:
        """``(planner text, reference queries)`` of the record's question, or ``None``."""
        rec: Any = None
        if record.extra_info.get("ref_reasoning_path") is not None:
            rec = record.extra_info
        elif not self.planner_cache or record.question_id is None:
            return None
        else:
            rec = load_planner_cache(self.planner_cache).get(record.question_id)
        if rec is None:
            return None
        path = rec.get("reasoning_path", rec.get("ref_reasoning_path", []))
        path = [path] if isinstance(path, str) else [str(q) for q in path]
        return str(rec.get("planner", rec.get("ref_planner", ""))), path

    async def compute(self, ctx: RewardContext) -> PartResult:
        record = ctx.record
        plan = self.plan(record)
        planner, ref_path = plan if plan is not None else ("", [])
        client = await ctx.judge("judge", self.judge)
        request = evaluation_request(record.question, record.golds, planner, ref_path, record.response)
        verdict = await client.judge(request)
        info = {
            "sp1_missing_plan": float(plan is None),
            "sp1_eval_ok": float(verdict.ok),
            "judge_requests": 1.0,
            "judge_failures": float(not verdict.ok),
        }
        n_actions = ctx.trajectory(self.format).num_searches
        data = Evaluation(evaluation_or_fallback(verdict), len(ref_path), n_actions)
        return PartResult(value=float(verdict.ok), info=info, data=data)


class SearchP1Path(Part):
    """``R_path = max(S_self, S_ref)`` (Eq. 6-7; Algorithm 3 with ``efficiency=False``); logs both tracks.

    Args:
        evaluator: The :class:`SearchP1Evaluator` part.
        self_track: Track A on (off: "w/o self-consistency").
        ref_track: Track B on (off: "w/o reference alignment").
        efficiency: Eq. 6/7 efficiency factor ``n/n_actions`` (off: Algorithm 3 l. 15/18).
    """

    keys = ("sp1_path", "sp1_s_self", "sp1_s_ref")

    def __init__(
        self, evaluator: SearchP1Evaluator, self_track: bool = True, ref_track: bool = True, efficiency: bool = True
    ) -> None:
        self.evaluator = evaluator
        self.self_track = self_track
        self.ref_track = ref_track
        self.efficiency = efficiency

    async def compute(self, ctx: RewardContext) -> PartResult:
        ev: Evaluation = (await ctx.get(self.evaluator)).data
        s_self, s_ref = fn.track_scores(ev.evaluation, ev.n_ref_steps, ev.n_actions, efficiency=self.efficiency)
        path = fn.path_reward(
            ev.evaluation,
            ev.n_ref_steps,
            ev.n_actions,
            self_track=self.self_track,
            ref_track=self.ref_track,
            efficiency=self.efficiency,
        )
        return PartResult(value=path, info={"sp1_path": path, "sp1_s_self": s_self, "sp1_s_ref": s_ref})


class SearchP1Outcome(Part):
    """Soft outcome (Eq. 8): 1.0 if ``correct``, else ``α·acc_score + (1-α)·reason_score`` from the evaluator.

    Args:
        correct: The correctness part (Algorithm 3: exact match).
        evaluator: The :class:`SearchP1Evaluator` part.
        alpha: α (0.8).
        soft: Soft scoring on (off: binary outcome).
    """

    keys = ("sp1_outcome",)

    def __init__(self, correct: Part, evaluator: SearchP1Evaluator, alpha: float = 0.8, soft: bool = True) -> None:
        self.correct = correct
        self.evaluator = evaluator
        self.alpha = float(alpha)
        self.soft = soft

    async def compute(self, ctx: RewardContext) -> PartResult:
        correct = bool((await ctx.get(self.correct)).value)
        ev = (await ctx.get(self.evaluator)).data.evaluation
        outcome = fn.outcome_reward(
            correct, ev.outcome_accuracy_score, ev.outcome_reasoning_score, self.alpha, soft=self.soft
        )
        return PartResult(value=outcome, info={"sp1_outcome": outcome})


class SearchP1Reward(Part):
    """Eq. 4 / Algorithm 3: ``λp·R_path + λa·R_outcome + λf·r_f``, and 0 without an evaluator call when the format
    level is INVALID (Alg. 3 l. 7).

    Args:
        format: The :class:`~agentrag_verl.rewards.parts.FormatCheck` part of the Search-P1 grammar (its level).
        path: The :class:`SearchP1Path` part.
        outcome: The :class:`SearchP1Outcome` part.
        lambda_p: λp (0.3). lambda_a: λa (0.6). lambda_f: λf (0.1).
    """

    keys = ("sp1_format_level", "sp1_n_actions")

    def __init__(
        self,
        format: Part,
        path: SearchP1Path,
        outcome: SearchP1Outcome,
        lambda_p: float = 0.3,
        lambda_a: float = 0.6,
        lambda_f: float = 0.1,
    ) -> None:
        self.format = format
        self.path = path
        self.outcome = outcome
        self.lambda_p = float(lambda_p)
        self.lambda_a = float(lambda_a)
        self.lambda_f = float(lambda_f)

    async def compute(self, ctx: RewardContext) -> PartResult:
        level = (await ctx.get(self.format)).value
        n_actions = ctx.trajectory(self.path.evaluator.format).num_searches
        info = {"sp1_format_level": level, "sp1_n_actions": float(n_actions)}
        if level <= 0:
            return PartResult(value=0.0, info=info)
        path = (await ctx.get(self.path)).value
        outcome = (await ctx.get(self.outcome)).value
        total = fn.total_reward(level, path, outcome, self.lambda_p, self.lambda_a, self.lambda_f)
        return PartResult(value=total, info=info)
