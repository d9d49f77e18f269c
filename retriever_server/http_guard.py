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
  there.
- The head budget is counted in what arrives while a head is incomplete, checked after each read, so the memory
  a client can make the parser hold is ``max_header_bytes`` plus one socket read (:data:`READ_BYTES`).
- The body gap timer pauses while uvicorn itself has stopped reading (flow control: the app has not consumed the
  previous 64 KiB), so a busy server never blames the client.
- After an early answer (``413``) the rest of the body is read and dropped, up to 1 MiB, so that a client that
  sends a little too much still reads the ``413``; past that the connection is closed.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._deps import require

if TYPE_CHECKING:
    from .app import ServerConfig

logger = logging.getLogger("retriever_server.http")

DRAIN_BYTES = 1 << 20
"""Body bytes read and dropped after the app answered early (``413``) before the connection is closed."""
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

    server_config: ServerConfig  # set on the class built by guarded_protocol

    # uvicorn's per-connection state the rules read (both protocol implementations keep these names)
    cycle: Any
    transport: asyncio.Transport
    flow: Any
    client: tuple[str, int] | None
    parser: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.logger = _ConnectionLog(self, self.logger)
        self._timer: asyncio.TimerHandle | None = None
        self._head_bytes = 0
        self._body_bytes = 0
        self._reported = False

    # -- asyncio.Protocol --------------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(PairedWrites(transport))  # type: ignore[misc]
        self._arm(self.server_config.header_timeout_s, self._head_timed_out)

    def data_received(self, data: bytes) -> None:
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
            self._arm(self.server_config.body_timeout_s, self._body_timed_out)
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
        self._timer = asyncio.get_running_loop().call_later(seconds, callback)

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
        timeout = self.server_config.body_timeout_s
        if self.transport.is_closing() or self._server_paused(self._body_timed_out, timeout):
            return
        cycle = self.cycle
        if cycle is None or cycle.response_complete:  # answered early; the client stopped sending the rest
            self._reported = True
            self.transport.close()
            return
        scope = cycle.scope
        self._close(
            f"no request body bytes for {timeout:g} s during {scope.get('method')} {scope.get('path')} "
            f"({self._body_bytes} bytes read; body_timeout_s)"
        )

    def _reject_head(self) -> None:
        limit = self.server_config.max_header_bytes
        body = json.dumps(
            {
                "error": {
                    "type": "request_header_fields_too_large",
                    "message": f"The request line and headers exceed {limit} bytes (max_header_bytes); send shorter "
                    "headers or a shorter URL.",
                    "field": None,
                }
            }
        ).encode()
        head = (
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n"
        )
        self.transport.write(head + body)
        self._close(f"request head over {limit} bytes (answered 431, connection closed)")


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

    With ``post_endpoints`` (path → ``async (body, content_type) -> bytes``, the app's ``state.post_endpoints``) and
    httptools' protocol, the connections answer those endpoints themselves (:mod:`retriever_server.fast_post`).
    """
    base = base or base_protocol()
    attributes: dict[str, Any] = {"server_config": config}
    bases: tuple[type, ...] = (_Guard, base)
    if post_endpoints and any(cls.__module__ == "uvicorn.protocols.http.httptools_impl" for cls in base.__mro__):
        from .fast_post import FastPost

        bases = (_Guard, FastPost, base)
        attributes["post_endpoints"] = {path.encode("ascii"): endpoint for path, endpoint in post_endpoints.items()}
    return type(f"Guarded{base.__name__}", bases, attributes)


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
    ``create_app`` made (:mod:`retriever_server.fast_post`); an app wrapped in other ASGI middleware has no
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
