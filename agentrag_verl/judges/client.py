"""One async, cached, fault-tolerant client for every LLM judge the rewards use (:class:`JudgeClient`).

HiPRAG judges each step for over-/under-search, the multi-stage paper judges answer correctness, Search-P1
evaluates trajectories and writes reference planners, ReasonRAG scores partial trajectories: all of them are chat
completions against an OpenAI-compatible endpoint (a vLLM-served local judge or a hosted API), sent through this
client. A reward manager submits every step of every trajectory of a batch at once with :meth:`judge_many`.

Design (the HiPRAG authors' judge loop awaits steps one by one per sample, has no retries and no cache, and counts
errors as successes):

- **Concurrency**: at most ``max_concurrency`` HTTP requests in flight per event loop (an ``asyncio.Semaphore``
  held only while a request is on the wire, not during backoff sleeps).
- **Timeouts and retries**: the package's one retry policy (:mod:`agentrag_verl.http`): each attempt has a
  deadline of ``timeout_s``; timeouts, HTTP 408/429/5xx and connection errors are retried up to ``max_retries``
  times with exponential backoff and jitter, a 429's ``Retry-After`` is honoured, other 4xx (400, 401, 403, 404,
  422, ...) are not retried: repeating them cannot help. The judge adds its own retryable failures: malformed
  response bodies, empty replies and (optionally) unparsable verdicts. Every retry is counted.
- **Verdicts, never exceptions**: :meth:`judge` returns a :class:`Verdict` whose ``ok`` is False with an
  ``error_kind`` from :data:`ERROR_KINDS` when the judge fails; endpoint faults never raise to the caller, so the
  reward can apply its error policy (:mod:`agentrag_verl.judges.policy`).
- **Cache**: successful verdicts are cached by a SHA-256 of (model, messages, request params), storing the reply
  text (re-parsed on a hit), in memory (LRU) and optionally in SQLite under ``cache_dir``, so a re-run or an eval
  reuses verdicts (disk writes are batched: every 256 rows, at the end of each ``judge_many``, at close). The
  endpoint URL is not part of the key: the same model behind another URL hits the cache. Failures are never
  cached. Set ``temperature > 0`` and ``cache=True`` only if a repeated request may reuse one sampled verdict.
- **In-flight deduplication**: identical requests (same cache key and parser) submitted while one is in flight
  share its single HTTP call. The first one makes the call in its caller's task (so the first ``max_concurrency``
  requests of a batch are on the wire before the rest are prepared); if that caller is cancelled, a waiting twin
  makes the call itself.
- **CPU per call**: the messages are serialized to JSON once, for the cache key and the request body alike;
  :meth:`judge_many` looks its requests up in the disk cache 32 at a time, in one query; the aiohttp session keeps
  no cookies. On a fast local judge the client's CPU per call, not the judge, bounds the
  throughput (``benchmarks/judge_bench.py``).
- **Metrics**: :meth:`metrics` returns a flat ``dict[str, float]`` with namespaced keys (``judge/calls``,
  ``judge/cache_hits``, ``judge/retries``, ``judge/failures/timeout``, ``judge/latency_p95_s``,
  ``judge/prompt_tokens``, ...) for ``reward_extra_info`` / verl's tracker.
- **Secrets**: the key is read from the environment variable the config names, once, at construction; it is
  never logged and appears in no ``repr``. A missing key raises :class:`JudgeConfigError` at construction, an
  unreachable endpoint :class:`JudgeUnavailableError` from :meth:`check` (call it at start-up).
- **Event loops**: one client is shared by any number of coroutines of one event loop (verl's reward loop runs
  ``run_single`` coroutines concurrently). The aiohttp session, the semaphore and the in-flight table are created
  lazily per running loop, because an async HTTP client is bound to the loop it first runs in.
  Synchronous code without a running loop (e.g. a ``compute_score`` run in an executor thread) uses
  :meth:`judge_many_blocking`, which runs on one persistent background loop owned by the client, never a new loop
  per call.
- **Wire format**: one transport, the fastest: ``POST {base_url}/chat/completions`` with an aiohttp session per
  event loop (:func:`agentrag_verl.http.aiohttp_request`); the response JSON is read directly
  (``choices[0].message.content``, ``usage``). The ``openai`` client's request layer (pydantic models, httpx or its
  aiohttp transport) costs several times more CPU per call, which caps one event loop well below the request rate
  a fast local judge sustains at high concurrency (``benchmarks/judge_bench.py``).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import importlib.util
import json
import logging
import os
import random
import sqlite3
import threading
import time
import weakref
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from agentrag_verl.failure_log import FailureLog
from agentrag_verl.http import RequestError, RetryPolicy, aiohttp_request, aiohttp_session
from agentrag_verl.judges.config import JudgeConfig, JudgeConfigError

__all__ = [
    "ERROR_KINDS",
    "RETRYABLE_KINDS",
    "JudgeClient",
    "JudgeRequest",
    "JudgeUnavailableError",
    "Verdict",
    "cache_key",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

ERROR_KINDS = (
    "timeout",
    "rate_limit",
    "server_error",
    "connection",
    "malformed_response",
    "empty_reply",
    "parse_error",
    "client_error",
    "unexpected",
)
"""Values of :attr:`Verdict.error_kind`: ``timeout`` (attempt deadline or HTTP 408), ``rate_limit`` (HTTP 429),
``server_error`` (HTTP 5xx), ``connection`` (refused, reset, closed mid-answer), ``malformed_response`` (a body
that is not a chat completion), ``empty_reply`` (no content), ``parse_error`` (the parser rejected the reply),
``client_error`` (another HTTP 4xx), ``unexpected`` (any other exception; logged with its traceback)."""

RETRYABLE_KINDS = frozenset(ERROR_KINDS) - {"client_error", "unexpected"}
"""Kinds that are retried (``parse_error`` only if ``JudgeConfig.retry_on_parse_error``)."""

_LATENCY_WINDOW = 100_000
_CACHE_FILENAME = "judge_cache.sqlite3"
_DISK_BATCH = 256
_RESERVED_PARAMS = frozenset({"model", "messages", "stream", "n"})
_SUBMIT_CHUNK = 32
"""Requests :meth:`JudgeClient.judge_many` submits per event-loop turn. Submitting a large batch in one turn would
open every connection of the first wave, then prepare every other request, before the first request is written;
in small turns the first requests are on the wire at once and the answers that arrive are read between turns."""


class JudgeUnavailableError(RuntimeError):
    """The judge endpoint cannot be used: unreachable, key rejected, or model not served (from :meth:`check`)."""


@dataclass(frozen=True)
class JudgeRequest(Generic[T]):
    """One judge call: chat messages and the parser that turns the reply into a verdict value.

    Each method's ``judge.py`` builds its own (e.g. :func:`agentrag_verl.methods.hiprag.judge.over_search_request`),
    or build one by hand.

    Attributes:
        messages: Chat messages ``[{"role": ..., "content": ...}, ...]``.
        parser: ``reply_text -> value``; raises (e.g. :class:`~agentrag_verl.judges.parsers.ParseError`) when the
            reply holds no verdict. Use module-level functions (or ``functools.partial`` of them) so identical
            requests are recognised as such for deduplication.
        params: Request-body fields overriding the client's sampling parameters for this call (part of the cache
            key); must not set ``model``, ``messages``, ``stream`` or ``n``.
    """

    messages: Sequence[Mapping[str, Any]]
    parser: Callable[[str], T]
    params: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.messages, str | bytes) or not isinstance(self.messages, Sequence) or not self.messages:
            raise ValueError("JudgeRequest.messages must be a non-empty list of {'role', 'content'} dicts")
        messages = []
        for message in self.messages:
            if not isinstance(message, Mapping) or not isinstance(message.get("role"), str) or "content" not in message:
                raise ValueError(f"JudgeRequest message must be a mapping with 'role' and 'content', got {message!r}")
            messages.append(dict(message))
        object.__setattr__(self, "messages", messages)
        if not callable(self.parser):
            raise ValueError(f"JudgeRequest.parser must be callable, got {type(self.parser).__name__}")
        if self.params is not None:
            reserved = _RESERVED_PARAMS & set(self.params)
            if reserved:
                raise ValueError(f"JudgeRequest.params must not set {sorted(reserved)}")
            object.__setattr__(self, "params", dict(self.params))


@dataclass(frozen=True)
class Verdict(Generic[T]):
    """The outcome of one judge request.

    Attributes:
        value: The parsed verdict (``None`` when ``ok`` is False).
        raw: The judge's reply text (the last one received, if any; ``None`` when no reply came).
        ok: Whether ``value`` holds a parsed verdict.
        error_kind: ``None`` if ok, else one of :data:`ERROR_KINDS` (the last attempt's error).
        error: A short description of the error (never contains the API key).
        cached: Served from the cache, without a call.
        attempts: HTTP attempts this request made (0 for a cache hit or a request that joined an identical one in
            flight), so the sum over verdicts equals the client's ``calls`` metric.
        latency_s: Seconds from submission to verdict, including queueing and backoff.
    """

    value: T | None
    raw: str | None
    ok: bool
    error_kind: str | None = None
    error: str | None = None
    cached: bool = False
    attempts: int = 0
    latency_s: float = 0.0


def cache_key(model: str, messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> str:
    """The cache key of a request: SHA-256 of canonical JSON of (model, messages, params).

    Args:
        model: The model name.
        messages: The chat messages.
        params: The effective request-body fields besides model and messages (sampling parameters etc.).

    Returns:
        64 hex digits.

    >>> cache_key("m", [{"role": "user", "content": "hi"}], {"temperature": 0}) == cache_key(
    ...     "m", [{"content": "hi", "role": "user"}], {"temperature": 0})
    True
    """
    return _key_of(_canonical(list(messages)), _canonical(model), _canonical(dict(params)))


def _canonical(value: Any) -> str:
    """Canonical JSON: sorted keys, no spaces, UTF-8 text as is, unknown types as ``str``."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def _key_of(messages_json: str, model_json: str, params_json: str) -> str:
    """:func:`cache_key` from the canonical JSON of its parts: the canonical JSON of
    ``{"v": 1, "model": ..., "messages": ..., "params": ...}`` is assembled, not re-encoded (sorted top-level keys:
    messages, model, params, v), so the messages are serialized once per request, for the key and the body alike."""
    payload = f'{{"messages":{messages_json},"model":{model_json},"params":{params_json},"v":1}}'
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _body_of(messages_json: str, model_json: str, params_json: str) -> bytes:
    """The chat completion request body from the canonical JSON of its parts."""
    params = "," + params_json[1:-1] if params_json != "{}" else ""
    return f'{{"model":{model_json},"messages":{messages_json}{params}}}'.encode()


def _callable_key(fn: Any) -> str:
    """A stable identity for a parser, so requests with equal messages and equal parsers are deduplicated."""
    if isinstance(fn, functools.partial):
        keywords = sorted(fn.keywords.items())
        return f"partial({_callable_key(fn.func)},{fn.args!r},{keywords!r})"
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if module and qualname and "<" not in qualname:
        return f"{module}.{qualname}"
    return f"id:{id(fn)}"


def _percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


class _Metrics:
    """Counters and latency windows, safe to update from several threads (background loop + caller loop)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.requests = 0
        self.ok = 0
        self.cache_hits = 0
        self.cache_hits_disk = 0
        self.dedup_hits = 0
        self.calls = 0
        self.retries: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.call_latency: deque[float] = deque(maxlen=_LATENCY_WINDOW)
        self.request_latency: deque[float] = deque(maxlen=_LATENCY_WINDOW)

    def snapshot(self, prefix: str) -> dict[str, float]:
        with self.lock:
            out = {
                "requests": self.requests,
                "ok": self.ok,
                "failures": sum(self.failures.values()),
                "cache_hits": self.cache_hits,
                "cache_hits_disk": self.cache_hits_disk,
                "dedup_hits": self.dedup_hits,
                "calls": self.calls,
                "retries": sum(self.retries.values()),
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens,
                "latency_p50_s": _percentile(self.request_latency, 50),
                "latency_p95_s": _percentile(self.request_latency, 95),
                "call_latency_p50_s": _percentile(self.call_latency, 50),
                "call_latency_p95_s": _percentile(self.call_latency, 95),
            }
            for kind in ERROR_KINDS:
                out[f"failures/{kind}"] = self.failures[kind]
            for kind in sorted(RETRYABLE_KINDS):
                out[f"retries/{kind}"] = self.retries[kind]
        return {f"{prefix}{key}": float(value) for key, value in out.items()}


class _MemoryCache:
    """A thread-safe LRU map from cache key to reply text."""

    def __init__(self, max_entries: int | None) -> None:
        self._max = max_entries
        self._data: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> str | None:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: str, value: str) -> None:
        if self._max == 0:
            return
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while self._max is not None and len(self._data) > self._max:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: str) -> bool:
        return key in self._data


class _DiskCache:
    """Reply texts in SQLite (WAL mode), shared safely by threads, processes and successive runs.

    Writes are batched (one transaction per :data:`_DISK_BATCH` rows, at the end of each ``judge_many`` and at
    close), so a killed process loses at most the last unflushed rows. Read and write errors are logged and
    treated as misses: a broken cache never fails a judge call.
    """

    def __init__(self, directory: str, option: str = "judge.cache_dir") -> None:
        self.path = os.path.join(directory, _CACHE_FILENAME)
        try:
            os.makedirs(directory, exist_ok=True)
            self._conn = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False, isolation_level=None)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS verdicts "
                "(key TEXT PRIMARY KEY, model TEXT NOT NULL, reply TEXT NOT NULL, created REAL NOT NULL)"
            )
        except (OSError, sqlite3.Error) as exc:
            raise JudgeConfigError(
                f"Cannot open the judge cache {self.path}: {exc}; set {option} to a writable directory, or leave it "
                "out to cache in memory only"
            ) from exc
        self._lock = threading.Lock()
        self._pending: dict[str, tuple[str, str, str, float]] = {}
        self._warned = False

    def _warn(self, exc: Exception) -> None:
        if not self._warned:
            self._warned = True
            logger.warning("Judge disk cache %s failed (%s); continuing without it where it fails", self.path, exc)

    def get(self, key: str) -> str | None:
        try:
            with self._lock:
                pending = self._pending.get(key)
                if pending is not None:
                    return pending[2]
                row = self._conn.execute("SELECT reply FROM verdicts WHERE key = ?", (key,)).fetchone()
        except sqlite3.Error as exc:
            self._warn(exc)
            return None
        return row[0] if row else None

    def get_many(self, keys: Sequence[str]) -> dict[str, str]:
        """The stored replies of ``keys`` (absent keys are left out), in one query."""
        found: dict[str, str] = {}
        try:
            with self._lock:
                rest = []
                for key in keys:
                    pending = self._pending.get(key)
                    if pending is not None:
                        found[key] = pending[2]
                    else:
                        rest.append(key)
                if rest:
                    marks = ",".join("?" * len(rest))
                    query = f"SELECT key, reply FROM verdicts WHERE key IN ({marks})"
                    found.update(self._conn.execute(query, rest).fetchall())
        except sqlite3.Error as exc:
            self._warn(exc)
        return found

    def put(self, key: str, model: str, reply: str) -> None:
        with self._lock:
            self._pending[key] = (key, model, reply, time.time())
            full = len(self._pending) >= _DISK_BATCH
        if full:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            rows, self._pending = list(self._pending.values()), {}
            if not rows:
                return
            try:
                self._conn.execute("BEGIN")
                self._conn.executemany(
                    "INSERT OR REPLACE INTO verdicts (key, model, reply, created) VALUES (?, ?, ?, ?)", rows
                )
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                self._warn(exc)

    def __len__(self) -> int:
        self.flush()
        with self._lock:
            return self._conn.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0]

    def close(self) -> None:
        self.flush()
        with self._lock:
            self._conn.close()


@dataclass
class _LoopState:
    """What is bound to one event loop: the aiohttp session (made on first use), the concurrency limit and the
    in-flight table."""

    semaphore: asyncio.Semaphore
    inflight: dict[tuple[str, str], asyncio.Future]
    session: Any = None

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()


class _BackgroundLoop:
    """One persistent event loop in a daemon thread, for the blocking API."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._serve, name="JudgeClient-loop", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Any, timeout: float | None) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5.0)
        if not self.thread.is_alive():
            self.loop.close()


def _read_completion(body: bytes) -> tuple[str, Mapping[str, Any]]:
    """``(content, usage)`` of a chat completion response body."""
    try:
        data = json.loads(body)
        message = data["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        message = f"not a chat completion: {type(exc).__name__}: {exc}"[:300]
        raise RequestError("malformed_response", message, retryable=True) from exc
    content = message.get("content") if isinstance(message, Mapping) else None
    if isinstance(content, list):  # content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
    if not isinstance(content, str) or not content.strip():
        raise RequestError("empty_reply", "the reply has no content", retryable=True)
    usage = data.get("usage") if isinstance(data.get("usage"), Mapping) else {}
    return content, usage


class JudgeClient:
    """Async client for an OpenAI-compatible judge endpoint, with retries, a cache, deduplication and metrics.

    Example::

        client = JudgeClient.from_config({"base_url": "http://127.0.0.1:8000/v1", "model": "judge",
                                          "api_key_env": None})
        await client.check()  # at start-up: fails clearly if the endpoint is unreachable
        verdicts = await client.judge_many([uses.hiprag_under_search_request(r, c) for r, c in steps])
        reward_extra_info.update(client.metrics())

    Args:
        config: The endpoint and call policy.

    Raises:
        JudgeConfigError: The API key variable named by ``config.api_key_env`` is unset or empty, or the cache
            directory cannot be opened.
        ImportError: The ``aiohttp`` package is missing.
    """

    def __init__(self, config: JudgeConfig) -> None:
        if not isinstance(config, JudgeConfig):
            raise TypeError(f"JudgeClient takes a JudgeConfig, got {type(config).__name__}; use from_config()")
        if importlib.util.find_spec("aiohttp") is None:
            raise ImportError('The LLM judge client needs aiohttp: pip install "agentrag-verl[judge]"')
        self.config = config
        if config.api_key_env is None:
            api_key = "EMPTY"  # vLLM's placeholder; an endpoint without auth ignores it
        else:
            api_key = os.environ.get(config.api_key_env, "").strip()
            if not api_key:
                option = config.option("api_key_env")
                raise JudgeConfigError(
                    f"{config.label} API key missing: environment variable {config.api_key_env} is not set or empty "
                    f"({option} {config.api_key_env}, endpoint {config.base_url}). Export it, or set {option} to "
                    "none for an endpoint without a key (e.g. a local vLLM server)."
                )
        self._headers = {
            "Authorization": f"Bearer {api_key}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        }
        self._params = config.sampling_params()
        self._params_json = _canonical(self._params)
        self._model_json = _canonical(config.model)
        self._completions_url = config.base_url.rstrip("/") + "/chat/completions"
        self._models_url = config.base_url.rstrip("/") + "/models"
        self._retry = RetryPolicy(config.max_retries, config.backoff_base_s, config.backoff_max_s)
        use_memory = config.cache and config.cache_max_entries != 0
        self._memory = _MemoryCache(config.cache_max_entries) if use_memory else None
        self._disk = (
            _DiskCache(config.cache_dir, config.option("cache_dir")) if config.cache and config.cache_dir else None
        )
        self._metrics = _Metrics()
        self._rng = random.Random()
        self._states: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = weakref.WeakKeyDictionary()
        self._states_lock = threading.Lock()
        self._background: _BackgroundLoop | None = None
        self._failure_log = FailureLog(logger)
        self._closed = False

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | Any | None = None, **overrides: Any) -> JudgeClient:
        """Builds a client from a mapping or OmegaConf node (see :meth:`JudgeConfig.from_config`)."""
        return cls(JudgeConfig.from_config(config, **overrides))

    def __repr__(self) -> str:  # never shows the key
        c = self.config
        return (
            f"JudgeClient(base_url={c.base_url!r}, model={c.model!r}, api_key_env={c.api_key_env!r}, "
            f"max_concurrency={c.max_concurrency})"
        )

    # ------------------------------------------------------------------ per-loop state

    def _state(self) -> _LoopState:
        if self._closed:
            raise RuntimeError("JudgeClient is closed")
        loop = asyncio.get_running_loop()
        state = self._states.get(loop)
        if state is None:
            with self._states_lock:
                state = self._states.get(loop)
                if state is None:
                    state = _LoopState(asyncio.Semaphore(self.config.max_concurrency), {})
                    self._states[loop] = state
        return state

    def _session(self, state: _LoopState) -> Any:
        if state.session is None:
            cfg = self.config
            state.session = aiohttp_session(cfg.timeout_s, max(cfg.max_concurrency, 100), self._headers)
        return state.session

    # ------------------------------------------------------------------ public async API

    async def check(self, timeout_s: float | None = None) -> dict[str, Any]:
        """Start-up probe: the endpoint answers, accepts the key and serves the model.

        Sends ``GET /models``; if the endpoint does not implement it (404/405), sends a one-token chat completion
        instead. Call it once when the reward manager starts, so a bad config fails before the first training step.

        Args:
            timeout_s: Deadline of the probe; ``config.timeout_s`` if ``None``.

        Returns:
            ``{"base_url", "model", "models"}`` (``models``: the served names, ``None`` if not listed).

        Raises:
            JudgeUnavailableError: With the URL, the cause and the config key to fix.
        """
        cfg = self.config
        session = self._session(self._state())
        timeout = timeout_s if timeout_s is not None else cfg.timeout_s
        what, url_option, model_option = (
            f"{cfg.label} endpoint {cfg.base_url}",
            cfg.option("base_url"),
            cfg.option("model"),
        )
        key_hint = f"the key in ${cfg.api_key_env}" if cfg.api_key_env else "no key"
        key_option = f"{cfg.option('api_key_env')} ({key_hint})"
        served: list[str] | None = None
        try:
            response = await asyncio.wait_for(aiohttp_request(session, "GET", self._models_url), timeout)
        except asyncio.TimeoutError:
            response, error = None, RequestError("timeout", f"no answer within {timeout}s")
        except RequestError as exc:
            response, error = None, exc
        if response is None:
            if error.status in (401, 403):
                raise JudgeUnavailableError(
                    f"{what} rejected {key_hint} ({error.message}); check the key or {cfg.option('api_key_env')}"
                ) from None
            if error.status is None:
                raise JudgeUnavailableError(
                    f"{what} is unreachable ({error.message}); start the server or fix {url_option}"
                ) from None
            if error.status not in (404, 405):
                raise JudgeUnavailableError(
                    f"{what} answered {error.message} to GET /models; check {url_option} (it must end with the API "
                    "version, e.g. /v1)"
                ) from None
        else:
            try:
                served = [str(m["id"]) for m in response.json()["data"]]
            except (ValueError, KeyError, TypeError):
                served = None  # not an OpenAI model list: probe with a completion instead
        if served is not None:
            if cfg.check_model and served and cfg.model not in served:
                raise JudgeUnavailableError(
                    f"{what} does not serve model {cfg.model!r}; it lists {served[:20]}; set {model_option} (or "
                    f"{cfg.option('check_model')}=false if the list is incomplete)"
                )
            return {"base_url": cfg.base_url, "model": cfg.model, "models": served}
        limit = "max_completion_tokens" if "max_completion_tokens" in self._params else "max_tokens"
        body = {**self._params, "model": cfg.model, "messages": [{"role": "user", "content": "ping"}], limit: 1}
        try:
            await asyncio.wait_for(self._post(session, json.dumps(body).encode()), timeout)
        except asyncio.TimeoutError:
            raise JudgeUnavailableError(
                f"{what} probe failed: no reply within {timeout}s; check {url_option}"
            ) from None
        except RequestError as exc:
            if exc.kind != "empty_reply":  # a 1-token reply may legitimately be empty
                raise JudgeUnavailableError(
                    f"{what} probe failed ({exc.kind}: {exc.message}); check {url_option}, {model_option} and "
                    f"{key_option}"
                ) from None
        return {"base_url": cfg.base_url, "model": cfg.model, "models": None}

    async def judge(self, request: JudgeRequest[T]) -> Verdict[T]:
        """Judges one request: cache, then an in-flight twin, then the endpoint with retries.

        Args:
            request: Messages and parser.

        Returns:
            The verdict; endpoint faults and unparsable replies give ``ok=False`` with an ``error_kind``, they do
            not raise.

        Raises:
            RuntimeError: The client is closed.
        """
        return await self._judge(request, self._prepare(request), None)

    def _prepare(self, request: JudgeRequest[Any]) -> tuple[str, str, str]:
        """``(cache key, messages JSON, params JSON)`` of a request."""
        params_json = _canonical({**self._params, **request.params}) if request.params else self._params_json
        messages_json = _canonical(request.messages)
        return _key_of(messages_json, self._model_json, params_json), messages_json, params_json

    async def _judge(
        self, request: JudgeRequest[T], prepared: tuple[str, str, str], disk_rows: Mapping[str, str] | None
    ) -> Verdict[T]:
        """:meth:`judge` of a prepared request; ``disk_rows`` as in :meth:`_cache_get`."""
        if self._closed:
            raise RuntimeError("JudgeClient is closed")
        start = time.perf_counter()
        key, messages_json, params_json = prepared
        with self._metrics.lock:
            self._metrics.requests += 1
        cached = self._cache_get(key, request.parser, disk_rows)
        if cached is not None:
            raw, value = cached
            with self._metrics.lock:
                self._metrics.cache_hits += 1
                self._metrics.ok += 1
            return Verdict(value, raw, True, cached=True, latency_s=time.perf_counter() - start)

        state = self._state()
        dedup_key = (key, _callable_key(request.parser))
        leader, joined = False, False
        while True:
            twin = state.inflight.get(dedup_key)
            if twin is None:
                leader = True
                verdict = await self._lead(state, dedup_key, key, messages_json, params_json, request.parser)
                break
            if not joined:
                joined = True
                with self._metrics.lock:
                    self._metrics.dedup_hits += 1
            try:
                verdict = await asyncio.shield(twin)
                break
            except asyncio.CancelledError:
                if not twin.cancelled() or _current_task_cancelling():
                    raise
                # the identical request this one joined was cancelled, this one was not: make the call itself
        latency = time.perf_counter() - start
        with self._metrics.lock:
            if leader:
                self._metrics.request_latency.append(latency)
            if verdict.ok:
                self._metrics.ok += 1
            else:
                self._metrics.failures[verdict.error_kind or "unexpected"] += 1
        attempts = verdict.attempts if leader else 0
        return Verdict(
            verdict.value, verdict.raw, verdict.ok, verdict.error_kind, verdict.error, False, attempts, latency
        )

    async def _lead(
        self,
        state: _LoopState,
        dedup_key: tuple[str, str],
        key: str,
        messages_json: str,
        params_json: str,
        parser: Callable[[str], Any],
    ) -> Verdict[Any]:
        """Makes the call in the caller's task (no task of its own: the first ``max_concurrency`` requests of a
        batch go on the wire before the rest are prepared); identical requests meanwhile await its future."""
        shared: asyncio.Future[Verdict[Any]] = asyncio.get_running_loop().create_future()
        state.inflight[dedup_key] = shared
        try:
            verdict = await self._run(state, key, _body_of(messages_json, self._model_json, params_json), parser)
        except BaseException:
            shared.cancel()  # twins that are not cancelled themselves make the call again
            raise
        finally:
            if state.inflight.get(dedup_key) is shared:
                del state.inflight[dedup_key]
        shared.set_result(verdict)
        return verdict

    async def judge_many(self, requests: Iterable[JudgeRequest[Any]]) -> list[Verdict[Any]]:
        """Judges a batch concurrently (bounded by ``max_concurrency``); verdicts come back in request order.

        Submit every step of every trajectory of a batch in one call: identical requests share a call, cached
        ones cost nothing, and the endpoint sees ``max_concurrency`` requests in flight throughout.

        Args:
            requests: The requests.

        Returns:
            One verdict per request, in order. Never raises for endpoint faults.
        """
        requests = list(requests)
        tasks: list[asyncio.Future[Verdict[Any]]] = []
        try:
            for start in range(0, len(requests), _SUBMIT_CHUNK):
                if start:
                    await asyncio.sleep(0)  # answers that arrived meanwhile are handled between chunks
                if self._closed:
                    raise RuntimeError("JudgeClient is closed")
                chunk = requests[start : start + _SUBMIT_CHUNK]
                prepared = [self._prepare(r) for r in chunk]
                disk_rows = None
                if self._disk is not None and self.config.cache:  # one query for the chunk, not one per request
                    memory = self._memory
                    disk_rows = self._disk.get_many([k for k, _, _ in prepared if memory is None or k not in memory])
                tasks.extend(
                    asyncio.ensure_future(self._judge(r, p, disk_rows)) for r, p in zip(chunk, prepared, strict=True)
                )
            verdicts = list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            raise
        if self._disk is not None:
            self._disk.flush()
        return verdicts

    # ------------------------------------------------------------------ blocking API

    def judge_many_blocking(
        self, requests: Iterable[JudgeRequest[Any]], timeout_s: float | None = None
    ) -> list[Verdict[Any]]:
        """:meth:`judge_many` for synchronous code (e.g. a ``compute_score`` running in an executor thread).

        Runs on the client's single background event loop; must not be called from a thread whose event loop is
        running (there, ``await client.judge_many(...)``).

        Args:
            requests: The requests.
            timeout_s: Overall deadline; ``None`` waits until every verdict is in.

        Returns:
            One verdict per request, in order.

        Raises:
            RuntimeError: Called from a running event loop, or the client is closed.
            TimeoutError: ``timeout_s`` elapsed.
        """
        return self._run_blocking(self.judge_many(list(requests)), timeout_s)

    def check_blocking(self, timeout_s: float | None = None) -> dict[str, Any]:
        """:meth:`check` for synchronous start-up code (e.g. a reward manager's ``__init__``)."""
        return self._run_blocking(self.check(timeout_s), None)

    def _run_blocking(self, coro: Any, timeout_s: float | None) -> Any:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            coro.close()
            raise RuntimeError(
                "JudgeClient blocking call from a running event loop would stall it; use `await client.judge_many()`"
                " / `await client.check()` there"
            )
        if self._closed:
            coro.close()
            raise RuntimeError("JudgeClient is closed")
        with self._states_lock:
            if self._background is None:
                self._background = _BackgroundLoop()
            background = self._background
        return background.run(coro, timeout_s)

    # ------------------------------------------------------------------ metrics and lifecycle

    def metrics(self, prefix: str = "judge/", reset: bool = False) -> dict[str, float]:
        """Counters since construction or the last reset, as a flat dict of floats with namespaced keys.

        Keys (after ``prefix``): ``requests`` (= ``ok`` + ``failures``), ``ok``, ``failures``, ``failures/<kind>``
        for every kind in :data:`ERROR_KINDS`, ``cache_hits`` (memory or disk), ``cache_hits_disk``,
        ``dedup_hits``, ``calls`` (HTTP attempts), ``retries``, ``retries/<kind>``, ``prompt_tokens``,
        ``completion_tokens``, ``total_tokens``, ``latency_p50_s`` / ``latency_p95_s`` (per request that called
        the endpoint, including queueing and retries), ``call_latency_p50_s`` / ``call_latency_p95_s`` (per
        HTTP attempt).

        Args:
            prefix: Prepended to every key.
            reset: Zero the counters after reading (e.g. once per training step).

        Returns:
            The metrics.
        """
        snapshot = self._metrics.snapshot(prefix)
        if reset:
            with self._metrics.lock:
                self._metrics.reset()
        return snapshot

    async def aclose(self) -> None:
        """Closes the HTTP client of the running loop, the background loop and the disk cache."""
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        state = self._states.pop(loop, None)
        if state is not None:
            await state.close()
        self._shutdown()

    def close(self) -> None:
        """Synchronous :meth:`aclose` for code without a running loop (HTTP clients of other loops are dropped)."""
        self._shutdown()

    def _shutdown(self) -> None:
        if self._closed:
            return
        background = self._background
        if background is not None:
            state = self._states.pop(background.loop, None)
            if state is not None:
                try:
                    background.run(state.close(), 5.0)
                except Exception:  # closing is best effort
                    logger.debug("closing the background judge HTTP client failed", exc_info=True)
            background.stop()
            self._background = None
        if self._disk is not None:
            self._disk.close()
        self._closed = True

    async def __aenter__(self) -> JudgeClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __enter__(self) -> JudgeClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _cache_get(
        self, key: str, parser: Callable[[str], Any], disk_rows: Mapping[str, str] | None = None
    ) -> tuple[str, Any] | None:
        """``(raw, value)`` from memory or disk, or ``None``; an entry the parser rejects counts as a miss.

        ``disk_rows``: the disk cache's rows for a batch, looked up at once; ``None`` looks this key up alone."""
        if not self.config.cache:
            return None
        raw = self._memory.get(key) if self._memory is not None else None
        from_disk = False
        if raw is None and self._disk is not None:
            raw = disk_rows.get(key) if disk_rows is not None else self._disk.get(key)
            from_disk = raw is not None
        if raw is None:
            return None
        try:
            value = parser(raw)
        except Exception:
            return None
        if from_disk:
            if self._memory is not None:
                self._memory.put(key, raw)
            with self._metrics.lock:
                self._metrics.cache_hits_disk += 1
        return raw, value

    def _cache_put(self, key: str, raw: str) -> None:
        if not self.config.cache:
            return
        if self._memory is not None:
            self._memory.put(key, raw)
        if self._disk is not None:
            self._disk.put(key, self.config.model, raw)

    async def _post(self, session: Any, data: bytes) -> tuple[str, Mapping[str, Any]]:
        """One chat completion: ``(content, usage)``; raises :class:`RequestError` (the judge's kinds)."""
        response = await aiohttp_request(session, "POST", self._completions_url, data=data)
        return _read_completion(response.body)

    def _count_retry(self, error: RequestError, retry: int, delay: float) -> None:
        with self._metrics.lock:
            self._metrics.retries[error.kind] += 1
        logger.debug("judge retry %d after %s in %.3fs: %s", retry, error.kind, delay, error.message)

    async def _run(self, state: _LoopState, key: str, data: bytes, parser: Callable[[str], Any]) -> Verdict[Any]:
        """Calls the endpoint until a verdict parses, a non-retryable error occurs or the retries run out."""
        cfg, metrics = self.config, self._metrics
        session = self._session(state)
        attempts = 0
        raw: str | None = None

        async def attempt() -> tuple[str, Any]:
            nonlocal attempts, raw
            attempts += 1
            async with state.semaphore:
                started = time.perf_counter()
                try:
                    reply, usage = await self._post(session, data)
                except RequestError as exc:
                    if exc.kind == "timeout" and exc.status is None:
                        message = f"no reply within {cfg.option('timeout_s')}={cfg.timeout_s:g}s"
                        raise RequestError("timeout", message) from exc
                    raise
                finally:
                    latency = time.perf_counter() - started
                    with metrics.lock:
                        metrics.calls += 1
                        metrics.call_latency.append(latency)
            raw = reply
            with metrics.lock:
                metrics.prompt_tokens += _int(usage.get("prompt_tokens"))
                metrics.completion_tokens += _int(usage.get("completion_tokens"))
            try:
                return reply, parser(reply)
            except Exception as exc:
                message = f"{type(exc).__name__}: {exc}"[:300]
                raise RequestError("parse_error", message, retryable=cfg.retry_on_parse_error) from exc

        try:
            reply, value = await self._retry.call(attempt, on_retry=self._count_retry, rng=self._rng)
        except RequestError as error:
            self._log_failure(error.kind, error.message)
            return Verdict(None, raw, False, error.kind, error.message, attempts=attempts)
        except Exception as exc:  # a bug or an unforeseen transport error: fail this verdict, keep the batch
            logger.warning("Unexpected error from the judge endpoint", exc_info=exc)
            message = f"{type(exc).__name__}: {exc}"[:300]
            self._log_failure("unexpected", message)
            return Verdict(None, raw, False, "unexpected", message, attempts=attempts)
        self._cache_put(key, reply)
        return Verdict(value, reply, True, attempts=attempts)

    def _log_failure(self, kind: str, message: str) -> None:
        self._failure_log.record(
            kind,
            f"{self.config.label} request to {self.config.base_url} failed ({kind}): {message}. Further {kind} "
            "failures are logged at DEBUG; see the judge/failures/* metrics.",
        )


def _current_task_cancelling() -> bool:
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)  # Python >= 3.11
    return bool(cancelling()) if cancelling is not None else False


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
