"""AutoSearch parts (AutoSearch §4, Eq. 1-9; decisions in ``docs/methods/autosearch.md#decisions``): the per-step
view of a trajectory (retrieval steps, their intermediate answers, t_c, the step-end token positions) and the per-step
rewards: step format (Eq. 1), outcome (Eq. 2), efficiency (Eq. 7), quality (Eq. 9), and their sum ``r_t``
(:func:`agentrag_verl.methods.autosearch.reward.step_rewards`).

Every per-step part returns ``steps = [(token_index, r_t), ...]``: retrieval steps at their step-end tokens (the
agent loop's ``agentrag_steps[*].end_token_index``), the answer step at the final step's end (-1 = the last response
token). Retrieval steps, their intermediate answers and their end tokens are indexed by
:mod:`agentrag_verl.agent_loops.steps`, the one step index the agent loop, the rewards and the evaluation share: every
turn that received an observation is a retrieval step t, an empty or malformed query included (Eq. 1 scores it
invalid). Without the agent loop's fields every reward goes to the last token (``as_fallback_placement``); when the
fields exist but do not match the response's turns, the fallback is logged as well as counted.

Formats: on the Search-R1 grammar (AutoSearch's own) a retrieval step is one ``<information>`` turn and Eq. 1
validity comes from :func:`agentrag_verl.methods.autosearch.grammar.step_validity`; on any other grammar (e.g. HiPRAG,
with ``intermediate_answers: true`` in its agent loop) the retrieval steps are the parsed search steps, and Eq. 1
is not defined (:class:`AutoSearchStepFormat` refuses it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentrag_verl.agent_loops.steps import intermediate_answers, retrieval_step_count, step_positions
from agentrag_verl.formats import Format, Trajectory
from agentrag_verl.methods.autosearch import reward as fn
from agentrag_verl.metrics import exact_match, f1_score
from agentrag_verl.rewards.parts.core import Part, PartResult, RewardContext, resolve_format

logger = logging.getLogger(__name__)

STEP_VALIDITY_FORMATS = ("autosearch", "searchr1")
"""Grammars on which Eq. 1's per-step validity is defined: AutoSearch's, and Search-R1's whose tags it shares."""

__all__ = [
    "AutoSearchSteps",
    "AutoSearchStepFormat",
    "AutoSearchEfficiency",
    "AutoSearchQuality",
    "AutoSearchOutcome",
    "AutoSearchStepRewards",
    "over_search_penalty",
    "StepView",
    "step_view",
    "intermediate_answers",
    "step_positions",
]


@dataclass(frozen=True)
class StepView:
    """:class:`AutoSearchSteps` data: one trajectory seen as retrieval steps 1..T-1 and the answer step T."""

    n_retrieval: int
    """T - 1."""
    step_valid: list[bool] | None
    """Eq. 1 validity of each retrieval step (Search-R1 grammar only, else ``None``)."""
    final_valid: bool | None
    """Eq. 1 validity of the answer step (Search-R1 grammar only)."""
    intermediate_em: list[float]
    """EM of each retrieval step's intermediate answer (0 when missing)."""
    intermediate_f1: list[float]
    """F1 of each retrieval step's intermediate answer."""
    t_c: int
    """Eq. 6: first retrieval step with an exact-match intermediate answer, -1 if none."""
    positions: list[int]
    """Token index of each retrieval step's end, then the answer step's (-1 = last token)."""
    missing_intermediate: int = 0
    """Retrieval steps without an intermediate answer."""
    fallback_placement: bool = False
    """Some positions fell back to the last token (the step records do not match the response's turns)."""

    @property
    def over_search(self) -> bool:
        """t_c precedes the last retrieval step: the answer was right before the final search (AutoSearch §5.1 OSR).

        >>> StepView(3, None, None, [0.0, 1.0, 1.0], [0.0, 1.0, 1.0], 2, [-1] * 4).over_search
        True
        """
        return 0 < self.t_c < self.n_retrieval

    def place(self, rewards: list[float]) -> list[tuple[int, float]]:
        """``[(position, reward), ...]`` for ``T`` rewards, or ``T - 1`` retrieval-step rewards.

        >>> view = StepView(1, [True], True, [1.0], [1.0], 1, [4, 9])  # one retrieval step ending at token 4
        >>> view.place([0.35, 1.1]), view.place([0.35])
        ([(4, 0.35), (9, 1.1)], [(4, 0.35)])
        """
        return list(zip(self.positions[: len(rewards)], rewards, strict=True))


