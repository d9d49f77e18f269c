"""A fake OpenAI-compatible HTTP server for offline tests of LLM clients and agent loops.

:class:`FakeOpenAIServer` speaks enough of the OpenAI REST API for the official ``openai`` client (v1+ API,
``openai.OpenAI`` and ``openai.AsyncOpenAI``), ``httpx`` or any other HTTP client to talk to it as if it were a real
model endpoint. It answers from a script instead of a model, records every request it receives, and can inject
faults (timeouts, rate limits, server errors, malformed bodies, a rejected key quoted back) so tests can exercise
retry and error paths.

It is real HTTP over a loopback socket, bound to ``127.0.0.1`` only (never all interfaces), on an ephemeral port by
default. The server uses only the standard library (:class:`http.server.ThreadingHTTPServer` in a daemon thread).

Endpoints:

* ``POST /v1/chat/completions`` -- ``object: "chat.completion"``; the reply is the assistant message content.
* ``POST /v1/completions`` -- ``object: "text_completion"``; the reply is the choice text.
* ``GET /v1/models`` -- lists the configured model names.

Example::

    import openai
    from agentrag_verl.testing.openai_server import Fault, FakeOpenAIServer

    with FakeOpenAIServer(replies=["yes", Fault.rate_limit(), "no"]) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0)
        out = client.chat.completions.create(model="judge", messages=[{"role": "user", "content": "ok?"}])
        assert out.choices[0].message.content == "yes"
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model="judge", messages=[{"role": "user", "content": "ok?"}])
        assert srv.requests[0].body["messages"][0]["content"] == "ok?"

Scripting replies (the ``replies`` argument):

* ``None`` (default): every completion request is answered with :data:`DEFAULT_REPLY`.
* a ``str`` or a :class:`Fault`: every completion request gets that reply (or fault).
* a list: entries are consumed in order, one per completion request (chat or text completions alike; ``GET
  /v1/models`` consumes nothing). The list does **not** cycle: once exhausted, each further completion request gets
  an HTTP 500 whose error has ``code: "replies_exhausted"``, and the message is appended to
  :attr:`FakeOpenAIServer.errors`. Use a callable to cycle or to answer forever.
* a callable ``(request_json: dict) -> reply``: called once per completion request with the parsed JSON body, so a
  test can answer by looking at the prompt. It may be called from several server threads at once. If it raises, the
  request gets an HTTP 500 and the exception is appended to :attr:`FakeOpenAIServer.errors`.

A reply is a ``str`` (copied into all ``n`` choices), a list of exactly ``n`` strings (one per choice), or a
:class:`Fault`.

Request options honoured: ``n`` (number of choices), ``stop`` (a string or a list of strings: the reply is cut at
the earliest stop string, which is not included, ``finish_reason`` is ``"stop"`` and, on text completions,
``stop_reason`` names the stop string as vLLM does), and ``max_tokens`` /
``max_completion_tokens`` (the reply is cut after that many whitespace-separated tokens, ``finish_reason`` is
``"length"``). ``usage`` counts whitespace-separated tokens: the prompt (all message contents, or the ``prompt``) and
the returned choices. ``stream: true`` is not supported and gets an HTTP 400.

Faults (see :class:`Fault`) can be scripted in ``replies`` or queued up front with :meth:`FakeOpenAIServer.inject`,
e.g. ``srv.inject(Fault.rate_limit(), times=2)`` fails the next two completion requests, then scripted replies
resume. Injected faults are served before the reply script and do not consume script entries, except that an
injected :meth:`Fault.timeout` without its own ``reply`` answers, after its delay, with the next scripted reply.

Authentication: with ``api_key=...`` every request must carry ``Authorization: Bearer <api_key>`` or it gets an
HTTP 401 (``openai.AuthenticationError``); without it, the header is not checked. With ``echo_rejected_key=True``
the 401 quotes the key the request sent, as some gateways do. The server never logs a key, and the
``Authorization`` header is redacted in the recorded requests.

Shutdown is prompt: :meth:`FakeOpenAIServer.stop` wakes requests sleeping in a timeout fault (they are dropped
without an answer) and closes open connections, so it returns within a fraction of a second even while a client is
still waiting.
"""

from __future__ import annotations

