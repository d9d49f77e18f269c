"""Shared plumbing of the agentrag reward managers: config access, lazy judge clients, the fixed info keys.

verl's reward loop builds a manager as ``cls(config=<full trainer config>, tokenizer=..., compute_score=...,
reward_router_address=..., reward_model_tokenizer=...)`` (``verl.trainer.ppo.reward.load_reward_manager``) and
calls ``await run_single(one_sample_dataproto)`` concurrently for every sample of a batch. Options come from
``reward.reward_kwargs`` (as verl's DAPO manager reads them) and from extra constructor kwargs.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Mapping
from typing import Any, ClassVar

from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

from agentrag_verl.options import check_literals, from_mapping, plain_mapping
from agentrag_verl.rewards.managers.sample import Sample, read_sample

logger = logging.getLogger(__name__)

__all__ = [
    "AgentRagRewardManager",
    "reward_kwargs",
    "COMMON_KEYS",
    "JudgeStartupError",
    "options_from_config",
    "validate_options",
]

COMMON_KEYS: tuple[str, ...] = (
    "score",
    "acc",
    "em",
    "cem",
    "f1",
    "n_search",
    "format_ok",
    "has_agent_fields",
    "reward_error",
    "judge_requests",
    "judge_failures",
)
"""``reward_extra_info`` keys every manager returns for every sample (``acc`` = the paper's main metric)."""


class JudgeStartupError(RuntimeError):
    """The judge endpoint failed its start-up check (bad URL, key or model): a config error, raised, not scored."""


def reward_kwargs(config: Any) -> dict[str, Any]:
    """``config.reward.reward_kwargs`` as a plain dict (``{}`` when absent)."""
    try:
        reward = config.get("reward") if hasattr(config, "get") else None
        return plain_mapping(reward.get("reward_kwargs") if reward is not None else None, what="reward option")
    except Exception:  # pragma: no cover - defensive: odd config objects
        return {}


class AgentRagRewardManager(RewardManagerBase):
    """Base of the paper managers: unpack, score with pure functions, return fixed keys; never raises on a sample.

    Subclasses set :attr:`options_cls` (a dataclass with ``from_config``) and :attr:`extra_keys`, and implement
    :meth:`score`.
    """

    options_cls: ClassVar[Any]
    extra_keys: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        config: Any,
        tokenizer: Any,
        compute_score: Any = None,
        reward_router_address: str | None = None,
        reward_model_tokenizer: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(config, tokenizer, compute_score)
        options = reward_kwargs(config)
        options.update(kwargs)
        self.options = self.options_cls.from_config(options)
        self._judges: dict[str, Any] = {}
        self._judge_ready: dict[str, asyncio.Future] = {}

    @property
    def keys(self) -> tuple[str, ...]:
        """All ``reward_extra_info`` keys of this manager, in order."""
        return COMMON_KEYS + self.extra_keys

    async def judge(self, name: str, judge_config: Mapping[str, Any] | None) -> Any:
        """The manager's judge client ``name``, created lazily in the running loop and checked once.

        Raises:
            JudgeStartupError: The endpoint failed :meth:`JudgeClient.check`; the message names the config key.
        """
        from agentrag_verl.judges import JudgeClient

        if name not in self._judges:
            try:
                self._judges[name] = JudgeClient.from_config(dict(judge_config or {}))
            except Exception as exc:
                raise JudgeStartupError(
                    f"{type(self).__name__}: cannot build judge {name!r}: {exc}. "
                    f"Set reward.reward_kwargs.{name} (base_url, model, api_key_env)."
                ) from exc
            self._judge_ready[name] = asyncio.ensure_future(self._check(name))
        await asyncio.shield(self._judge_ready[name])
        return self._judges[name]

    async def _check(self, name: str) -> None:
        client = self._judges[name]
        try:
            await client.check()
        except Exception as exc:
            raise JudgeStartupError(
                f"{type(self).__name__}: judge {name!r} at {client.config.base_url} (model {client.config.model}) "
                f"failed its start-up check: {exc}. Fix reward.reward_kwargs.{name} (base_url, model, api_key_env)."
            ) from exc

    async def aclose(self) -> None:
        """Close the judge clients' HTTP sessions (their metrics stay readable). A verl worker keeps its manager for
        the whole run; code that builds managers for a while (the evaluation) closes them when it is done."""
        for client in self._judges.values():
            await client.aclose()

    def judge_metrics(self) -> dict[str, float]:
        """Cumulative metrics of every judge client, namespaced ``judge/<name>/...``."""
        out: dict[str, float] = {}
        for name, client in self._judges.items():
            out.update(client.metrics(prefix=f"judge/{name}/"))
        return out

    async def score(self, sample: Sample) -> dict[str, float]:
        """Paper-specific scoring; returns a subset of :attr:`keys` (missing keys become 0)."""
        raise NotImplementedError

    def finalize(self, info: Mapping[str, Any]) -> dict[str, float]:
        """Exactly :attr:`keys`, as finite floats."""
        out = {}
        for key in self.keys:
            try:
                value = float(info.get(key, 0.0))
            except (TypeError, ValueError):
                value = 0.0
            out[key] = value if math.isfinite(value) else 0.0
        return out

    async def run_single(self, data: Any) -> dict[str, Any]:
        """verl's entry point: ``{"reward_score": float, "reward_extra_info": {key: float}}``."""
        sample = read_sample(data, self.tokenizer)
        try:
            info = dict(await self.score(sample))
        except JudgeStartupError:
            raise
        except Exception:  # a malformed sample must not kill training; counted in reward_error
            logger.exception("%s failed on a sample; scoring it 0", type(self).__name__)
            info = {"reward_error": 1.0}
        extra = {k: v for k, v in info.items() if k.startswith("_")}
        result = self.finalize(info)
        result.update(extra)
        return {"reward_score": result["score"], "reward_extra_info": result}


REWARD_KWARGS = "reward.reward_kwargs"
"""Where the managers' options live in verl's config (and the key path the error messages name)."""

JUDGE_FIELDS = ("judge", "over_search_judge", "under_search_judge")
"""Option fields holding a :class:`~agentrag_verl.judges.JudgeConfig` mapping, checked when the manager is built."""


def options_from_config(cls: type, config: Mapping[str, Any] | Any | None, ignore: tuple[str, ...] = ()) -> Any:
    """Build an options dataclass from ``reward.reward_kwargs``; invalid options fail here, when the manager is built.

    Checks (:func:`agentrag_verl.options.from_mapping`): unknown keys (the message lists the valid ones), every
    ``Literal[...]`` field against its choices, and every judge mapping (:data:`JUDGE_FIELDS`) against
    :class:`~agentrag_verl.judges.JudgeConfig`; each message names the config key (``reward.reward_kwargs.<name>``).
    Keys in ``ignore`` (verl's own reward kwargs such as ``overlong_buffer_cfg``) are skipped.

    Raises:
        ValueError: An unknown key or an invalid value.
    """
    known_foreign = {"overlong_buffer_cfg", "max_resp_len", *ignore}
    options = from_mapping(cls, config, what="reward option", where=REWARD_KWARGS, ignore=known_foreign)
    _check_judges(options, REWARD_KWARGS)
    return options


def validate_options(options: Any, prefix: str = REWARD_KWARGS) -> None:
    """Check an options dataclass: ``Literal`` fields hold one of their choices, judge mappings are valid configs.

    >>> from dataclasses import dataclass
    >>> from typing import Literal
    >>> @dataclass
    ... class O:
    ...     policy: Literal["exclude", "optimal"] = "exclude"
    >>> validate_options(O("exclud"))
    Traceback (most recent call last):
    ValueError: Invalid reward option reward.reward_kwargs.policy='exclud': choose one of ['exclude', 'optimal']
    """
    check_literals(options, what="reward option", where=prefix)
    _check_judges(options, prefix)


def _check_judges(options: Any, prefix: str) -> None:
    for name in JUDGE_FIELDS:
        value = getattr(options, name, None)
        if value:
            from agentrag_verl.judges import JudgeConfig

            try:
                JudgeConfig.from_config(value)
            except ValueError as exc:
                raise ValueError(f"Invalid judge config {prefix}.{name}: {exc}") from None