def step_view(
    format: str | Format,
    response: str,
    golds: Sequence[str],
    extra_fields: Mapping[str, Any] | None,
    *,
    repeat_threshold: float = 0.8,
    require_think: bool = True,
    trajectory: Trajectory | None = None,
) -> StepView:
    """One trajectory as AutoSearch's steps (:class:`StepView`): the retrieval steps, their intermediate answers'
    EM / F1, t_c (Eq. 6) and the step-end positions. What :class:`AutoSearchSteps` scores, and what the evaluation's
    t_c and OSR report.

    On the Search-R1 grammar the retrieval steps are the response's ``<information>`` turns with their Eq. 1
    validity (:func:`agentrag_verl.methods.autosearch.grammar.step_validity`); on any other grammar they are the
    parsed search steps. Intermediate answers and positions are mapped to them by
    :mod:`agentrag_verl.agent_loops.steps`.

    Args:
        format: The grammar (name or object).
        response: The decoded response.
        golds: The gold answers.
        extra_fields: The agent loop's ``extra_fields`` (``{}`` for a bare response).
        repeat_threshold: TF-IDF cosine above which a query repeats an earlier one (Eq. 1 invalid step).
        require_think: A retrieval step must open with ``<think>`` (Search-R1 grammar).
        trajectory: ``format``'s parse of ``response``, if already done (other grammars).

    >>> fields = {"agentrag_intermediate_answers": [{"step": 0, "answer": "Paris"}]}
    >>> view = step_view("autosearch", "<think>a</think><search>q</search><information>d</information>"
    ...                  "<think>b</think><answer>Paris</answer>", ["Paris"], fields)
    >>> view.n_retrieval, view.intermediate_em, view.t_c, view.over_search
    (1, [1.0], 1, False)
    """
    from agentrag_verl.methods.autosearch.grammar import step_validity

    fmt = resolve_format(format)
    step_valid: list[bool] | None = None
    final_valid: bool | None = None
    if fmt.name in STEP_VALIDITY_FORMATS:
        validity = step_validity(response, repeat_threshold=repeat_threshold, require_think=require_think)
        step_valid, final_valid = validity[:-1], validity[-1]
        n = len(step_valid)
    else:
        n = (trajectory if trajectory is not None else fmt.parse(response)).num_searches
    answers, missing = intermediate_answers(extra_fields, n)
    inter_em = [exact_match(a, golds) for a in answers]
    inter_f1 = [f1_score(a, golds) for a in answers]
    positions, fallback = step_positions(extra_fields, n)
    t_c = fn.optimal_depth(inter_em)
    return StepView(n, step_valid, final_valid, inter_em, inter_f1, t_c, positions, missing, fallback)


class AutoSearchSteps(Part):
    """The per-step view (:class:`StepView`); value = t_c. Logs ``as_t_c``, ``as_steps`` (T),
    ``as_over_search`` (t_c before the last retrieval step), ``as_missing_intermediate``, ``as_fallback_placement``.

    Args:
        format: ``autosearch`` (Eq. 1 validity available; also on ``searchr1``) or any grammar with search steps.
        repeat_threshold: TF-IDF cosine above which a query repeats an earlier one (Eq. 1 invalid step).
        require_think: A retrieval step must open with ``<think>`` (Search-R1 grammar).
    """

    keys = ("as_t_c", "as_steps", "as_over_search", "as_missing_intermediate", "as_fallback_placement")

    def __init__(self, format: str | Format = "autosearch", repeat_threshold: float = 0.8, require_think: bool = True):
        self.format = resolve_format(format)
        self.repeat_threshold = float(repeat_threshold)
        self.require_think = require_think

    @property
    def has_step_validity(self) -> bool:
        """Whether Eq. 1 validity is defined for this grammar (the Search-R1 one)."""
        return self.format.name in STEP_VALIDITY_FORMATS

    async def compute(self, ctx: RewardContext) -> PartResult:
        record = ctx.record
        view = step_view(
            self.format,
            record.response,
            record.golds,
            record.extra_fields,
            repeat_threshold=self.repeat_threshold,
            require_think=self.require_think,
            trajectory=None if self.has_step_validity else ctx.trajectory(self.format),
        )
        n = view.n_retrieval
        if view.fallback_placement and record.has_agent_fields:
            logger.warning(
                "AutoSearch: the agent loop recorded %s retrieval steps but the response has %d; the rewards of "
                "unmatched steps go to the last token (counted in as_fallback_placement)",
                retrieval_step_count(record.extra_fields),
                n,
            )
        info = {
            "as_t_c": float(view.t_c),
            "as_steps": float(n + 1),
            "as_over_search": float(view.over_search),
            "as_missing_intermediate": float(view.missing_intermediate),
            "as_fallback_placement": float(view.fallback_placement),
        }
        return PartResult(value=float(view.t_c), info=info, data=view)


class AutoSearchStepFormat(Part):
    """Eq. 1 step format reward per step (retrieval steps, then the answer step); logs ``format_ok`` (every step
    valid) and ``n_search`` (retrieval steps = ``<information>`` turns). Search-R1 grammar only."""

    keys = ("format_ok", "n_search")

    def __init__(self, steps: AutoSearchSteps, config: fn.AutoSearchRewardConfig | None = None) -> None:
        if not steps.has_step_validity:
            raise ValueError(
                f"AutoSearch's step format reward (Eq. 1) is defined on the Search-R1 grammar only, not "
                f"{steps.format.name!r}; use FormatCheck for other grammars"
            )
        self.steps = steps
        self.config = config or fn.AutoSearchRewardConfig()

    async def compute(self, ctx: RewardContext) -> PartResult:
        view: StepView = (await ctx.get(self.steps)).data
        rewards = fn.format_rewards(view.step_valid or [], bool(view.final_valid), self.config)
        info = {
            "format_ok": float(all([*(view.step_valid or []), bool(view.final_valid)])),
            "n_search": float(view.n_retrieval),
        }
        return PartResult(value=sum(rewards), info=info, steps=view.place(rewards))


