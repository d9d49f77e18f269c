"""Reward parts and their composition: the machinery under every agentrag reward manager (no verl import).

A **part** computes one piece of a reward from one trajectory record (:class:`~agentrag_verl.rewards.record.Sample`:
response text, gold answers, question, the agent loop's ``extra_fields``) and returns a :class:`PartResult`: a value,
the ``reward_extra_info`` entries it logs (every key it may log is declared in :attr:`Part.keys`), optionally a
per-step placement ``[(token_index, reward), ...]`` whose rewards sum to the value, and intermediate data for other
parts. Parts hold the parts they depend on as attributes; a :class:`RewardContext` computes each part at most once
per record (so the answer metric, the parse and the judge calls are shared), and only when some part asks for it
(HiPRAG's judges run only when the process bonus is gated open).

A :class:`Reward` is a composition: the reward is the sum of its ``terms`` (each term a part; paper totals such as
Search-P1 Eq. 4 are parts themselves), ``acc`` names the main metric, and ``report`` lists parts whose info is always
logged. Its :meth:`Reward.keys` are fixed at build time, so every sample returns the same ``reward_extra_info``
keys (verl stacks them into columns). Build-time checks: a key declared by two different parts is an error (share
one part instance instead), except the counters in :data:`SUMMED_KEYS`, which add up.

The paper formulas live in the pure modules (:mod:`agentrag_verl.methods.hiprag.reward`, ...); parts only read the
record,
call those functions and pack results. :mod:`agentrag_verl.rewards.managers.composed` turns a :class:`Reward` into
a verl reward manager.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrag_verl.formats import Format, Trajectory, get_format

__all__ = [
    "Part",
    "PartResult",
    "RewardContext",
    "Reward",
    "ScoredRecord",
    "Scaled",
    "SUMMED_KEYS",
    "resolve_format",
    "JudgeProvider",
]

SUMMED_KEYS: frozenset[str] = frozenset({"judge_requests", "judge_failures"})
"""Info keys several parts may emit; their values add up (every judged part counts its own calls)."""

JudgeProvider = Callable[[str, Mapping[str, Any] | None], Awaitable[Any]]
"""``await judge(name, judge_config) -> JudgeClient``: the reward manager's lazily built, start-up-checked clients."""


def resolve_format(fmt: str | Format) -> Format:
    """A :class:`~agentrag_verl.formats.Format` from its registry name or the object itself.

    >>> resolve_format("autosearch").name, resolve_format(resolve_format("hiprag")).name
    ('autosearch', 'hiprag')
    """
    return fmt if isinstance(fmt, Format) else get_format(fmt)


@dataclass
class PartResult:
    """What a part returns for one record.

    Attributes:
        value: The part's contribution when used as a term of a :class:`Reward` (sum of ``steps`` if given).
        info: ``reward_extra_info`` entries (keys among the part's :attr:`Part.keys`; missing keys log 0).
        steps: Per-step placement ``[(response token index, reward), ...]`` (index -1 = last model token), or
            ``None`` for a scalar part (its value then sits on the last token).
        data: Intermediate values for the parts that depend on this one (never logged).
    """

    value: float = 0.0
    info: dict[str, float] = field(default_factory=dict)
    steps: list[tuple[int, float]] | None = None
    data: Any = None


