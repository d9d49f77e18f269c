"""The POST endpoints answered by the connection itself, without ASGI.

Every rollout step is one ``POST /retrieve``. At 64 closed-loop clients each batch is followed by a gap in which the
event loop writes 64 answers and reads 64 new requests while the encoder waits, so the loop's CPU per request is
paid in that gap (on a GPU, where a batch takes a few milliseconds, it is most of the cycle). Through uvicorn's ASGI
request cycle, the app's middleware and :class:`~retriever_server.app.PostEndpoints`, a request took 44 µs of server
CPU here; answered by the connection, 29 µs (``benchmarks/retriever_http.py``; figures in ``docs/retriever.md``).

:class:`FastPost` is mixed into uvicorn's httptools protocol (:func:`retriever_server.http_guard.guarded_protocol`).
When a request head is complete it takes the request if all of these hold, and otherwise hands it to uvicorn as
before:

- ``POST`` to exactly an endpoint's path (``/retrieve``, ``/encode``; no query string, no percent-escapes), no
  ``Upgrade`` and no ``Expect: 100-continue``;
- the head within ``max_headers`` and ``max_header_bytes`` (uvicorn's path answers 431 with the app's rule);
- no earlier request on the connection still unanswered (a pipelined request queues in uvicorn as before);
- uvicorn runs with no concurrency limit and no root path (the server's own settings).

A taken request is answered with the same endpoint function that ``PostEndpoints`` calls, under the same rules: a
``Content-Length`` over ``max_body_bytes`` is answered 413 at once and a body that grows past it is answered 413 as
soon as it does (the rest is read and dropped by the connection guard); a
:class:`~retriever_server.protocol.RequestError` becomes its JSON error; any other exception is logged and answered
500 as the FastAPI app does, and the connection is then closed (uvicorn closes it after an application fault too; here
the answer says ``connection: close``); a client that went away gets nothing. The answer carries the headers uvicorn
would write (its ``server`` and ``date`` headers, ``content-type``, ``content-length``, ``connection: close`` when the
connection ends) and leaves in one socket write. uvicorn's access log line is written when the access log is on, and the
connection then continues through uvicorn's own bookkeeping (keep-alive timer, pipelined requests, graceful
shutdown waits for the request's task).

The request stands in uvicorn's ``cycle`` slot with the attributes uvicorn and the connection guard read
(``more_body``, ``response_complete``, ``disconnected``, ``keep_alive``, ``scope``, ``message_event``).
``tests/retriever_server/test_fast_post.py`` compares its answers with the ASGI path's, byte for byte, against the
installed uvicorn, and ``tests/retriever_server/test_hostile.py`` runs its hostile traffic on both paths.

The path is on under ``serve`` unless ``--no-fast-post`` (``ServerConfig.fast_post``) turns it off, and it turns
itself off, with one WARNING at start-up, on a uvicorn outside :data:`TESTED_UVICORN` or one that lacks a name it
uses (:func:`unavailable`); every request then takes the ASGI path, as under h11 or Ray Serve. The uvicorn
internals it relies on, and how to check a new uvicorn, are listed in ``docs/retriever.md`` ("uvicorn internals").
"""

from __future__ import annotations

import asyncio
import re
import types
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import uvicorn
from uvicorn.protocols import utils as uvicorn_utils
from uvicorn.protocols.http import httptools_impl

from .app import ServerConfig, check_declared_length, error_json, head_error, internal_error
from .protocol import RequestError, body_too_large

Endpoint = Callable[[bytes, "str | None"], Awaitable[bytes]]
"""``async (body, content_type) -> response body``: what ``create_app`` puts in ``app.state.post_endpoints``."""

TESTED_UVICORN = ((0, 54), (0, 55))
"""The uvicorn versions this module was tested against: from the first (included) to the second (excluded), the
range ``pyproject.toml`` pins for the ``serve`` extra. On another version :func:`unavailable` says so and the POST
endpoints take the ASGI path. How to check a new uvicorn: ``docs/retriever.md`` ("uvicorn internals")."""

STATUS_LINE: Mapping[int, bytes] | None = getattr(httptools_impl, "STATUS_LINE", None)
"""uvicorn's status lines by code (``b"HTTP/1.1 200 OK\\r\\n"``)."""
_get_client_addr: Callable[[Any], str] | None = getattr(uvicorn_utils, "get_client_addr", None)