class AutoSearchEfficiency(Part):
    """Eq. 7 efficiency reward on the retrieval steps: t_c = -1: ``under_search`` each; t ≤ t_c:
    ``effective_scale/(t_c+ε) - effective_offset``; t > t_c: ``over_search`` (the over-search penalty).

    For the over-search penalty alone, set ``under_search``, ``effective_scale`` and ``effective_offset`` to 0 in
    ``config``: every retrieval step after the first correct intermediate answer then costs ``over_search``.
    """

    def __init__(self, steps: AutoSearchSteps, config: fn.AutoSearchRewardConfig | None = None) -> None:
        self.steps = steps
        self.config = config or fn.AutoSearchRewardConfig()

    async def compute(self, ctx: RewardContext) -> PartResult:
        view: StepView = (await ctx.get(self.steps)).data
        rewards = fn.efficiency_rewards(view.n_retrieval, view.t_c, self.config)
        return PartResult(value=sum(rewards), steps=view.place(rewards))


class AutoSearchQuality(Part):
    """Eq. 9 quality reward on the retrieval steps: the F1 gain of each intermediate answer over the best earlier."""

    def __init__(self, steps: AutoSearchSteps, config: fn.AutoSearchRewardConfig | None = None) -> None:
        self.steps = steps
        self.config = config or fn.AutoSearchRewardConfig()

    async def compute(self, ctx: RewardContext) -> PartResult:
        view: StepView = (await ctx.get(self.steps)).data
        rewards = fn.quality_rewards(view.intermediate_f1, self.config)
        return PartResult(value=sum(rewards), steps=view.place(rewards))


class AutoSearchOutcome(Part):
    """Eq. 2 outcome at the answer step T (its step-end token): the ``correct`` part's value as 1.0 / 0.0."""

    def __init__(self, steps: AutoSearchSteps, correct: Part) -> None:
        self.steps = steps
        self.correct = correct

    async def compute(self, ctx: RewardContext) -> PartResult:
        view: StepView = (await ctx.get(self.steps)).data
        r = fn.outcome_reward((await ctx.get(self.correct)).value)
        return PartResult(value=r, steps=[(view.positions[-1], r)])


class AutoSearchStepRewards(Part):
    """AutoSearch's full per-step reward ``r_t = base + efficiency + quality`` (+ outcome at T), with the ablation
    switches of :class:`~agentrag_verl.methods.autosearch.reward.AutoSearchRewardConfig`; logs ``as_retrieval_reward``
    (Σ over retrieval steps) and ``as_answer_reward`` (r_T). Search-R1 grammar (Eq. 1 needs it).

    Args:
        steps: The :class:`AutoSearchSteps` part.
        correct: The part whose value is the final answer's EM (Eq. 2).
        config: Constants and switches.
    """

    keys = ("as_retrieval_reward", "as_answer_reward")

    def __init__(self, steps: AutoSearchSteps, correct: Part, config: fn.AutoSearchRewardConfig | None = None):
        if not steps.has_step_validity:
            raise ValueError(
                f"AutoSearch's full step reward includes Eq. 1, defined on the Search-R1 grammar only, not "
                f"{steps.format.name!r}; compose AutoSearchEfficiency / AutoSearchQuality / AutoSearchOutcome instead"
            )
        self.steps = steps
        self.correct = correct
        self.config = config or fn.AutoSearchRewardConfig()

    async def compute(self, ctx: RewardContext) -> PartResult:
        view: StepView = (await ctx.get(self.steps)).data
        em = (await ctx.get(self.correct)).value
        rewards = fn.step_rewards(
            view.step_valid or [],
            bool(view.final_valid),
            em,
            view.intermediate_em,
            view.intermediate_f1,
            self.config,
        )
        info = {"as_retrieval_reward": sum(rewards[:-1]), "as_answer_reward": rewards[-1]}
        return PartResult(value=sum(rewards), info=info, steps=view.place(rewards))


def over_search_penalty(penalty: float = -0.1) -> fn.AutoSearchRewardConfig:
    """AutoSearch constants that keep only Eq. 7's over-search term: each retrieval step after the first correct
    intermediate answer (t > t_c) gets ``penalty``; every other retrieval step 0.

    >>> from agentrag_verl.methods.autosearch.reward import efficiency_rewards
    >>> efficiency_rewards(3, 1, over_search_penalty(-0.1)), efficiency_rewards(2, -1, over_search_penalty())
    ([0.0, -0.1, -0.1], [0.0, 0.0])
    """
    return fn.AutoSearchRewardConfig(
        under_search=0.0, effective_scale=0.0, effective_offset=0.0, over_search=float(penalty)
    )