import enum
import hmac
import json
import logging
import math
import re
import select
import socket
import socketserver
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeAlias

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_REPLY",
    "FakeOpenAIServer",
    "Fault",
    "FaultKind",
    "RecordedRequest",
    "Reply",
]

logger = logging.getLogger(__name__)

DEFAULT_REPLY = "This is a fake reply."
"""The reply given to every completion request when no ``replies`` are scripted."""

DEFAULT_MODEL = "fake-model"
"""The model name used when a request names none, and the model listed by ``GET /v1/models`` by default."""

HOST = "127.0.0.1"
"""The only address the server binds to."""

_CHAT_PATH = "/v1/chat/completions"
_COMPLETIONS_PATH = "/v1/completions"
_MODELS_PATH = "/v1/models"
_MALFORMED_BODY = b'{"id": "chatcmpl-malformed", "object": "chat.completion", "choices": [{"index": 0, "mess'
_POLL_S = 0.05
_TOKEN_RE = re.compile(r"\S+")
_KEEP: Any = object()


class FaultKind(str, enum.Enum):
    """The kinds of fault the server can inject."""

    TIMEOUT = "timeout"
    """Sleep ``delay`` seconds before answering, so a client with a shorter timeout gives up."""
    RATE_LIMIT = "rate_limit"
    """HTTP 429 with an OpenAI-style error body and ``Retry-After`` / ``retry-after-ms`` headers."""
    SERVER_ERROR = "server_error"
    """HTTP 5xx (500 by default) with an OpenAI-style error body."""
    MALFORMED = "malformed"
    """HTTP 200, ``Content-Type: application/json``, with a body that is not valid JSON."""
    UNAUTHORIZED = "unauthorized"
    """HTTP 401 whose error message quotes the bearer token the request sent, as some gateways do."""


@dataclass(frozen=True)
class Fault:
    """A fault to serve instead of a normal reply.

    Build one with the class methods :meth:`timeout`, :meth:`rate_limit`, :meth:`server_error`, :meth:`malformed`
    and :meth:`unauthorized` rather than by hand.

    Attributes:
        kind: Which fault (a :class:`FaultKind`; its string value is accepted too).
        delay: ``timeout`` only: seconds to wait before answering.
        reply: ``timeout`` only: the text to answer with after the delay. ``None`` means: the next scripted reply
            for an injected fault, an empty string for a fault scripted in ``replies``.
        retry_after: ``rate_limit`` only: seconds to advertise: ``Retry-After`` gets them rounded up to a whole
            number, ``retry-after-ms`` (which the ``openai`` client prefers) gets them in milliseconds.
        status: ``server_error`` only: the HTTP status, 500 to 599.
        message: Error message in the JSON error body (``rate_limit``, ``server_error`` and ``unauthorized``); a
            default if ``None``.
        body: ``malformed`` only: the raw response body; a truncated JSON document if ``None``.
    """

    kind: FaultKind
    delay: float = 60.0
    reply: str | None = None
    retry_after: float = 1.0
    status: int = 500
    message: str | None = None
    body: bytes | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", FaultKind(self.kind))
        if self.delay < 0:
            raise ValueError(f"Fault delay must be >= 0, got {self.delay}")
        if self.retry_after < 0:
            raise ValueError(f"Fault retry_after must be >= 0, got {self.retry_after}")
        if not 500 <= self.status <= 599:
            raise ValueError(f"Fault status must be a 5xx code, got {self.status}")

    @classmethod
    def timeout(cls, delay: float = 60.0, reply: str | None = None) -> Fault:
        """Delays the answer by ``delay`` seconds (default 60, longer than any sensible test timeout).

        The wait ends early, without an answer, when the server stops or the client disconnects.

        Args:
            delay: Seconds to wait before answering.
            reply: Text to answer with after the delay (see the class attributes for ``None``).

        Returns:
            The fault.
        """
        return cls(FaultKind.TIMEOUT, delay=delay, reply=reply)

    @classmethod
    def rate_limit(cls, retry_after: float = 1.0, message: str | None = None) -> Fault:
        """Answers HTTP 429 with ``Retry-After`` headers (``openai.RateLimitError``).

        Args:
            retry_after: Seconds the client should wait before retrying (a small value keeps retrying tests fast).
            message: Error message; a default if ``None``.

        Returns:
            The fault.
        """
        return cls(FaultKind.RATE_LIMIT, retry_after=retry_after, message=message)

    @classmethod
    def server_error(cls, status: int = 500, message: str | None = None) -> Fault:
        """Answers an HTTP 5xx error (``openai.InternalServerError``).

        Args:
            status: The HTTP status, 500 to 599.
            message: Error message; a default if ``None``.

        Returns:
            The fault.
        """
        return cls(FaultKind.SERVER_ERROR, status=status, message=message)

    @classmethod
    def malformed(cls, body: bytes | None = None) -> Fault:
        """Answers HTTP 200 with a JSON content type but a body that does not parse.

        Args:
            body: The raw body; a truncated JSON document if ``None``.

        Returns:
            The fault.
        """
        return cls(FaultKind.MALFORMED, body=body)

    @classmethod
    def unauthorized(cls, message: str | None = None) -> Fault:
        """Answers HTTP 401 ``invalid_api_key`` (``openai.AuthenticationError``) and quotes the request's bearer
        token in the message, as some gateways do: a client must not show the body unredacted.

        ``GET /v1/models`` is not affected (faults apply to completions only), so this scripts an endpoint that
        answers the start-up check and rejects every completion.

        Args:
            message: Error message before the quoted key; a default if ``None``.

        Returns:
            The fault.
        """
        return cls(FaultKind.UNAUTHORIZED, message=message)