REQUIRED_METHODS = (
    "on_message_begin",
    "on_url",
    "on_header",
    "on_headers_complete",
    "on_body",
    "on_message_complete",
    "on_response_complete",
    "connection_lost",
    "shutdown",
)
"""``HttpToolsProtocol`` methods :class:`FastPost` overrides, calls, or relies on to fill and read the request state."""
REQUIRED_NAMES = (
    # the connection's state (HttpToolsProtocol attributes)
    "cycle",
    "parser",
    "url",
    "headers",
    "scope",
    "transport",
    "loop",
    "tasks",
    "server_state",
    "expect_100_continue",
    "limit_concurrency",
    "root_path",
    "access_log",
    "access_logger",
    "default_headers",
    # what uvicorn reads or sets on the request in its ``cycle`` slot (RequestResponseCycle attributes)
    "response_complete",
    "disconnected",
    "keep_alive",
    "more_body",
    "message_event",
)
"""Attribute names :class:`FastPost` reads or writes on the connection and its ``cycle``, each of which
``HttpToolsProtocol``'s code must still name."""


def uvicorn_version() -> tuple[int, int] | None:
    """The running uvicorn's ``(major, minor)``, or ``None`` when its version string does not start so."""
    match = re.match(r"(\d+)\.(\d+)", str(getattr(uvicorn, "__version__", "")))
    return (int(match[1]), int(match[2])) if match else None


def tested_range() -> str:
    """:data:`TESTED_UVICORN` as a requirement specifier (``>=0.54,<0.55``)."""
    (a, b), (c, d) = TESTED_UVICORN
    return f">={a}.{b},<{c}.{d}"


def unavailable() -> str | None:
    """Why the connections must not answer the POST endpoints with the running uvicorn, or ``None`` when they may: its
    version is outside :data:`TESTED_UVICORN`, or something :class:`FastPost` uses is gone (:data:`STATUS_LINE`,
    ``get_client_addr``, a method of :data:`REQUIRED_METHODS`, a name of :data:`REQUIRED_NAMES`).

    The names are looked up in the code of ``HttpToolsProtocol``'s methods (every attribute a method reads or sets is
    named there), so a rename in uvicorn shows here, at start-up, instead of failing every request.
    """
    version = uvicorn_version()
    if version is None or not TESTED_UVICORN[0] <= version < TESTED_UVICORN[1]:
        return (
            f"uvicorn {getattr(uvicorn, '__version__', '?')} is not a version the fast path was tested with "
            f"(uvicorn{tested_range()})"
        )
    protocol = getattr(httptools_impl, "HttpToolsProtocol", None)
    missing = [
        name for name, value in (("STATUS_LINE", STATUS_LINE), ("get_client_addr", _get_client_addr)) if not value
    ]
    if protocol is None:
        missing.append("HttpToolsProtocol")
    else:
        missing += [
            f"HttpToolsProtocol.{name}" for name in REQUIRED_METHODS if not callable(getattr(protocol, name, None))
        ]
        used = _names_in_code(protocol)
        missing += [f"HttpToolsProtocol's {name}" for name in REQUIRED_NAMES if name not in used]
    if missing:
        return f"uvicorn {uvicorn.__version__} lacks {', '.join(missing)}, which the fast path uses"
    return None


def _names_in_code(cls: type) -> set[str]:
    """Every attribute and global name the methods of ``cls`` and its uvicorn base classes name."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("uvicorn."):
            continue
        for value in vars(klass).values():
            code = getattr(value, "__code__", None)
            stack = [code] if isinstance(code, types.CodeType) else []
            while stack:
                code = stack.pop()
                names.update(code.co_names)
                stack.extend(const for const in code.co_consts if isinstance(const, types.CodeType))
    return names


class _Request:
    """A request taken by :class:`FastPost`, in uvicorn's ``cycle`` slot (module docstring)."""

    __slots__ = (
        "scope",
        "endpoint",
        "keep_alive",
        "content_type",
        "chunks",
        "size",
        "more_body",
        "response_complete",
        "disconnected",
    )

    def __init__(self, scope: dict[str, Any], endpoint: Endpoint, keep_alive: bool, content_type: str | None):
        self.scope = scope
        self.endpoint = endpoint
        self.keep_alive = keep_alive
        self.content_type = content_type
        self.chunks: list[bytes] = []
        self.size = 0
        self.more_body = True
        self.response_complete = False
        self.disconnected = False

    @property
    def message_event(self) -> _Request:
        return self  # uvicorn sets the cycle's event when the connection is lost; nothing waits on it here

    def set(self) -> None:
        pass


