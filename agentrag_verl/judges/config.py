"""Configuration of an LLM judge endpoint (:class:`JudgeConfig`).

The config holds plain values only. The API key itself is never part of it: :attr:`JudgeConfig.api_key_env` names
the environment variable that holds the key, so ``repr(config)``, a dumped Hydra config or a log line can never
leak the secret.

Decisions:

- ``temperature`` defaults to 0: a judge should be deterministic, and the response cache assumes that repeating a
  request would give the same verdict. The papers do not state their judges' sampling parameters.
- ``None`` for a sampling parameter means "do not send it". Reasoning models such as gpt-5-mini (HiPRAG's
  under-search verifier) reject ``temperature`` and ``max_tokens``; configure them with ``temperature=None,
  max_tokens=None, extra_params={"max_completion_tokens": 2048}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentrag_verl.options import from_mapping

__all__ = ["JudgeConfig", "JudgeConfigError"]

_REMOVED_OPTIONS = {
    "http_backend": "judge.http_backend was removed: the judge has one transport since 0.1.0 (aiohttp, the fastest of "
    "the four it offered); delete the key",
}
"""Options of earlier versions: :meth:`JudgeConfig.from_config` names them and says what to do instead."""


class JudgeConfigError(ValueError):
    """A judge option is invalid or the environment lacks what the config names (e.g. the API key variable)."""


@dataclass(frozen=True)
class JudgeConfig:
    """Where a judge lives and how to call it. Build it from Hydra/OmegaConf with :meth:`from_config`.

    Example::

        cfg = JudgeConfig(base_url="http://127.0.0.1:8000/v1", model="Qwen/Qwen2.5-7B-Instruct", api_key_env=None)
    """

    base_url: str = "https://api.openai.com/v1"
    """OpenAI-compatible API root, including the version path (``http://host:8000/v1`` for a vLLM server)."""

    model: str = "gpt-4.1-mini"
    """Model name sent with every request (HiPRAG: gpt-4.1-mini judges over-search, gpt-5-mini under-search)."""

    api_key_env: str | None = "OPENAI_API_KEY"
    """Name of the environment variable holding the API key; ``None`` (``null`` in YAML, or the string ``none`` as
    the command lines spell it) for an endpoint without authentication (a local vLLM server), which is then sent
    the placeholder key ``"EMPTY"``."""

    temperature: float | None = 0.0
    """Sampling temperature; ``None`` leaves it to the server (required for models that reject it)."""

    top_p: float | None = None
    """Nucleus sampling; ``None`` leaves it to the server."""

    max_tokens: int | None = 512
    """Completion token limit sent as ``max_tokens``; ``None`` sends none (use ``extra_params`` for
    ``max_completion_tokens``)."""

    extra_params: Mapping[str, Any] = field(default_factory=dict)
    """Further request-body fields merged into every request, e.g. ``{"seed": 0}``,
    ``{"max_completion_tokens": 2048, "reasoning_effort": "low"}`` or vLLM's ``{"chat_template_kwargs": ...}``.
    They are part of the cache key."""

    max_concurrency: int = 64
    """Most HTTP requests in flight at once (per event loop). Backoff sleeps do not hold a slot."""

    timeout_s: float = 60.0
    """Deadline of one HTTP attempt, in seconds; a slower attempt counts as a ``timeout`` and is retried."""

    max_retries: int = 4
    """Retries per request after the first attempt, on timeouts, HTTP 408/429/5xx, connection errors, malformed
    response bodies, empty replies and (if :attr:`retry_on_parse_error`) unparsable verdicts. Never on other 4xx."""

    retry_on_parse_error: bool = True
    """Also retry when the reply does not parse as a verdict (useful with ``temperature > 0``; with greedy decoding
    the retry usually repeats the reply, so set it to False to save calls)."""

    backoff_base_s: float = 0.5
    """Backoff before retry ``k`` (0-based) is ``min(backoff_max_s, backoff_base_s * 2**k)``, scaled by a random
    factor in [0.5, 1] (jitter). A 429's ``Retry-After`` raises the delay to at least that value (still capped)."""

    backoff_max_s: float = 20.0
    """Upper bound of one backoff delay, in seconds."""

    cache: bool = True
    """Cache successful verdicts (their reply text) in memory, keyed by a hash of (model, messages, params)."""

    cache_max_entries: int | None = 200_000
    """Bound of the in-memory cache (least recently used entries are evicted); ``None`` for no bound."""

    cache_dir: str | None = None
    """Directory of a persistent cache (SQLite file ``judge_cache.sqlite3``) shared by runs, evals and processes;
    ``None`` keeps the cache in memory only."""

    check_model: bool = True
    """At start-up (:meth:`JudgeClient.check`), fail if the endpoint's ``GET /models`` list lacks :attr:`model`."""

    label: str = "Judge"
    """What messages call the endpoint: a command that uses the client for another role says so (``agentrag-verl
    planners generate``: ``Planner LLM``), so that an error names what the user configured."""

    option_names: Mapping[str, str] = field(default_factory=dict)
    """How messages name an option, by field name, where the user did not set it as ``judge.<field>``: a command
    line passes its flags, e.g. ``{"base_url": "--base-url", "api_key_env": "--api-key-env"}``
    (:meth:`option`)."""

    def __post_init__(self) -> None:
        if not isinstance(self.option_names, Mapping) or not isinstance(self.label, str) or not self.label:
            raise JudgeConfigError(
                f"Invalid judge option label={self.label!r} or option_names={self.option_names!r}: expected a name "
                "and a mapping of field names to how messages spell them"
            )
        object.__setattr__(self, "option_names", dict(self.option_names))

        def bad(key: str, value: Any, expected: str) -> JudgeConfigError:
            return JudgeConfigError(f"Invalid judge option {key}={value!r}: {expected}; set {self.option(key)}")

        if isinstance(self.api_key_env, str) and self.api_key_env.strip().lower() in ("none", "null", ""):
            object.__setattr__(self, "api_key_env", None)  # "none": no API key, as every command spells it
        if not isinstance(self.base_url, str) or not self.base_url.startswith(("http://", "https://")):
            raise bad("base_url", self.base_url, "expected an http(s) URL such as http://127.0.0.1:8000/v1")
        if not isinstance(self.model, str) or not self.model:
            raise bad("model", self.model, "expected a non-empty model name")
        if self.api_key_env is not None and (not isinstance(self.api_key_env, str) or not self.api_key_env):
            raise bad("api_key_env", self.api_key_env, "expected an environment variable name, or none for no key")
        if not _is_int(self.max_concurrency) or self.max_concurrency < 1:
            raise bad("max_concurrency", self.max_concurrency, "expected an integer >= 1")
        if not self.timeout_s > 0:
            raise bad("timeout_s", self.timeout_s, "expected a positive number of seconds")
        if not _is_int(self.max_retries) or self.max_retries < 0:
            raise bad("max_retries", self.max_retries, "expected an integer >= 0")
        if self.backoff_base_s < 0 or self.backoff_max_s < 0:
            raise bad("backoff_base_s/backoff_max_s", (self.backoff_base_s, self.backoff_max_s), "expected >= 0")
        if self.cache_max_entries is not None and self.cache_max_entries < 0:
            raise bad("cache_max_entries", self.cache_max_entries, "expected an integer >= 0 or null")
        if not isinstance(self.extra_params, Mapping):
            raise bad("extra_params", self.extra_params, "expected a mapping of request-body fields")
        reserved = {"model", "messages", "stream", "n"} & set(self.extra_params)
        if reserved:
            raise bad("extra_params", dict(self.extra_params), f"must not set {sorted(reserved)}")
        object.__setattr__(self, "extra_params", dict(self.extra_params))

    def option(self, key: str) -> str:
        """How messages name the option ``key``: :attr:`option_names` ``[key]``, else ``judge.<key>``.

        >>> JudgeConfig().option("base_url"), JudgeConfig(option_names={"base_url": "--base-url"}).option("base_url")
        ('judge.base_url', '--base-url')
        """
        return self.option_names.get(key) or f"judge.{key}"

    def sampling_params(self) -> dict[str, Any]:
        """The request-body fields other than ``model`` and ``messages`` (``None`` values left out).

        Returns:
            A new dict, e.g. ``{"temperature": 0.0, "max_tokens": 512}``.

        >>> JudgeConfig(temperature=None, max_tokens=8, extra_params={"seed": 1}).sampling_params()
        {'max_tokens': 8, 'seed': 1}
        """
        params: dict[str, Any] = {}
        for key in ("temperature", "top_p", "max_tokens"):
            value = getattr(self, key)
            if value is not None:
                params[key] = value
        params.update(self.extra_params)
        return params

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | Any | None = None, **overrides: Any) -> JudgeConfig:
        """Builds a config from a mapping or an OmegaConf ``DictConfig`` (e.g. ``reward.judge`` of a recipe).

        Args:
            config: The options; ``None`` for all defaults. Keys are the field names of this class.
            **overrides: Options that win over ``config``.

        Returns:
            The config.

        Raises:
            JudgeConfigError: On an unknown key (the message lists the valid ones), a removed key (the message says
                what replaced it) or an invalid value.

        >>> JudgeConfig.from_config({"model": "judge", "api_key_env": None}, max_concurrency=8).max_concurrency
        8
        """
        return from_mapping(
            cls, config, what="judge option", overrides=overrides, removed=_REMOVED_OPTIONS, error=JudgeConfigError
        )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