Reply: TypeAlias = str | list[str] | Fault
"""One scripted reply: a text for every choice, one text per choice, or a fault."""


@dataclass(frozen=True)
class RecordedRequest:
    """A request the server received.

    Attributes:
        method: HTTP method, e.g. ``"POST"``.
        path: URL path without the query string, e.g. ``"/v1/chat/completions"``.
        body: The parsed JSON body, or ``None`` for a request without a body or with one that is not a JSON object.
        headers: Request headers with lower-case names; ``authorization`` is redacted.
        time: ``time.time()`` when the request was received.
    """

    method: str
    path: str
    body: dict[str, Any] | None
    headers: dict[str, str] = field(default_factory=dict)
    time: float = 0.0


@dataclass
class _Response:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"


class _RepliesExhausted(Exception):
    pass


def _json_response(status: int, payload: Any, headers: dict[str, str] | None = None) -> _Response:
    return _Response(status, json.dumps(payload).encode(), dict(headers or {}))


def _error_response(
    status: int,
    message: str,
    *,
    type_: str,
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> _Response:
    payload = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return _json_response(status, payload, headers)


def _unauthorized(handler: BaseHTTPRequestHandler, message: str | None, *, echo: bool) -> _Response:
    """HTTP 401 ``invalid_api_key``; with ``echo``, the message quotes the bearer token the request sent."""
    message = message or "Incorrect API key provided"
    if echo:
        given = (handler.headers.get("Authorization") or "").strip()
        message += f": {given.removeprefix('Bearer ').strip() or '(none)'}"
    return _error_response(401, message + ".", type_="invalid_request_error", code="invalid_api_key")


def _count_tokens(text: str) -> int:
    return len(text.split())


def _content_text(content: Any) -> str:
    """Text of a chat message ``content``: a string or a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def _prompt_tokens(path: str, body: Mapping[str, Any]) -> int:
    if path == _CHAT_PATH:
        return sum(_count_tokens(_content_text(m.get("content"))) for m in body["messages"] if isinstance(m, dict))
    prompt = body["prompt"]
    if isinstance(prompt, str):
        return _count_tokens(prompt)
    if isinstance(prompt, list) and all(isinstance(p, int) for p in prompt):
        return len(prompt)  # a single prompt given as token ids
    total = 0
    for item in prompt:
        total += _count_tokens(item) if isinstance(item, str) else len(item) if isinstance(item, list) else 0
    return total


def _apply_limits(text: str, stop: Any, max_tokens: Any) -> tuple[str, str]:
    """Cuts ``text`` at the first stop string and after ``max_tokens`` tokens; returns ``(text, finish_reason)``."""
    stops = [stop] if isinstance(stop, str) else [s for s in stop if isinstance(s, str)] if stop else []
    cuts = [text.find(s) for s in stops if s and s in text]
    if cuts:
        text = text[: min(cuts)]
    if isinstance(max_tokens, int) and not isinstance(max_tokens, bool):
        tokens = list(_TOKEN_RE.finditer(text))
        if len(tokens) > max_tokens:
            return (text[: tokens[max_tokens - 1].end()] if max_tokens > 0 else ""), "length"
    return text, "stop"


def _matched_stop(text: str, stop: Any) -> str | None:
    """The stop string that cuts ``text`` first (what vLLM reports as ``stop_reason``), or ``None``."""
    stops = [stop] if isinstance(stop, str) else [s for s in stop if isinstance(s, str)] if stop else []
    found = [(text.find(s), s) for s in stops if s and s in text]
    return min(found)[1] if found else None


def _validate_request(path: str, body: Mapping[str, Any]) -> _Response | None:
    """Returns a 400 response for a request the fake cannot answer, else ``None``."""

    def bad(message: str, param: str | None) -> _Response:
        return _error_response(400, message, type_="invalid_request_error", param=param)

    if path == _CHAT_PATH:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return bad("'messages' must be a non-empty list.", "messages")
    elif not isinstance(body.get("prompt"), str | list):
        return bad("'prompt' must be a string or a list.", "prompt")
    n = body.get("n", 1)
    if n is None:
        n = 1
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 128:
        return bad("'n' must be an integer from 1 to 128.", "n")
    stop = body.get("stop")
    if stop is not None and not isinstance(stop, str | list):
        return bad("'stop' must be a string or a list of strings.", "stop")
    if body.get("stream"):
        return bad("FakeOpenAIServer does not support streaming ('stream': true).", "stream")
    return None


def _check_reply(reply: Any) -> None:
    if isinstance(reply, str | Fault):
        return
    if isinstance(reply, list) and reply and all(isinstance(r, str) for r in reply):
        return
    raise TypeError(f"a reply must be a str, a non-empty list of str or a Fault, got {type(reply).__name__}: {reply!r}")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 64

    def __init__(self, owner: FakeOpenAIServer, port: int) -> None:
        self.owner = owner
        super().__init__((HOST, port), _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind does a reverse DNS lookup (socket.getfqdn), which can stall in sandboxes.
        socketserver.TCPServer.server_bind(self)
        self.server_name = HOST
        self.server_port = self.server_address[1]

    def handle_error(self, request: Any, client_address: Any) -> None:
        logger.debug("FakeOpenAIServer: error while handling a request from %s", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FakeOpenAI/1.0"
    sys_version = ""
    timeout = 120  # idle keep-alive connections are closed after this many seconds
    disable_nagle_algorithm = True
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.server.owner._track_connection(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._track_connection(self.connection, add=False)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def log_message(self, format: str, *args: Any) -> None:
        # Only the request line and status are logged, never headers (so never the API key).
        logger.debug("FakeOpenAIServer %s - %s", self.address_string(), format % args)

    def _client_gone(self) -> bool:
        """True when the client closed its end of the connection."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def wait(self, delay: float) -> bool:
        """Sleeps up to ``delay`` seconds; False if the server stopped or the client left meanwhile."""
        stopping = self.server.owner._stopping
        deadline = time.monotonic() + delay
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True
            if stopping.wait(min(_POLL_S, remaining)) or self._client_gone():
                return False

    def _serve(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        response = self.server.owner._handle(self, method, raw)
        if response is None:  # dropped (server stopping or client gone during a timeout fault)
            self.close_connection = True
            return
        try:
            self.send_response(response.status)
            self.send_header("Content-Type", response.content_type)
            self.send_header("Content-Length", str(len(response.body)))
            self.send_header("x-request-id", f"req_{uuid.uuid4().hex[:24]}")
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(response.body)
        except (ConnectionError, OSError):
            self.close_connection = True


class FakeOpenAIServer:
    """A scripted OpenAI-compatible HTTP server on ``127.0.0.1`` (see the module docstring).

    Use it as a context manager, or call :meth:`start` and :meth:`stop`::

        with FakeOpenAIServer(replies=lambda req: "yes" if "capital" in str(req) else "no") as srv:
            client = openai.OpenAI(base_url=srv.base_url, api_key="x")

    All public methods are thread-safe.

    Args:
        replies: The reply script: ``None`` (always :data:`DEFAULT_REPLY`), a ``str`` or :class:`Fault` (always
            that), a sequence of replies consumed in order (HTTP 500 ``replies_exhausted`` once used up), or a
            callable ``(request_json) -> reply``. A reply is a ``str``, a list of ``n`` strings, or a Fault.
        api_key: If given, requests must send ``Authorization: Bearer <api_key>``; others get HTTP 401.
        port: TCP port on ``127.0.0.1``; ``0`` (default) picks a free ephemeral port.
        models: Model names listed by ``GET /v1/models``; defaults to ``[DEFAULT_MODEL]``.
        echo_rejected_key: With ``api_key``: the 401 quotes the key the request sent (as some gateways do).

    Raises:
        TypeError: If ``replies`` or one of its entries has an unsupported type.
    """

    def __init__(
        self,
        replies: str | Fault | Sequence[Reply] | Callable[[dict[str, Any]], Reply] | None = None,
        *,
        api_key: str | None = None,
        port: int = 0,
        models: Sequence[str] | None = None,
        echo_rejected_key: bool = False,
    ) -> None:
        self._lock = threading.Lock()
        self._conn_cond = threading.Condition(self._lock)
        self._connections: set[socket.socket] = set()
        self._requests: list[RecordedRequest] = []
        self._errors: list[str] = []
        self._faults: deque[Fault] = deque()
        self._api_key = api_key
        self._echo_rejected_key = echo_rejected_key
        self._port = port
        self._models = list(models) if models is not None else [DEFAULT_MODEL]
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._set_replies(replies)

    def __repr__(self) -> str:  # never shows the API key
        state = self.base_url if self._httpd is not None else "stopped"
        return f"FakeOpenAIServer({state}, auth={'on' if self._api_key else 'off'})"

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> FakeOpenAIServer:
        """Binds the socket and serves in a daemon thread.

        Returns:
            ``self``, so ``srv = FakeOpenAIServer().start()`` works.

        Raises:
            RuntimeError: If the server is already running.
        """
        with self._lock:
            if self._httpd is not None:
                raise RuntimeError("FakeOpenAIServer is already running")
            self._stopping = threading.Event()
            httpd = _HTTPServer(self, self._port)
            self._httpd = httpd
            self._thread = threading.Thread(
                target=httpd.serve_forever, kwargs={"poll_interval": _POLL_S}, name="FakeOpenAIServer", daemon=True
            )
            self._thread.start()
        logger.debug("FakeOpenAIServer listening on %s", self.base_url)
        return self

    def stop(self, timeout: float = 2.0) -> None:
        """Stops serving and closes the socket and all open connections. Does nothing if not running.

        Requests waiting in a timeout fault are woken and dropped without an answer, so this returns promptly
        even while a client is still waiting.

        Args:
            timeout: Seconds to wait for the serving thread and for request handlers to finish.
        """
        with self._lock:
            httpd, thread = self._httpd, self._thread
            if httpd is None:
                return
            self._httpd = self._thread = None
            self._stopping.set()
        deadline = time.monotonic() + timeout
        httpd.shutdown()
        httpd.server_close()
        if thread is not None:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._conn_cond:
            for conn in self._connections:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self._conn_cond.wait_for(lambda: not self._connections, max(0.0, deadline - time.monotonic()))
            if self._connections:
                logger.warning("FakeOpenAIServer: %d connection(s) still open after stop", len(self._connections))

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        """Whether the server is serving."""
        return self._httpd is not None

    @property
    def port(self) -> int:
        """The bound TCP port.

        Raises:
            RuntimeError: If the server is not running.
        """
        httpd = self._httpd
        if httpd is None:
            raise RuntimeError("FakeOpenAIServer is not running; call start() or use it as a context manager")
        return httpd.server_address[1]

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no path)."""
        return f"http://{HOST}:{self.port}"

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``, the ``base_url`` for ``openai.OpenAI``."""
        return f"{self.url}/v1"

    # ------------------------------------------------------------------ scripting and inspection

    def inject(self, fault: Fault, times: int = 1) -> None:
        """Queues ``fault`` for the next ``times`` completion requests, ahead of the reply script.

        Args:
            fault: The fault to serve.
            times: How many requests get it.

        Raises:
            TypeError: If ``fault`` is not a :class:`Fault`.
            ValueError: If ``times`` is negative.
        """
        if not isinstance(fault, Fault):
            raise TypeError(f"inject() takes a Fault, got {type(fault).__name__}")
        if times < 0:
            raise ValueError(f"times must be >= 0, got {times}")
        with self._lock:
            self._faults.extend([fault] * times)

    @property
    def pending_faults(self) -> int:
        """How many injected faults are still queued."""
        with self._lock:
            return len(self._faults)

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received so far, in arrival order (including rejected ones)."""
        with self._lock:
            return list(self._requests)

    @property
    def errors(self) -> list[str]:
        """Server-side errors so far: exhausted scripts, exceptions raised by a replies callable, bad replies."""
        with self._lock:
            return list(self._errors)

    def reset(self, replies: Any = _KEEP) -> None:
        """Forgets recorded requests and errors, drops queued faults and rewinds the reply script.

        Args:
            replies: A new reply script (same forms as the constructor); the current one is kept if omitted.

        Raises:
            TypeError: If ``replies`` has an unsupported type.
        """
        with self._lock:
            self._requests.clear()
            self._errors.clear()
            self._faults.clear()
        self._set_replies(self._replies_arg if replies is _KEEP else replies)

    # ------------------------------------------------------------------ internals

    def _set_replies(self, replies: Any) -> None:
        script: list[Reply] | None = None
        if replies is None or isinstance(replies, str | Fault):
            pass
        elif callable(replies):
            pass
        elif isinstance(replies, Sequence):
            script = list(replies)
            for reply in script:
                _check_reply(reply)
        else:
            raise TypeError(f"replies must be None, a str, a Fault, a sequence or a callable, got {type(replies)}")
        with self._lock:
            self._replies_arg = replies
            self._script = script
            self._script_pos = 0

    def _track_connection(self, conn: socket.socket, *, add: bool) -> None:
        with self._conn_cond:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)
                self._conn_cond.notify_all()

    def _error(self, message: str) -> None:
        logger.warning("FakeOpenAIServer: %s", message)
        with self._lock:
            self._errors.append(message)

    def _draw_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            replies, script = self._replies_arg, self._script
            if script is not None:
                if self._script_pos >= len(script):
                    raise _RepliesExhausted(
                        f"scripted replies exhausted: all {len(script)} were used, request #{self._script_pos + 1}"
                    )
                self._script_pos += 1
                return script[self._script_pos - 1]
        if replies is None:
            return DEFAULT_REPLY
        if isinstance(replies, str | Fault):
            return replies
        reply = replies(body)
        _check_reply(reply)
        return reply

    def _handle(self, handler: _Handler, method: str, raw: bytes) -> _Response | None:
        path = handler.path.split("?", 1)[0].rstrip("/") or "/"
        body: dict[str, Any] | None = None
        if raw:
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None
            body = parsed if isinstance(parsed, dict) else None
        headers = {k.lower(): v for k, v in handler.headers.items()}
        if "authorization" in headers:
            headers["authorization"] = "<redacted>"
        with self._lock:
            self._requests.append(RecordedRequest(method, path, body, headers, time.time()))

        if self._api_key is not None:
            expected = f"Bearer {self._api_key}".encode()
            given = (handler.headers.get("Authorization") or "").strip().encode()
            if not hmac.compare_digest(given, expected):
                return _unauthorized(handler, None, echo=self._echo_rejected_key)

        if path == _MODELS_PATH:
            if method != "GET":
                return _error_response(405, f"Method {method} not allowed on {path}.", type_="invalid_request_error")
            created = int(time.time())
            data = [{"id": m, "object": "model", "created": created, "owned_by": "fake-openai"} for m in self._models]
            return _json_response(200, {"object": "list", "data": data})
        if path not in (_CHAT_PATH, _COMPLETIONS_PATH):
            return _error_response(404, f"Unknown path {path}.", type_="invalid_request_error", code="unknown_url")
        if method != "POST":
            return _error_response(405, f"Method {method} not allowed on {path}.", type_="invalid_request_error")
        if body is None:
            return _error_response(400, "The request body must be a JSON object.", type_="invalid_request_error")
        invalid = _validate_request(path, body)
        if invalid is not None:
            return invalid
        try:
            return self._complete(handler, path, body)
        except Exception as exc:  # a bug here must reach the test as a 500, not kill the handler thread
            message = f"internal error: {type(exc).__name__}: {exc}"
            self._error(message)
            return _error_response(500, message, type_="server_error", code="fake_server_bug")

    def _complete(self, handler: _Handler, path: str, body: dict[str, Any]) -> _Response | None:
        with self._lock:
            injected = self._faults.popleft() if self._faults else None
        if injected is not None:
            if injected.kind is not FaultKind.TIMEOUT:
                return self._fault_response(injected, handler)
            if not handler.wait(injected.delay):
                return None
            if injected.reply is not None:
                return self._success(path, body, injected.reply)
        try:
            reply = self._draw_reply(body)
        except _RepliesExhausted as exc:
            self._error(str(exc))
            return _error_response(500, str(exc), type_="server_error", code="replies_exhausted")
        except Exception as exc:
            message = f"replies callable raised {type(exc).__name__}: {exc}"
            self._error(message)
            return _error_response(500, message, type_="server_error", code="replies_callable_error")
        if isinstance(reply, Fault):
            if reply.kind is not FaultKind.TIMEOUT:
                return self._fault_response(reply, handler)
            if not handler.wait(reply.delay):
                return None
            return self._success(path, body, reply.reply or "")
        return self._success(path, body, reply)

    def _fault_response(self, fault: Fault, handler: _Handler) -> _Response:
        if fault.kind is FaultKind.RATE_LIMIT:
            message = fault.message or "Rate limit reached for requests (injected by FakeOpenAIServer)."
            return _error_response(
                429,
                message,
                type_="requests",
                code="rate_limit_exceeded",
                headers={
                    "Retry-After": str(math.ceil(fault.retry_after)),
                    "retry-after-ms": str(round(fault.retry_after * 1000)),
                },
            )
        if fault.kind is FaultKind.SERVER_ERROR:
            message = fault.message or "The server had an error while processing your request (injected)."
            return _error_response(fault.status, message, type_="server_error")
        if fault.kind is FaultKind.MALFORMED:
            return _Response(200, _MALFORMED_BODY if fault.body is None else fault.body)
        if fault.kind is FaultKind.UNAUTHORIZED:
            return _unauthorized(handler, fault.message, echo=True)
        raise AssertionError(f"unhandled fault kind {fault.kind}")  # timeouts are handled by the caller

    def _success(self, path: str, body: dict[str, Any], reply: str | list[str]) -> _Response:
        n = body.get("n") or 1
        texts = [reply] * n if isinstance(reply, str) else list(reply)
        if len(texts) != n:
            message = f"reply has {len(texts)} choices but the request asked for n={n}"
            self._error(message)
            return _error_response(500, message, type_="server_error", code="reply_choice_count")
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        limited = [_apply_limits(text, body.get("stop"), max_tokens) for text in texts]
        prompt_tokens = _prompt_tokens(path, body)
        completion_tokens = sum(_count_tokens(text) for text, _ in limited)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        model = body.get("model") if isinstance(body.get("model"), str) else self._models[0] if self._models else ""
        if path == _CHAT_PATH:
            choices: list[dict[str, Any]] = [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": text, "refusal": None},
                    "logprobs": None,
                    "finish_reason": finish,
                }
                for i, (text, finish) in enumerate(limited)
            ]
            kind, prefix = "chat.completion", "chatcmpl"
        else:
            choices = [
                {
                    "index": i,
                    "text": text,
                    "logprobs": None,
                    "finish_reason": finish,
                    # as vLLM: the stop string that ended the completion (not included in the text), else None
                    "stop_reason": _matched_stop(texts[i], body.get("stop")) if finish == "stop" else None,
                }
                for i, (text, finish) in enumerate(limited)
            ]
            kind, prefix = "text_completion", "cmpl"
        payload = {
            "id": f"{prefix}-{uuid.uuid4().hex[:24]}",
            "object": kind,
            "created": int(time.time()),
            "model": model,
            "system_fingerprint": "fp_fake",
            "choices": choices,
            "usage": usage,
        }
        return _json_response(200, payload)