class FastPost:
    """Mixed into uvicorn's ``HttpToolsProtocol``: answer the POST endpoints on the connection (module docstring)."""

    server_config: ServerConfig  # set on the class built by guarded_protocol
    post_endpoints: Mapping[bytes, Endpoint]  # the app's endpoints by path, set there too

    # uvicorn's per-connection state used here (HttpToolsProtocol)
    cycle: Any
    parser: Any
    url: bytes
    headers: list[tuple[bytes, bytes]]
    scope: dict[str, Any]
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    tasks: set[asyncio.Task]
    server_state: Any
    expect_100_continue: bool
    limit_concurrency: int | None
    root_path: str
    access_log: bool
    access_logger: Any
    on_response_complete: Callable[[], None]

    _taken: _Request | None = None

    # -- httptools parser callbacks ----------------------------------------------------------------------------------
    def on_headers_complete(self) -> None:
        request = self._take()
        self._taken = request
        if request is None:
            super().on_headers_complete()  # type: ignore[misc]
            return
        self.cycle = request
        try:
            check_declared_length(_header(self.headers, b"content-length"), self.server_config.max_body_bytes)
        except RequestError as error:
            self._answer(request, error.status, error_json(error))

    def on_body(self, body: bytes) -> None:
        request = self._taken
        if request is None:
            super().on_body(body)  # type: ignore[misc]
            return
        if request.response_complete:  # answered early (413): the rest is dropped
            return
        request.size += len(body)
        limit = self.server_config.max_body_bytes
        if request.size > limit:
            request.chunks.clear()
            self._answer(request, 413, error_json(body_too_large(f"more than {limit}", limit)))
            return
        request.chunks.append(body)

    def on_message_complete(self) -> None:
        request = self._taken
        if request is None:
            super().on_message_complete()  # type: ignore[misc]
            return
        self._taken = None
        request.more_body = False
        if request.response_complete:
            return
        body = b"".join(request.chunks)
        request.chunks.clear()
        task = self.loop.create_task(self._serve(request, body))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

    # -- serving -----------------------------------------------------------------------------------------------------
    def _take(self) -> _Request | None:
        """The request whose head just completed, if this path serves it (module docstring), else ``None``."""
        endpoint = self.post_endpoints.get(self.url)
        if endpoint is None:
            return None
        parser = self.parser
        cycle = self.cycle
        config = self.server_config
        if (
            parser.get_method() != b"POST"
            or self.expect_100_continue
            or parser.should_upgrade()
            or (cycle is not None and not cycle.response_complete)
            or self.limit_concurrency is not None
            or self.root_path
            or head_error(self.headers, len(self.url), config.max_headers, config.max_header_bytes) is not None
        ):
            return None
        http_version = parser.get_http_version()
        scope = self.scope
        scope["method"] = "POST"
        scope["path"] = self.url.decode("ascii")
        scope["raw_path"] = self.url
        scope["query_string"] = b""
        if http_version != "1.1":
            scope["http_version"] = http_version
        content_type = _header(self.headers, b"content-type")
        return _Request(
            scope,
            endpoint,
            keep_alive=http_version != "1.0" and parser.should_keep_alive(),
            content_type=content_type.decode("latin-1") if content_type is not None else None,
        )

    async def _serve(self, request: _Request, body: bytes) -> None:
        try:
            status, answer = 200, await request.endpoint(body, request.content_type)
        except RequestError as error:
            status, answer = error.status, error_json(error)
        except Exception as exc:
            status, answer = 500, error_json(internal_error("POST", request.scope["path"], exc))
            request.keep_alive = False  # as uvicorn closes the connection after an application's fault
        self._answer(request, status, answer)

    def _answer(self, request: _Request, status: int, body: bytes) -> None:
        """Write the answer in one socket write and finish the request as uvicorn's cycle does."""
        if request.disconnected or request.response_complete:
            return
        request.response_complete = True
        head = [STATUS_LINE[status]]  # type: ignore[index]  # uvicorn's own status lines (checked by unavailable)
        for name, value in self.server_state.default_headers:
            head += (name, b": ", value, b"\r\n")
        head.append(b"content-type: application/json\r\ncontent-length: %d\r\n" % len(body))
        if not request.keep_alive:
            head.append(b"connection: close\r\n")
        head.append(b"\r\n")
        self.transport.writelines((b"".join(head), body))
        if self.access_log:
            scope = request.scope
            self.access_logger.info(
                '%s - "%s %s HTTP/%s" %d',
                _get_client_addr(scope),  # type: ignore[misc]
                "POST",
                scope["path"],
                scope["http_version"],
                status,
            )
        if not request.keep_alive:
            self.transport.close()
        self.on_response_complete()


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for key, value in headers:
        if key == name:
            return value
    return None
