"""Connection limits for the uvicorn server: request-head size, read timeouts, and one quiet log line per bad client.

uvicorn parses HTTP (httptools when installed, else h11) but bounds little of what a client sends: httptools
accepts request heads of any size, a connection that sends nothing (or a header a byte at a time) is held forever,
and a client that vanishes mid-request is logged as an application error with tracebacks. A retriever bound to
``0.0.0.0`` on a cluster meets all of that. :func:`guarded_protocol` returns uvicorn's own HTTP protocol class
with these rules added, and :func:`uvicorn_config` builds the server settings around it:

==========================  ==============================================================================
what                        rule (``ServerConfig`` field)
==========================  ==============================================================================
incomplete request head     at most ``max_header_bytes``; more → ``431`` and the connection is closed
complete head, header count at most ``max_header_bytes`` / ``max_headers``, checked by the app
                            (:class:`retriever_server.app.RequestHeadLimit`) → ``431``
time to send the head       ``header_timeout_s`` from the connection's start (or the next request's first
                            byte on a kept-alive connection); then the connection is closed
gap between body reads      ``body_timeout_s`` without a body byte (while the server is ready to read)
                            closes the connection
whole body                  ``body_deadline_s`` from the complete head (time the server stopped reading
                            not counted); then the connection is closed, however the bytes were paced
open connections            at most ``max_connections`` (fitted under the process's open-file limit); one
                            more is answered ``503`` and closed, with a WARNING (at most one per 10 s)
body size                   the app stops reading at ``max_body_bytes`` and answers ``413``; the
                            connection is closed once the client has sent 1 MiB more than that
idle kept-alive connection  ``keep_alive_timeout_s`` (uvicorn's own timer)
==========================  ==============================================================================

A request line without an HTTP version (``GET /health``, HTTP/0.9's form) is malformed: ``400``, as any request
the parser rejects.

Logging: a malformed request (uvicorn answers ``400``), a closed-on-timeout or over-size connection, and a client
that disconnects before its response each give one INFO line on ``retriever_server.http``, never a traceback;
a connection that never sent a byte is closed silently (DEBUG).

Decisions:

- Subclass uvicorn's protocol instead of parsing HTTP a second time in front of it: the parser stays uvicorn's (and
  fast), and the rules only need the connection state uvicorn keeps (``cycle``: the request in progress, its
  ``more_body`` / ``response_complete``; ``flow.read_paused``). Both uvicorn implementations keep these names, and
  ``tests/retriever_server/test_hostile.py`` runs the rules on both parsers, so a uvicorn that renamed one fails
  there. ``docs/retriever.md`` ("uvicorn internals") lists every uvicorn internal used here and in
  :mod:`retriever_server.fast_post`, and how to check a new uvicorn; ``pyproject.toml`` pins the tested versions.
- The head budget is counted in what arrives while a head is incomplete, checked after each read, so the memory
  a client can make the parser hold is ``max_header_bytes`` plus one socket read (:data:`READ_BYTES`).
- The body gap timer pauses while uvicorn itself has stopped reading (flow control: the app has not consumed the
  previous 64 KiB), so a busy server never blames the client.
- The gap timer alone let a body sent a byte every 19 s last for ever: the body deadline bounds a request as a whole.
  60 s is 32 MiB (``max_body_bytes``) at 0.55 MB/s, an order below any link between a trainer and its retriever.
- The connection cap is counted in uvicorn's own set of open connections. A connection over it is answered ``503``
  (JSON, ``retry-after: 1``, ``connection: close``; ``/health`` included: the refusal is explicit), its sending side
  is shut and what the client sends is read and dropped for up to a second so that it can read the answer, unless
  more than :data:`REFUSED_LINGER` refused connections are lingering already (then it is closed at once). Before,
  300 slow bodies under ``ulimit -n 256`` made the process fail ``accept`` silently, ``/health`` included, for 40 s.
  The open-file limit is raised to fit ``max_connections`` + :data:`FD_RESERVE` where the hard limit allows, else the
  cap is lowered to fit it, with a WARNING saying so.
- After an early answer (``413``) the rest of the body is read and dropped, up to 1 MiB, so that a client that
  sends a little too much still reads the ``413``; past that the connection is closed.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import math
import socket
import time
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from ._deps import require
from .app import ServerConfig

logger = logging.getLogger("retriever_server.http")

DRAIN_BYTES = 1 << 20
"""Body bytes read and dropped after the app answered early (``413``) before the connection is closed."""
FD_RESERVE = 64
"""Open files kept beside ``max_connections``: the process's own (a serving process holds about 20: the index, the
passage store, the listening socket, epoll, pipes) and the refused connections lingering to read their 503."""
REFUSED_LINGER = 32
"""Refused connections that may linger (reading and dropping for up to :data:`REFUSED_LINGER_S`) at once; more are
closed without a wait."""
REFUSED_LINGER_S = 1.0
"""How long a refused connection is read and dropped so that its client can read the 503 before the close."""
REFUSAL_LOG_EVERY_S = 10.0
"""The connection-limit WARNING is written at most once per this many seconds, with the count refused meanwhile."""
READ_BYTES = 256 << 10
"""The most one socket read delivers (asyncio's and uvloop's read size): what a head check can be late by."""

_UVICORN_INVALID = "Invalid HTTP request received."
_UVICORN_UPGRADE = "Unsupported upgrade request."
_UVICORN_NO_WS = "No supported WebSocket library detected"


def base_protocol() -> type[asyncio.Protocol]:
    """uvicorn's HTTP/1.1 protocol class: httptools' when installed (what uvicorn's ``auto`` picks), else h11's."""
    require("uvicorn", "Serving over HTTP")
    try:
        import httptools  # noqa: F401
    except ImportError:
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return H11Protocol
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    return HttpToolsProtocol


class _ConnectionLog:
    """Stands in for uvicorn's ``uvicorn.error`` logger inside one connection.

    uvicorn reports a request its parser rejects as a WARNING (and an ``Upgrade`` request as two); those become
    the connection's one INFO line. Everything else passes through unchanged (an application error keeps its
    ERROR and traceback).
    """

    def __init__(self, connection: _Guard, base: logging.Logger) -> None:
        self._connection = connection
        self._base = base

    @property
    def level(self) -> int:
        return self._base.level

    def warning(self, msg: object, *args: Any, **kwargs: Any) -> None:
        if msg == _UVICORN_INVALID:
            self._connection.report("malformed HTTP request (answered 400, connection closed)")
        elif msg == _UVICORN_UPGRADE:
            self._connection.report("Upgrade header ignored (no WebSocket here; served as plain HTTP/1.1)")
        elif isinstance(msg, str) and msg.startswith(_UVICORN_NO_WS):
            self._base.debug(msg, *args, **kwargs)
        else:
            self._base.warning(msg, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)


class _Guard:
    """The rules of the module docstring, mixed into a uvicorn HTTP protocol class (see :func:`guarded_protocol`)."""

    server_config: ServerConfig  # set on the class built by guarded_protocol, with the two below
    max_connections: int
    refusals: _Refusals

    # uvicorn's per-connection state the rules read (both protocol implementations keep these names)
    cycle: Any
    transport: asyncio.Transport
    flow: Any
    client: tuple[str, int] | None
    parser: Any
    server_state: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.logger = _ConnectionLog(self, self.logger)
        self._timer: asyncio.TimerHandle | None = None
        self._armed_at = 0.0
        self._deadline_armed = False
        self._body_deadline = 0.0
        self._head_bytes = 0
        self._body_bytes = 0
        self._reported = False
        self._refused = False

    # -- asyncio.Protocol --------------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(PairedWrites(transport))  # type: ignore[misc]
        if len(self.server_state.connections) > self.max_connections:  # uvicorn counted this one already
            self._refuse()
            return
        self._arm(self.server_config.header_timeout_s, self._head_timed_out)

    def data_received(self, data: bytes) -> None:
        if self._refused:  # read and dropped while the client reads its 503
            self._body_bytes += len(data)
            if self._body_bytes > DRAIN_BYTES:
                self._cancel()
                self.transport.close()
            return
        before = self.cycle
        in_body = before is not None and before.more_body
        super().data_received(data)  # type: ignore[misc]
        if self.transport.is_closing():  # the parser rejected the request (uvicorn answered 400)
            self._cancel()
            return
        cycle = self.cycle
        if cycle is not before:  # a new request head was parsed from this read
            self._head_bytes = self._body_bytes = 0
            self._reported = False
            self._body_deadline = asyncio.get_running_loop().time() + self.server_config.body_deadline_s
        elif in_body:  # body bytes, or bytes dropped after an early answer
            self._body_bytes += len(data)
            if cycle.response_complete and self._body_bytes > self.server_config.max_body_bytes + DRAIN_BYTES:
                self._close(f"kept sending the body after the answer ({self._body_bytes} bytes)")
                return
        else:  # bytes of a request head that is not complete yet
            self._head_bytes += len(data)
            if self._head_bytes > self.server_config.max_header_bytes:
                self._reject_head()
            elif self._timer is None:  # kept-alive connection: the next head's clock starts at its first byte
                self._arm(self.server_config.header_timeout_s, self._head_timed_out)
            return
        if cycle.more_body:
            self._arm_body()
        else:
            self._cancel()  # the whole request is in: the app runs, and uvicorn's keep-alive timer follows it

    def on_headers_complete(self) -> None:
        """httptools' callback when a request head is parsed: a request line without an HTTP version (HTTP/0.9's
        form, which uvicorn answered as HTTP/1.1) is malformed, so the parser's error path answers it 400. h11 refuses
        such a line itself and never calls this."""
        if self.parser.get_http_version() == "0.9":
            raise ValueError("request line without an HTTP version")
        super().on_headers_complete()  # type: ignore[misc]

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete and not self._reported:
            scope = cycle.scope
            self.report(
                f"client closed the connection before the response to {scope.get('method')} {scope.get('path')} "
                f"({self._body_bytes} body bytes read)"
            )
        super().connection_lost(exc)  # type: ignore[misc]

    # -- the rules ---------------------------------------------------------------------------------------------------
    def report(self, what: str) -> None:
        """One INFO line about this connection (at most one per request)."""
        if not self._reported:
            self._reported = True
            client = f"{self.client[0]}:{self.client[1]}" if self.client else "client"
            logger.info("%s: %s", client, what)

    def _arm(self, seconds: float, callback: Any) -> None:
        self._cancel()
        loop = asyncio.get_running_loop()
        self._armed_at = loop.time()
        self._timer = loop.call_later(seconds, callback)

    def _arm_body(self) -> None:
        """The body timer: the next gap (``body_timeout_s``) or the body deadline, whichever comes first."""
        left = self._body_deadline - asyncio.get_running_loop().time()
        gap = self.server_config.body_timeout_s
        self._arm(max(0.0, min(gap, left)), self._body_timed_out)
        self._deadline_armed = left <= gap

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _close(self, why: str) -> None:
        self._cancel()
        self.report(why)
        self.transport.close()

    def _server_paused(self, callback: Any, seconds: float) -> bool:
        """Whether uvicorn stopped reading (flow control): then the wait is the server's, and the timer restarts."""
        if self.flow is not None and self.flow.read_paused:
            self._arm(seconds, callback)
            return True
        return False

    def _head_timed_out(self) -> None:
        self._timer = None
        timeout = self.server_config.header_timeout_s
        if self.transport.is_closing() or self._server_paused(self._head_timed_out, timeout):
            return
        if self._head_bytes == 0 and self.cycle is None:
            logger.debug("closing a connection that sent nothing for %.3g s", timeout)
            self._reported = True
            self.transport.close()
            return
        self._close(f"request head not complete after {timeout:g} s ({self._head_bytes} bytes; header_timeout_s)")

    def _body_timed_out(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        if self.flow is not None and self.flow.read_paused:  # the server's wait: not counted against the client
            self._body_deadline += asyncio.get_running_loop().time() - self._armed_at
            self._arm_body()
            return
        cycle = self.cycle
        if cycle is None or cycle.response_complete:  # answered early; the client stopped sending the rest
            self._reported = True
            self.transport.close()
            return
        where = f"during {cycle.scope.get('method')} {cycle.scope.get('path')} ({self._body_bytes} bytes read"
        if self._deadline_armed:
            deadline = self.server_config.body_deadline_s
            self._close(f"request body not complete {deadline:g} s after its head {where}; body_deadline_s)")
        else:
            timeout = self.server_config.body_timeout_s
            self._close(f"no request body bytes for {timeout:g} s {where}; body_timeout_s)")

    def _refuse(self) -> None:
        """Answer 503 to a connection over ``max_connections``; let its client read the answer (up to
        :data:`REFUSED_LINGER_S`, while fewer than :data:`REFUSED_LINGER` refused connections linger), then close."""
        self._refused = self._reported = True
        open_now = len(self.server_state.connections)
        self.refusals.refused(open_now - 1, self.max_connections)
        if open_now > self.max_connections + REFUSED_LINGER:
            self.transport.close()
            return
        self._send_error(
            503,
            "service_unavailable",
            f"The server holds its limit of {self.max_connections} open connections (max_connections); retry in a "
            "moment, or reuse fewer connections per client.",
            b"retry-after: 1\r\n",
        )
        self.transport.write_eof()
        self._arm(REFUSED_LINGER_S, self.transport.close)

    def _reject_head(self) -> None:
        limit = self.server_config.max_header_bytes
        self._send_error(
            431,
            "request_header_fields_too_large",
            f"The request line and headers exceed {limit} bytes (max_header_bytes); send shorter headers or a "
            "shorter URL.",
        )
        self._close(f"request head over {limit} bytes (answered 431, connection closed)")

    def _send_error(self, status: int, kind: str, message: str, headers: bytes = b"") -> None:
        """Write a JSON error answer (the app's shape) that ends the connection, before any request was parsed."""
        body = json.dumps({"error": {"type": kind, "message": message, "field": None}}).encode()
        head = (
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n".encode()
            + headers
            + b"connection: close\r\n\r\n"
        )
        self.transport.write(head + body)


class _Refusals:
    """The connection-limit WARNING of one server: the first refusal is logged at once, later ones at most once per
    :data:`REFUSAL_LOG_EVERY_S` with how many were refused meanwhile."""

    def __init__(self) -> None:
        self._logged_at = -math.inf
        self._since = 0

    def refused(self, open_connections: int, limit: int) -> None:
        self._since += 1
        now = time.monotonic()
        if now - self._logged_at >= REFUSAL_LOG_EVERY_S:
            logger.warning(
                "connection limit reached: %d connections open (max_connections %d); refused %d new connection(s) "
                "with 503 since the last such line. Raise --max-connections (and ulimit -n) if the clients are "
                "legitimate.",
                open_connections,
                limit,
                self._since,
            )
            self._logged_at, self._since = now, 0


def connection_limit(max_connections: int) -> int:
    """``max_connections``, with the process's soft limit on open files raised to fit it (plus :data:`FD_RESERVE`)
    where the hard limit allows; else the largest count that fits, with a WARNING."""
    try:
        import resource
    except ImportError:  # not a POSIX system: nothing to fit
        return max_connections
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = max_connections + FD_RESERVE
    if soft != resource.RLIM_INFINITY and soft < need:
        raised = need if hard == resource.RLIM_INFINITY else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY or soft >= need:
        return max_connections
    fitted = max(1, soft - FD_RESERVE)
    logger.warning(
        "max_connections lowered from %d to %d: this process may open %d files (ulimit -n) and keeps %d for "
        "itself; raise the limit (ulimit -n %d) to serve %d connections.",
        max_connections,
        fitted,
        soft,
        FD_RESERVE,
        need,
        max_connections,
    )
    return fitted


class PairedWrites:
    """A transport that sends a response's head and body in one socket write.

    uvicorn writes a response's status line and headers, then its body: two ``send`` calls, and the client wakes
    twice. Here a write is held until the next write on the connection, which goes out together with it
    (``writelines``: one ``writev`` on uvloop); a write left alone goes out when the event loop's current iteration
    ends. ``writelines`` is taken for a whole response (:mod:`retriever_server.fast_post` writes head and body so)
    and goes out at once, after what is held. ``close`` and ``write_eof`` send what is held first; ``abort`` drops
    it, as it drops the transport's own buffer. A write after the connection closed is dropped, as asyncio's own
    transports drop it (uvloop's raise ``RuntimeError``, which reached the app as a fault: a client that pipelined 100
    requests and closed without reading an answer left two tracebacks). Everything else is the wrapped transport's.

    Measured at 64 keep-alive clients with an instant service (``benchmarks/retriever_http.py``, medians of 3 runs):
    the server's CPU per request 56 → 50 µs, the load generator's 29 → 25 µs. At 64 clients both are spent between
    two batches, while the encoder waits; with the real encoder that gap is mostly the kernel's socket calls, and it
    measured 5.0 ms plain against 4.9 ms paired (medians of 3 runs, within the noise of this box). Holding every
    write to the end of the loop iteration instead measured 46 and 20 µs with the instant service and 4.8 ms with
    the encoder, but it holds the first answer back until all the others are rendered.
    """

    __slots__ = ("_transport", "_held", "_loop")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._held: bytes | None = None
        self._loop = asyncio.get_running_loop()

    def write(self, data: bytes) -> None:
        if self._transport.is_closing():  # the client went away: dropped, as asyncio's own transports drop it
            self._held = None
            return
        held = self._held
        if held is None:
            self._held = bytes(data)
            self._loop.call_soon(self.flush)
        else:
            self._held = None
            self._transport.writelines((held, data))

    def writelines(self, list_of_data: Any) -> None:
        """Send ``list_of_data`` now (a whole response), after what is held, in one socket write."""
        held, self._held = self._held, None
        if self._transport.is_closing():
            return
        self._transport.writelines((held, *list_of_data) if held is not None else list_of_data)

    def flush(self) -> None:
        """Send the held write now (if any)."""
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._held or b"")

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def is_closing(self) -> bool:  # asked several times per request: spared the lookup through __getattr__
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def guarded_protocol(
    config: ServerConfig,
    base: type[asyncio.Protocol] | None = None,
    post_endpoints: Mapping[str, Any] | None = None,
) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class (``base``, default :func:`base_protocol`) with the rules of ``config``.

    With ``post_endpoints`` (path → ``async (body, content_type) -> bytes``, the app's ``state.post_endpoints``),
    httptools' protocol, ``config.fast_post`` on and a uvicorn the fast path was tested with, the connections answer
    those endpoints themselves (:mod:`retriever_server.fast_post`); one log line says which path the POST endpoints
    take, a WARNING when the fast path is on but the running uvicorn is not one it was tested with.
    """
    base = base or base_protocol()
    attributes: dict[str, Any] = {
        "server_config": config,
        "max_connections": connection_limit(config.max_connections),
        "refusals": _Refusals(),
    }
    bases: tuple[type, ...] = (_Guard, base)
    fast_post = _fast_post(config, base) if post_endpoints else None
    if fast_post is not None and post_endpoints:
        bases = (_Guard, fast_post, base)
        attributes["post_endpoints"] = {path.encode("ascii"): endpoint for path, endpoint in post_endpoints.items()}
    return type(f"Guarded{base.__name__}", bases, attributes)


def _fast_post(config: ServerConfig, base: type) -> type | None:
    """:class:`~retriever_server.fast_post.FastPost` when the connections of ``base`` may answer the POST endpoints
    themselves, else ``None``; logs which path the POST endpoints take."""
    asgi = "POST /retrieve and /encode go through the ASGI app"
    if not any(cls.__module__ == "uvicorn.protocols.http.httptools_impl" for cls in base.__mro__):
        logger.info("%s: the fast path needs uvicorn's httptools parser, not %s", asgi, base.__name__)
        return None
    if not config.fast_post:
        logger.info("%s (fast_post off: --no-fast-post)", asgi)
        return None
    try:
        from .fast_post import FastPost, unavailable
    except ImportError as e:  # a uvicorn that moved what the module imports
        reason: str | None = f"retriever_server.fast_post does not import ({e})"
    else:
        reason = unavailable()
    if reason is not None:
        logger.warning(
            "%s instead of being answered by the connection: %s. They are served as before, at about 1.5x the "
            "server CPU per request. Install a tested uvicorn (pip install 'agentrag-verl[serve]'), or pass "
            "--no-fast-post to keep this uvicorn without this warning; docs/retriever.md (uvicorn internals) says "
            "how to check a new uvicorn.",
            asgi,
            reason,
        )
        return None
    logger.info("POST /retrieve and /encode are answered by the connection (retriever_server.fast_post)")
    return FastPost


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host``:``port``, for ``uvicorn.Server.run(sockets=[...])``.

    ``serve`` binds before it loads the index, so a busy port or a host that is not this machine's fails at once in
    one line (uvicorn bound after the load, and after the "Serving ... on ..." line). The socket listens once uvicorn
    starts serving it.

    Raises:
        OSError: What failed and what to pass instead (``--host``, ``--port``).
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError) as e:
        raise OSError(
            f"--host {host} is not an address of this machine ({getattr(e, 'strerror', None) or e}); pass 127.0.0.1 "
            "(this machine only) or 0.0.0.0 (every interface)"
        ) from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            message = f"port {port} on {host} is already in use (another server listens there); pass another --port"
        elif e.errno == errno.EADDRNOTAVAIL:
            message = (
                f"--host {host} is not an address of this machine; pass 127.0.0.1 (this machine only), 0.0.0.0 "
                "(every interface) or one of its own addresses"
            )
        elif e.errno == errno.EACCES:
            message = f"binding port {port} needs privileges this process lacks; pass a --port from 1024 to 65535"
        else:
            message = f"cannot listen on {host}:{port} ({e.strerror}); check --host and --port"
        raise OSError(message) from None
    return sock


def uvicorn_config(app: Any, config: ServerConfig, *, log_level: str = "info", access_log: bool = False) -> Any:
    """The ``uvicorn.Config`` serving ``app`` with ``config``'s address and connection limits.

    WebSockets are off (``ws="none"``: the server has no WebSocket route). When h11 is the parser, its own limit on
    an incomplete head is set one socket read above ``max_header_bytes``, so that the rules here (answer 431) act
    first on either parser. The connections answer the app's POST endpoints themselves when ``app`` is the app
    ``create_app`` made (:mod:`retriever_server.fast_post`; not with ``config.fast_post`` off, nor on a uvicorn the
    fast path was not tested with: :func:`guarded_protocol`); an app wrapped in other ASGI middleware has no
    ``state.post_endpoints`` and gets every request through ASGI, so the wrapper sees them all.
    """
    uvicorn = require("uvicorn", "Serving over HTTP")
    return uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        http=guarded_protocol(config, post_endpoints=getattr(getattr(app, "state", None), "post_endpoints", None)),
        ws="none",
        lifespan="on",
        timeout_keep_alive=config.keep_alive_timeout_s,
        h11_max_incomplete_event_size=config.max_header_bytes + READ_BYTES,
        log_level=log_level.lower(),
        access_log=access_log,
    )