class Part:
    """Base of the reward parts. Subclasses set :attr:`keys` and implement :meth:`compute`.

    Parts are plain objects configured in ``__init__``; the parts a part reads are its attributes (found by
    :meth:`dependencies`), so a composition is a graph of shared instances. Compare by identity: two equal parts are
    two computations (and two key declarations, which :class:`Reward` rejects unless the keys are summed).
    """

    keys: tuple[str, ...] = ()
    """Every ``reward_extra_info`` key :meth:`compute` may emit."""

    async def compute(self, ctx: RewardContext) -> PartResult:
        """The part's result for ``ctx.record``; ask for dependencies with ``await ctx.get(part)``."""
        raise NotImplementedError

    def dependencies(self) -> list[Part]:
        """The parts this part may read (its attributes that are parts, or lists/tuples of parts)."""
        out: list[Part] = []
        for value in vars(self).values():
            if isinstance(value, Part):
                out.append(value)
            elif isinstance(value, (list, tuple)):
                out.extend(v for v in value if isinstance(v, Part))
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Scaled(Part):
    """``weight × part``: a term with a weight (its steps scaled too; the wrapped part's info is logged as is).

    >>> import asyncio
    >>> from agentrag_verl.rewards.record import Sample
    >>> from agentrag_verl.rewards.parts import AnswerMetrics
    >>> ctx = RewardContext(Sample(response="<answer>Paris</answer>", golds=["Paris"]))
    >>> asyncio.run(ctx.get(Scaled(AnswerMetrics("searchr1", metric="em"), 0.5))).value
    0.5
    """

    def __init__(self, part: Part, weight: float) -> None:
        self.part = part
        self.weight = float(weight)

    async def compute(self, ctx: RewardContext) -> PartResult:
        r = await ctx.get(self.part)
        steps = None if r.steps is None else [(i, self.weight * v) for i, v in r.steps]
        return PartResult(value=self.weight * r.value, steps=steps, data=r.data)

    def __repr__(self) -> str:
        return f"Scaled({self.part!r}, {self.weight})"


class RewardContext:
    """One record being scored: memoized part results, parsed trajectories and the judge provider.

    Args:
        record: The trajectory record (:class:`~agentrag_verl.rewards.record.Sample` or any object with its
            attributes).
        judge: The reward manager's judge provider (``await judge(name, config) -> JudgeClient``); parts that call
            judges fail with a clear error without one.
    """

    def __init__(self, record: Any, judge: JudgeProvider | None = None) -> None:
        self.record = record
        self._judge = judge
        self._tasks: dict[int, asyncio.Future] = {}
        self._order: list[Part] = []
        self._parsed: dict[str, Trajectory] = {}

    async def get(self, part: Part) -> PartResult:
        """The part's result for this record, computed once (concurrent callers share the computation)."""
        key = id(part)
        task = self._tasks.get(key)
        if task is None:
            task = asyncio.ensure_future(part.compute(self))
            self._tasks[key] = task
            self._order.append(part)
        return await task

    def trajectory(self, fmt: str | Format) -> Trajectory:
        """``fmt.parse(record.response)``, parsed once per format."""
        f = resolve_format(fmt)
        if f.name not in self._parsed:
            self._parsed[f.name] = f.parse(self.record.response)
        return self._parsed[f.name]

    async def judge(self, name: str, config: Mapping[str, Any] | None) -> Any:
        """The judge client ``name`` of the reward manager (see :class:`JudgeProvider`)."""
        if self._judge is None:
            raise RuntimeError(
                f"Reward part needs the judge {name!r} but no judge provider was given; score it through a reward "
                "manager (agentrag_verl.rewards.managers.composed.ComposedRewardManager) or pass "
                "RewardContext(record, judge=...)"
            )
        return await self._judge(name, config)

    def computed(self) -> Iterator[tuple[Part, PartResult]]:
        """The parts computed so far with their results, in the order they were first requested."""
        for part in self._order:
            task = self._tasks[id(part)]
            if task.done() and not task.cancelled() and task.exception() is None:
                yield part, task.result()


@dataclass
class ScoredRecord:
    """A :class:`Reward` applied to one record.

    Attributes:
        score: The reward (sum of the terms' values).
        info: Every computed part's info merged (summed keys added), plus ``acc``.
        placements: Per-step ``[(token_index, reward), ...]`` of every term (scalar terms at -1), or ``None`` when
            the reward is not per-step. The rewards sum to ``score``.
    """

    score: float
    info: dict[str, float]
    placements: list[tuple[int, float]] | None = None


