"""One retry policy and one request call for every HTTP client of the package.

The judge client (:mod:`agentrag_verl.judges.client`), the retriever client
(:mod:`agentrag_verl.tools.retriever_client`), the completions client of the agent loops
(:mod:`agentrag_verl.agent_loops.openai_client`) and the ReasonRAG MCTS policy all talk to services that fail for a
moment (a busy vLLM server answers 503, a hosted API 429, a restarting retriever refuses connections). They share
the policy written here:

- **What is retried**: timeouts, connection errors (refused, reset, closed mid-answer) and HTTP 408, 429 and 5xx.
  Other 4xx are not: the request itself is wrong (bad body, rejected key, unknown model) and repeating it cannot
  help. A client may mark failures of its own as retryable (the judge retries an empty or unparsable reply) by
  raising :class:`RequestError` with ``retryable=True`` from its attempt.
- **How long to wait**: before retry ``k`` (0-based), ``min(backoff_max_s, backoff_base_s * 2**k * (1 + u / 4))``
  with ``u`` uniform in [0, 1): exponential, with jitter so that clients failing together do not retry together,
  never below the plain exponential step and never above the cap. An HTTP 429 or 503 answer's ``retry-after-ms``
  or ``Retry-After`` header (seconds) raises the wait to at least that value, still capped.
- **How often**: at most ``max_retries`` retries after the first attempt. Then :meth:`RetryPolicy.call` raises the
  last attempt's :class:`RequestError` with ``attempts`` set, which each client wraps in its own error saying what
  to fix.
- **Timeouts**: one deadline per attempt, ``timeout_s``, set on the HTTP client made by :func:`httpx_client` or
  :func:`aiohttp_session`; an attempt past it is a ``timeout`` and is retried.
- **Secrets**: error messages quote the status and at most 200 characters of the answer, never request headers.
  An answer may quote the key itself (some gateways echo a rejected key in their 401 body), so every remote body
  becomes text here only, through :func:`error_detail`, which replaces each credential the request carried
  (:func:`credentials`: the token of ``Authorization`` and the value of the other credential headers, the client's
  defaults included) with :data:`REDACTED` before it cuts the text. An API key therefore cannot reach an error, an
  exception message that a caller logs later, or a log line.

Two transports, one mapping of their failures: httpx (:func:`httpx_request`) for the retriever, completions and
policy clients, whose callers may pass their own ``httpx.AsyncClient``; aiohttp (:func:`aiohttp_request`) for the
judge, which sends thousands of small calls per training step, where the client's CPU per call bounds the
throughput and aiohttp spends less of it than httpx at high concurrency (``benchmarks/judge_bench.py``).

Importing this module imports neither httpx nor aiohttp; each is imported when first used.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import aiohttp
    import httpx

__all__ = [
    "CREDENTIAL_HEADERS",
    "REDACTED",
    "RETRYABLE_KINDS",
    "RequestError",
    "Response",
    "RetryPolicy",
    "aiohttp_request",
    "aiohttp_session",
    "credentials",
    "error_detail",
    "httpx_client",
    "httpx_request",
    "redact",
    "retry_after_s",
    "status_error",
]

T = TypeVar("T")

JITTER = 0.25
"""Upper bound of the random fraction added to each backoff step."""

CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "api-key", "x-api-key"})
"""Request headers whose values are secrets (OpenAI-style bearer tokens, Azure's ``api-key``, ``x-api-key``)."""

REDACTED = "<redacted>"
"""What a secret is replaced with in any text made from a remote answer."""

RETRYABLE_KINDS = frozenset({"timeout", "connection", "rate_limit", "server_error"})
"""Kinds of :class:`RequestError` retried by default: ``timeout`` (deadline or HTTP 408), ``connection``,
``rate_limit`` (HTTP 429) and ``server_error`` (HTTP 5xx). ``client_error`` (any other 4xx) is not."""


class RequestError(Exception):
    """One failed HTTP attempt, or, raised by :meth:`RetryPolicy.call`, the last one of a request.

    Attributes:
        kind: ``timeout``, ``connection``, ``rate_limit``, ``server_error``, ``client_error``, or a kind of the
            caller's own (e.g. the judge's ``empty_reply``).
        message: What failed, e.g. ``HTTP 503: model is loading``; never contains request headers.
        status: The HTTP status, if an answer came.
        retryable: Whether another attempt may succeed (default: ``kind in RETRYABLE_KINDS``).
        retry_after: Seconds the server asked to wait (``Retry-After``), if it did.
        attempts: Attempts made so far, this one included (set by :meth:`RetryPolicy.call`; 1 otherwise).
    """

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        status: int | None = None,
        retryable: bool | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.retryable = kind in RETRYABLE_KINDS if retryable is None else retryable
        self.retry_after = retry_after
        self.attempts = 1


@dataclass(frozen=True)
class Response:
    """A successful (status < 400) HTTP answer.

    Attributes:
        status: The HTTP status.
        body: The raw body.
        sent_headers: The headers the request carried (the client's defaults and its own), kept so that
            :meth:`detail` can redact their credentials; never shown (not in ``repr``).
    """

    status: int
    body: bytes
    sent_headers: tuple[Mapping[str, str] | None, ...] = field(default=(), repr=False, compare=False)

    def __repr__(self) -> str:  # the body may quote a key: detail() is the way to show it
        return f"Response(status={self.status}, body=<{len(self.body)} bytes>)"

    def detail(self) -> str:
        """What the body says, for an error message about an answer the caller cannot use: :func:`error_detail`
        with the request's credentials redacted."""
        return error_detail(self.body, credentials(*self.sent_headers))

    def json(self) -> Any:
        """The body parsed as JSON (raises ``ValueError`` when it is not JSON)."""
        return json.loads(self.body)

    @property
    def text(self) -> str:
        """The body as text (invalid UTF-8 replaced)."""
        return self.body.decode("utf-8", "replace")


@dataclass(frozen=True)
class RetryPolicy:
    """When to retry a failed request and how long to wait (see the module docstring).

    Example::

        policy = RetryPolicy(max_retries=3, backoff_base_s=0.5, backoff_max_s=30.0)
        response = await policy.call(lambda: httpx_request(client, "POST", url, json=body))
    """

    max_retries: int = 3
    """Retries after the first attempt."""

    backoff_base_s: float = 0.5
    """Wait before the first retry; it doubles with each further retry."""

    backoff_max_s: float = 30.0
    """Upper bound of one wait, ``Retry-After`` included."""

    def __post_init__(self) -> None:
        if not isinstance(self.max_retries, int) or isinstance(self.max_retries, bool) or self.max_retries < 0:
            raise ValueError(f"max_retries must be an integer >= 0, got {self.max_retries!r}")
        if not self.backoff_base_s >= 0 or not self.backoff_max_s >= 0:
            raise ValueError(
                f"backoff_base_s and backoff_max_s must be >= 0 seconds, got {self.backoff_base_s!r} and "
                f"{self.backoff_max_s!r}"
            )

    def backoff_s(self, retry: int, retry_after: float | None = None, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry ``retry`` (0-based).

        Args:
            retry: 0 before the first retry, 1 before the second, ...
            retry_after: Seconds the server asked to wait, if it did.
            rng: Source of the jitter (the module's generator by default).

        Returns:
            A delay in ``[min(cap, base * 2**retry), cap]``, at least ``min(retry_after, cap)``.

        >>> policy = RetryPolicy(backoff_base_s=1.0, backoff_max_s=5.0)
        >>> 2.0 <= policy.backoff_s(1) <= 2.5, policy.backoff_s(10), policy.backoff_s(0, retry_after=4.0) >= 4.0
        (True, 5.0, True)
        """
        step = self.backoff_base_s * 2.0 ** min(retry, 64)
        delay = min(self.backoff_max_s, step * (1.0 + JITTER * (rng or random).random()))
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.backoff_max_s))
        return delay

    async def call(
        self,
        attempt: Callable[[], Awaitable[T]],
        *,
        on_retry: Callable[[RequestError, int, float], None] | None = None,
        rng: random.Random | None = None,
    ) -> T:
        """Awaits ``attempt()`` until it returns, fails for good, or the retries run out.

        Args:
            attempt: Makes one attempt; raises :class:`RequestError` when it fails. Any other exception is not
                retried and propagates at once.
            on_retry: Called as ``on_retry(error, retry, delay_s)`` before each backoff sleep (``retry`` counts
                from 1), e.g. to count or log retries.
            rng: Source of the jitter.

        Returns:
            What the first successful attempt returned.

        Raises:
            RequestError: The last attempt's error, with ``attempts`` set, when it is not retryable or no retry
                is left.
        """
        retry = 0
        while True:
            try:
                return await attempt()
            except RequestError as error:
                error.attempts = retry + 1
                if not error.retryable or retry >= self.max_retries:
                    raise
                delay = self.backoff_s(retry, error.retry_after, rng)
                retry += 1
                if on_retry is not None:
                    on_retry(error, retry, delay)
                await asyncio.sleep(delay)


def retry_after_s(headers: Mapping[str, str] | None) -> float | None:
    """Seconds an answer asks to wait before the next request (``retry-after-ms`` or ``Retry-After``).

    Only the delay-seconds form is read; an HTTP date counts as absent.

    >>> retry_after_s({"retry-after": "2"}), retry_after_s({"retry-after-ms": "150"}), retry_after_s({})
    (2.0, 0.15, None)
    """
    if not headers:
        return None
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is not None:
            try:
                return max(0.0, float(value) * scale)
            except ValueError:
                continue
    return None


def credentials(*headers: Mapping[str, str] | None) -> tuple[str, ...]:
    """The secrets that request headers carry: the token of each credential header (``Bearer <token>``), or its
    whole value when it has no scheme; longest first, so that a key containing another is replaced whole.

    >>> credentials({"Authorization": "Bearer sk-123", "Accept": "x"}, None, {"api-key": "az-9"})
    ('sk-123', 'az-9')
    """
    found: set[str] = set()
    for mapping in headers:
        for name, value in (mapping or {}).items():
            if name.lower() in CREDENTIAL_HEADERS and value and value.strip():
                scheme, _, token = value.strip().partition(" ")
                found.add(token.strip() or scheme)
    return tuple(sorted(found, key=lambda s: (-len(s), s)))


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each secret replaced by :data:`REDACTED`.

    >>> redact("Incorrect API key provided: sk-123.", ["sk-123"])
    'Incorrect API key provided: <redacted>.'
    """
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return text


def error_detail(body: bytes | str, secrets: Iterable[str] = ()) -> str:
    """What an answer says: its OpenAI-style ``error.message`` (or ``message``, ``detail``), else the start of the
    body; ``secrets`` redacted (:func:`redact`) before it is cut to at most 200 characters, so no part of a secret
    survives the cut. Every text made from a remote body goes through here.

    >>> error_detail(b'{"error": {"message": "model not found", "code": 404}}')
    'model not found'
    >>> error_detail(b'{"error": {"message": "Incorrect API key provided: sk-123"}}', ["sk-123"])
    'Incorrect API key provided: <redacted>'
    """
    secrets = tuple(secrets)
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, Mapping):
        error = data.get("error")
        message = error.get("message") if isinstance(error, Mapping) else error
        for candidate in (message, data.get("message"), data.get("detail")):
            if isinstance(candidate, str):
                return redact(candidate, secrets)[:200]
    return redact(text, secrets)[:200]


def status_error(
    status: int,
    body: bytes | str,
    headers: Mapping[str, str] | None = None,
    secrets: Iterable[str] = (),
) -> RequestError:
    """The :class:`RequestError` of an HTTP error answer (status >= 400), its body quoted by :func:`error_detail`
    with ``secrets`` (the request's :func:`credentials`) redacted.

    HTTP 408 is a ``timeout``, 429 a ``rate_limit``, 5xx a ``server_error`` (all retried), any other 4xx a
    ``client_error`` (not retried). ``Retry-After`` is read from 429 and 503 answers.

    >>> error = status_error(503, b"busy", {"retry-after": "1"})
    >>> error.kind, error.message, error.retryable, error.retry_after
    ('server_error', 'HTTP 503: busy', True, 1.0)
    >>> status_error(422, b"bad").retryable
    False
    """
    if status == 408:
        kind = "timeout"
    elif status == 429:
        kind = "rate_limit"
    elif status >= 500:
        kind = "server_error"
    else:
        kind = "client_error"
    retry_after = retry_after_s(headers) if status in (429, 503) else None
    detail = error_detail(body, secrets)
    return RequestError(kind, f"HTTP {status}: {detail}", status=status, retry_after=retry_after)


def _transport_error(exc: BaseException) -> RequestError:
    return RequestError("connection", f"{type(exc).__name__}: {exc}"[:300])


def _timeout_error(exc: BaseException) -> RequestError:
    detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return RequestError("timeout", f"no answer within the deadline ({detail})"[:300])


# ------------------------------------------------------------------------------------------------ httpx


def httpx_client(timeout_s: float, max_connections: int, headers: Mapping[str, str] | None = None) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` with a ``timeout_s`` deadline per attempt and a pool of ``max_connections`` kept
    alive (so every concurrent request reuses its connection).

    Args:
        timeout_s: Connect, read, write and pool timeout of one attempt, seconds.
        max_connections: Connections open at once.
        headers: Sent with every request (e.g. ``Authorization``).
    """
    import httpx

    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), limits=limits, headers=dict(headers or {}))


async def httpx_request(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    json: Any = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """One HTTP attempt through httpx.

    Args:
        client: The client (its timeout is the attempt's deadline).
        method: ``GET`` or ``POST``.
        url: The URL.
        json: The JSON body, if any.
        headers: Headers of this request only.

    Returns:
        The answer, when its status is below 400.

    Raises:
        RequestError: ``timeout``, ``connection``, or the answer's status (:func:`status_error`).
    """
    import httpx

    try:
        response = await client.request(method, url, json=json, headers=headers)
    except httpx.TimeoutException as exc:
        raise _timeout_error(exc) from exc
    except httpx.TransportError as exc:
        raise _transport_error(exc) from exc
    sent = (client.headers, headers)
    if response.status_code >= 400:
        raise status_error(response.status_code, response.content, response.headers, credentials(*sent))
    return Response(response.status_code, response.content, sent)


# ------------------------------------------------------------------------------------------------ aiohttp


def aiohttp_session(
    timeout_s: float, max_connections: int, headers: Mapping[str, str] | None = None
) -> aiohttp.ClientSession:
    """An ``aiohttp.ClientSession`` with a ``timeout_s`` total deadline per attempt, a pool of ``max_connections``
    and no cookie jar. Make it inside the event loop that will use it.

    Args:
        timeout_s: Deadline of one attempt (connect to last body byte), seconds.
        max_connections: Connections open at once.
        headers: Sent with every request (e.g. ``Authorization``).

    Raises:
        ImportError: aiohttp is not installed (with the install command).
    """
    try:
        import aiohttp
    except ImportError as exc:
        raise ImportError('This client needs aiohttp: pip install "agentrag-verl[judge]" (or aiohttp)') from exc
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=max_connections),
        timeout=aiohttp.ClientTimeout(total=timeout_s),
        headers=dict(headers or {}),
        cookie_jar=aiohttp.DummyCookieJar(),  # API calls are stateless; filtering cookies costs CPU on every call
    )


async def aiohttp_request(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    *,
    data: bytes | str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """One HTTP attempt through aiohttp: :func:`httpx_request` (the same answer, the same errors) with an aiohttp
    ``session`` (its timeout is the attempt's deadline) and ``data``, the body already encoded (e.g.
    ``json.dumps(body)``), in place of the client and ``json``."""
    import aiohttp

    try:
        async with session.request(method, url, data=data, headers=headers) as response:
            body = await response.read()
            status = response.status
            if status >= 400:
                raise status_error(status, body, response.headers, credentials(session.headers, headers))
    except asyncio.TimeoutError as exc:  # aiohttp's deadline errors are TimeoutErrors (some also ClientErrors)
        raise _timeout_error(exc) from exc
    except aiohttp.ClientError as exc:
        raise _transport_error(exc) from exc
    return Response(status, body, (session.headers, headers))