def _walk(parts: Sequence[Part]) -> list[Part]:
    seen: dict[int, Part] = {}
    stack = list(reversed(parts))
    while stack:
        p = stack.pop()
        if id(p) in seen:
            continue
        seen[id(p)] = p
        stack.extend(reversed(p.dependencies()))
    return list(seen.values())


@dataclass
class Reward:
    """A reward composed of parts: ``score = Σ term values``.

    Attributes:
        terms: Parts whose values add up to the reward (wrap one in :class:`Scaled` for a weight).
        acc: The main metric logged as ``acc``: an info key (e.g. ``"cem"``), a part (its value), or ``None``: the
            ``em`` key when a part declares it, else 0.
        report: Parts computed for every record only for their info (e.g. the answer metrics).
        per_step: Return the per-step placement (for
            :class:`~agentrag_verl.rewards.managers.step_rewards.StepRewardAgentLoopManager`).

    Raises:
        ValueError: Two different parts declare the same info key (outside :data:`SUMMED_KEYS`), or ``acc`` names
            a key no part declares.
    """

    terms: Sequence[Part]
    acc: str | Part | None = None
    report: Sequence[Part] = ()
    per_step: bool = False

    def __post_init__(self) -> None:
        if not self.terms:
            raise ValueError("A Reward needs at least one term (a Part whose value is added to the reward)")
        for p in [*self.terms, *self.report, *([self.acc] if isinstance(self.acc, Part) else [])]:
            if not isinstance(p, Part):
                raise TypeError(f"Reward terms/report/acc must be Part instances, got {p!r} ({type(p).__name__})")
        owners: dict[str, Part] = {}
        for part in self.parts():
            for key in part.keys:
                other = owners.setdefault(key, part)
                if other is not part and key not in SUMMED_KEYS:
                    raise ValueError(
                        f"reward_extra_info key {key!r} is emitted by both {other!r} and {part!r}; share one part "
                        "instance between the terms that need it, or keep only one of the two parts"
                    )
        if self.acc is None and "em" in owners:
            self.acc = "em"
        if isinstance(self.acc, str) and self.acc not in owners:
            raise ValueError(
                f"acc={self.acc!r} names no key of this reward's parts; choose one of {sorted(owners)} or pass a part"
            )

    def parts(self) -> list[Part]:
        """Every part of the composition (terms, report, acc and their dependencies), each once."""
        roots = [*self.terms, *self.report, *([self.acc] if isinstance(self.acc, Part) else [])]
        return _walk(roots)

    def keys(self) -> tuple[str, ...]:
        """``acc`` then every declared info key, in part order (the manager's ``reward_extra_info`` keys)."""
        out = {"acc": None}
        for part in self.parts():
            out.update(dict.fromkeys(part.keys))
        return tuple(out)

    async def score(self, record: Any, judge: JudgeProvider | None = None) -> ScoredRecord:
        """Score one record: compute the terms (then ``acc`` and ``report``), sum, merge info."""
        ctx = RewardContext(record, judge)
        results = [await ctx.get(t) for t in self.terms]
        score = 0.0
        for r in results:
            score += r.value
        for p in self.report:
            await ctx.get(p)
        acc = (await ctx.get(self.acc)).value if isinstance(self.acc, Part) else None
        info: dict[str, float] = {}
        for _, r in ctx.computed():
            for key, value in r.info.items():
                info[key] = info.get(key, 0.0) + value if key in SUMMED_KEYS else value
        info["acc"] = float(acc if acc is not None else info.get(str(self.acc), 0.0) if self.acc else 0.0)
        placements = None
        if self.per_step:
            placements = []
            for r in results:
                placements.extend(r.steps if r.steps is not None else [(-1, r.value)])
        return ScoredRecord(score=score, info=info, placements=placements)


def finite(value: Any) -> float:
    """``float(value)``, with non-numbers and non-finite values as 0.0.

    >>> finite(True), finite("x"), finite(float("nan"))
    (1.0, 0.0, 0.0)
    """
    try:
        v = float(value)
    except (TypeError, ValueError):
        return 0.0
    return v if math.isfinite(v) else 0.0
