"""The POST endpoints answered by the connection (``retriever_server.fast_post``), against the ASGI path.

Real uvicorn servers on 127.0.0.1 in threads of this process, over the fixture index: one with the connection's fast
path (what ``serve`` runs) and one with it switched off (``ServerConfig(fast_post=False)``, ``serve --no-fast-post``),
so every request goes through uvicorn's ASGI cycle, the app's middleware and ``PostEndpoints``. Both wrap the app in a
counter of the HTTP requests that reached ASGI. The tests that are not a comparison of the two run on each path in
turn (``path``). Then the switch and the uvicorn version guard, which choose the path at start-up.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import threading
import time
from pathlib import Path

import pytest

from agentrag_verl.demo.servers import free_port

from .conftest import uvicorn_in_thread

MAX_BODY = 4096


class CountingApp:
    """The app, counting the HTTP requests that reach it through ASGI (``(method, path)``)."""

    def __init__(self, app):
        self.app = app
        self.state = app.state  # uvicorn_config reads the POST endpoints there
        self.seen: list[tuple[str, str]] = []

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            self.seen.append((scope["method"], scope["path"]))
        await self.app(scope, receive, send)


PATHS = {"fast_post": True, "asgi": False}
"""The two POST paths, by the ``fast_post`` setting that chooses them."""


def serving(app, config, *, access_log: bool = False):
    from retriever_server.http_guard import uvicorn_config

    return uvicorn_in_thread(uvicorn_config(app, config, log_level="info", access_log=access_log))


def config_for(**overrides):
    from retriever_server.app import ServerConfig

    return ServerConfig(port=free_port(), max_body_bytes=MAX_BODY, **overrides)


@pytest.fixture(scope="module")
def pair(retriever):
    """(fast server's config and app, ASGI-only server's config and app), both running."""
    from retriever_server.app import create_app

    fast_config, asgi_config = config_for(), config_for(fast_post=False)
    fast_app, asgi_app = (
        CountingApp(create_app(retriever, fast_config)),
        CountingApp(create_app(retriever, asgi_config)),
    )
    with serving(fast_app, fast_config), serving(asgi_app, asgi_config):
        yield (fast_config, fast_app), (asgi_config, asgi_app)


@pytest.fixture(params=list(PATHS))
def path(request, pair):
    """The config and app of the fast server, then of the ASGI-path server."""
    return pair[0] if PATHS[request.param] else pair[1]


# ---- raw HTTP/1.1 ---------------------------------------------------------------------------------------------------


def request(target: bytes, body: bytes = b"", *headers: bytes, method: bytes = b"POST", version=b"HTTP/1.1") -> bytes:
    lines = [method + b" " + target + b" " + version, b"Host: t", *headers]
    if body and not any(h.lower().startswith((b"content-length", b"transfer-encoding")) for h in headers):
        lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def post_json(target: bytes, obj, *headers: bytes) -> bytes:
    return request(target, json.dumps(obj).encode(), b"Content-Type: application/json", *headers)


def read_responses(
    sock: socket.socket, count: int, data: bytes = b"", timeout: float = 30.0
) -> tuple[list[tuple[int, dict, bytes]], bool]:
    """``count`` responses (status, headers without ``date``, body) after ``data`` (already received), and whether
    the server then closed."""
    sock.settimeout(timeout)
    responses = []
    while len(responses) < count:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed after {len(responses)} responses: {data!r}"
            data += chunk
        head, _, data = data.partition(b"\r\n\r\n")
        status_line, *lines = head.split(b"\r\n")
        headers = dict(line.split(b": ", 1) for line in lines)
        size = int(headers[b"content-length"])
        while len(data) < size:
            chunk = sock.recv(65536)
            assert chunk, "connection closed mid-body"
            data += chunk
        body, data = data[:size], data[size:]
        assert re.fullmatch(rb"HTTP/1\.1 \d{3} [A-Za-z ]+", status_line), status_line
        headers.pop(b"date")
        responses.append((int(status_line.split()[1]), headers, body))
    assert data == b"", data
    sock.settimeout(0.5)
    try:
        closed = sock.recv(1) == b""
    except TimeoutError:
        closed = False
    return responses, closed


def exchange(port: int, raw: bytes, count: int = 1) -> tuple[list[tuple[int, dict, bytes]], bool]:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(raw)
        return read_responses(sock, count)


# ---- the same answers as the ASGI path ---------------------------------------------------------------------------

SAME = [
    post_json(
        b"/retrieve", {"queries": ["Who wrote The Salt Clock?", "harbour town"], "topk": 2, "return_scores": True}
    ),
    post_json(b"/retrieve", {"query": "Who wrote The Salt Clock?", "topk": 1}),
    post_json(b"/retrieve", {"queries": ["", "   ", "a river island"], "topk": 3, "return_scores": True}),
    post_json(b"/retrieve", {"queries": []}),
    post_json(b"/encode", {"queries": ["a river island"]}),
    request(b"/retrieve", b'{"queries": ["x"', b"Content-Type: application/json"),  # 400: not JSON
    request(b"/retrieve", b"", b"Content-Type: application/json", b"Content-Length: 0"),  # 400: empty
    request(b"/retrieve", b'{"queries": ["x"]}', b"Content-Type: text/plain"),  # 415
    post_json(b"/retrieve", {"queries": ["x"], "topk": 10**6}),  # 422
    post_json(b"/retrieve", ["x"]),  # 422: not an object
    post_json(b"/encode", {"queries": ["x"], "kind": "image"}),  # 422
    post_json(b"/encode", {"queries": ["x"], "kind": False}),  # 422: a falsy kind is not the default
    request(b"/retrieve", b"{}", b"Content-Type: application/json", b"Content-Length: %d" % (MAX_BODY + 1)),  # 413
    request(  # 413: a chunked body that grows past the limit
        b"/retrieve",
        b"".join(b"400\r\n" + b" " * 1024 + b"\r\n" for _ in range(5)) + b"0\r\n\r\n",
        b"Content-Type: application/json",
        b"Transfer-Encoding: chunked",
    ),
    request(  # a chunked body within the limit
        b"/retrieve",
        b'9\r\n{"query":\r\nb\r\n "chunked"}\r\n0\r\n\r\n',
        b"Content-Type: application/json",
        b"Transfer-Encoding: chunked",
    ),
]


@pytest.mark.parametrize("raw", SAME, ids=range(len(SAME)))
def test_answers_are_the_asgi_paths_byte_for_byte(pair, raw):
    (fast_config, fast_app), (asgi_config, asgi_app) = pair
    fast_before, asgi_before = len(fast_app.seen), len(asgi_app.seen)
    fast, fast_closed = exchange(fast_config.port, raw)
    asgi, asgi_closed = exchange(asgi_config.port, raw)
    assert fast == asgi
    assert fast_closed == asgi_closed
    assert fast_app.seen[fast_before:] == [], "the fast server ran the request through ASGI"
    assert len(asgi_app.seen) == asgi_before + 1
    status, headers, body = fast[0]
    assert headers[b"content-type"] == b"application/json" and headers[b"server"] == b"uvicorn"
    if status == 200 and raw.startswith(b"POST /retrieve"):
        assert "result" in json.loads(body)


def test_keep_alive_pipelining_and_connection_close(path):
    config, app = path
    one = post_json(b"/retrieve", {"query": "Who wrote The Salt Clock?", "topk": 1})
    two = post_json(b"/retrieve", {"query": "a river island", "topk": 2})
    alone = [exchange(config.port, raw)[0][0] for raw in (one, two)]
    with socket.create_connection(("127.0.0.1", config.port), timeout=30) as sock:
        sock.sendall(one + two)  # pipelined: the second waits for the first (uvicorn's queue), then both answered
        answers, closed = read_responses(sock, 2)
        assert answers == alone and not closed
        sock.sendall(one)  # the kept-alive connection serves the next request
        again, closed = read_responses(sock, 1)
        assert again == [alone[0]] and not closed
        sock.sendall(post_json(b"/retrieve", {"query": "Who wrote The Salt Clock?", "topk": 1}, b"Connection: close"))
        (status, headers, body), *_ = read_responses(sock, 1)[0]
    assert status == 200 and headers[b"connection"] == b"close" and body == alone[0][2]
    http10 = request(
        b"/retrieve", b'{"query": "a river island", "topk": 2}', b"Content-Type: application/json", version=b"HTTP/1.0"
    )
    (answer,), closed = exchange(config.port, http10)
    assert answer[0] == 200 and answer[1][b"connection"] == b"close" and answer[2] == alone[1][2] and closed


def test_requests_it_does_not_take_go_through_asgi(path):
    config, app = path
    before = len(app.seen)
    query = post_json(b"/retrieve?debug=1", {"query": "a river island"})
    (answer,), _ = exchange(config.port, query)
    assert answer[0] == 200 and "result" in json.loads(answer[2])
    continued = post_json(b"/retrieve", {"query": "a river island"}, b"Expect: 100-continue")
    with socket.create_connection(("127.0.0.1", config.port), timeout=30) as sock:
        sock.sendall(continued)
        interim = b"HTTP/1.1 100 Continue\r\n\r\n"
        data = b""
        while len(data) < len(interim):
            data += sock.recv(65536)
        assert data.startswith(interim)
        (answer,), _ = read_responses(sock, 1, data[len(interim) :])
        assert answer[0] == 200 and "result" in json.loads(answer[2])
    many = post_json(b"/retrieve", {"query": "x"}, *(b"X-%d: 1" % i for i in range(config.max_headers)))
    (answer,), _ = exchange(config.port, many)
    assert answer[0] == 431 and json.loads(answer[2])["error"]["type"] == "request_header_fields_too_large"
    (answer,), _ = exchange(config.port, request(b"/retrieve", method=b"GET"))
    assert answer[0] == 405 and answer[1][b"allow"] == b"POST"
    assert app.seen[before:] == [
        ("POST", "/retrieve"),
        ("POST", "/retrieve"),
        ("POST", "/retrieve"),
        ("GET", "/retrieve"),
    ]


class Records(logging.Handler):
    """The log records a logger emits while the handler is attached."""

    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


class GatedService:
    """Answers each job when the test opens the gate (an instant answer otherwise), or raises ``fail``."""

    def __init__(self, retriever, fail: Exception | None = None):
        self.retriever, self.fail = retriever, fail
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    async def submit(self, job):
        from retriever_server.batching import run_jobs

        self.entered.set()
        while not self.gate.is_set():
            await asyncio.sleep(0.01)
        if self.fail is not None:
            raise self.fail
        return run_jobs(self.retriever, [job])[0]

    def stats(self):
        return {}


def test_a_fault_is_logged_and_answered_500_as_on_the_asgi_path(retriever, caplog):
    """The same answer byte for byte, one ERROR with the traceback, and the connection closed, on both paths:
    ``PostEndpoints`` answers the fault itself, as the connection does (no second traceback from uvicorn)."""
    from retriever_server.app import create_app

    answers = []
    for fast in PATHS.values():
        config = config_for(fast_post=fast)
        app = create_app(retriever, config, service=GatedService(retriever, fail=RuntimeError("the index is gone")))
        caplog.clear()
        uvicorn_errors = Records()
        with caplog.at_level(logging.ERROR, logger="retriever_server"), serving(app, config):
            logging.getLogger("uvicorn.error").addHandler(uvicorn_errors)  # uvicorn's loggers do not reach the root
            try:
                (answer,), closed = exchange(config.port, post_json(b"/retrieve", {"query": "x"}))
            finally:
                logging.getLogger("uvicorn.error").removeHandler(uvicorn_errors)
        answers.append((answer, closed))
        errors = [r for r in caplog.records if r.name.startswith("retriever_server")]
        assert [r.getMessage() for r in errors] == ["Internal error on POST /retrieve"]
        assert [r.getMessage() for r in uvicorn_errors.records if r.levelno >= logging.ERROR] == []
        assert errors[0].exc_info is not None and "the index is gone" in str(errors[0].exc_info[1])
    assert answers[0] == answers[1]
    (status, headers, body), closed = answers[0]
    assert status == 500 and closed and headers[b"connection"] == b"close"
    assert json.loads(body)["error"] == {
        "type": "internal_error",
        "message": "Internal server error: RuntimeError: the index is gone",
        "field": None,
    }


@pytest.mark.parametrize("fast", PATHS.values(), ids=PATHS.keys())
def test_a_client_gone_before_its_answer_gets_nothing_and_a_shutdown_waits_for_the_answer(retriever, caplog, fast):
    from retriever_server.app import create_app

    config = config_for(fast_post=fast)
    service = GatedService(retriever)
    app = create_app(retriever, config, service=service)
    query = post_json(b"/retrieve", {"query": "a river island", "topk": 1})
    with caplog.at_level(logging.INFO), serving(app, config) as server:
        (expected,), _ = exchange(config.port, query)
        service.gate.clear()
        service.entered.clear()
        with socket.create_connection(("127.0.0.1", config.port), timeout=30) as gone:
            gone.sendall(query)
            assert service.entered.wait(10)
        time.sleep(0.2)  # the server sees the disconnect while the job waits
        service.gate.set()
        with socket.create_connection(("127.0.0.1", config.port), timeout=30) as sock:
            sock.sendall(query)
            assert read_responses(sock, 1) == ([expected], False)  # the server goes on
            service.gate.clear()
            service.entered.clear()
            sock.sendall(query)
            assert service.entered.wait(10)
            server.should_exit = True  # a graceful shutdown while the request is in flight
            time.sleep(0.2)
            service.gate.set()
            (status, headers, body), *_ = read_responses(sock, 1)[0]
    assert (status, body) == (200, expected[2]) and headers[b"connection"] == b"close"
    problems = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not problems, [r.getMessage() for r in problems]
    gone_lines = [r.getMessage() for r in caplog.records if "before the response" in r.getMessage()]
    assert len(gone_lines) == 1 and "POST /retrieve" in gone_lines[0]


def test_the_access_log_line_is_uvicorns(retriever):
    from retriever_server.app import create_app

    class Lines(logging.Handler):
        def __init__(self):
            super().__init__()
            self.lines = []

        def emit(self, record):
            self.lines.append(re.sub(r":\d+ ", ":PORT ", record.getMessage()))

    lines = []
    for fast in PATHS.values():
        config = config_for(fast_post=fast)
        app = create_app(retriever, config)
        handler = Lines()
        with serving(app, config, access_log=True):
            access = logging.getLogger("uvicorn.access")  # uvicorn's log config does not propagate it to the root
            access.addHandler(handler)
            try:
                exchange(config.port, post_json(b"/retrieve", {"query": "x"}))
                exchange(config.port, request(b"/retrieve", b"{", b"Content-Type: application/json"))
            finally:
                access.removeHandler(handler)
        lines.append(handler.lines)
    assert (
        lines[0]
        == lines[1]
        == [
            '127.0.0.1:PORT - "POST /retrieve HTTP/1.1" 200',
            '127.0.0.1:PORT - "POST /retrieve HTTP/1.1" 400',
        ]
    )


# ---- the switch and the uvicorn version guard -----------------------------------------------------------------------


def post_path_of(config, caplog) -> tuple[bool, list[logging.LogRecord]]:
    """Whether the protocol built for ``config`` answers the POST endpoints on the connection, and the log records
    of the choice."""
    from retriever_server.fast_post import FastPost
    from retriever_server.http_guard import guarded_protocol

    async def endpoint(body, content_type):
        return b"{}"

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="retriever_server"):
        protocol = guarded_protocol(config, post_endpoints={"/retrieve": endpoint})
    return issubclass(protocol, FastPost), [r for r in caplog.records if r.name.startswith("retriever_server")]


def test_the_tested_uvicorn_range_is_the_pin_and_the_installed_uvicorn_is_in_it():
    """``pyproject.toml`` pins the ``serve`` extra's uvicorn to the range the fast path checks at start-up, and the
    installed uvicorn is in it with every name the fast path uses: else the fast path's tests test the fallback."""
    import tomllib
    import uvicorn

    from retriever_server import fast_post

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    pins = [req for req in pyproject["project"]["optional-dependencies"]["serve"] if req.startswith("uvicorn")]
    assert pins == [f"uvicorn{fast_post.tested_range()}"]
    assert fast_post.unavailable() is None, f"installed uvicorn {uvicorn.__version__}: {fast_post.unavailable()}"


def test_the_switch_turns_the_fast_path_off_with_one_info_line(caplog):
    fast, records = post_path_of(config_for(), caplog)
    assert fast and [(r.levelname, r.getMessage()) for r in records] == [
        ("INFO", "POST /retrieve and /encode are answered by the connection (retriever_server.fast_post)")
    ]
    fast, records = post_path_of(config_for(fast_post=False), caplog)
    assert not fast and [(r.levelname, r.getMessage()) for r in records] == [
        ("INFO", "POST /retrieve and /encode go through the ASGI app (fast_post off: --no-fast-post)")
    ]


@pytest.mark.parametrize(
    "change, named",
    [
        ("version 0.55.0", "uvicorn 0.55.0 is not a version the fast path was tested with (uvicorn>=0.54,<0.55)"),
        ("version 0.53.9", "uvicorn 0.53.9 is not a version the fast path was tested with (uvicorn>=0.54,<0.55)"),
        ("version 1.0.0", "uvicorn 1.0.0 is not a version the fast path was tested with (uvicorn>=0.54,<0.55)"),
        ("no STATUS_LINE", "lacks STATUS_LINE, which the fast path uses"),
        ("no on_response_complete", "lacks HttpToolsProtocol.on_response_complete, which the fast path uses"),
        ("cycle renamed", "lacks HttpToolsProtocol's cycle, which the fast path uses"),
    ],
    ids=["0.55", "0.53", "1.0", "no-STATUS_LINE", "no-on_response_complete", "cycle-renamed"],
)
def test_an_untested_uvicorn_turns_the_fast_path_off_with_one_warning(monkeypatch, caplog, change, named):
    import uvicorn
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from retriever_server import fast_post

    if change.startswith("version"):
        monkeypatch.setattr(uvicorn, "__version__", change.split()[1])
    elif change == "no STATUS_LINE":
        monkeypatch.setattr(fast_post, "STATUS_LINE", None)
    elif change == "no on_response_complete":
        monkeypatch.delattr(HttpToolsProtocol, "on_response_complete")
    else:  # as if uvicorn kept the request in another attribute: its code names `cycle` nowhere
        monkeypatch.setattr(fast_post, "REQUIRED_NAMES", (*fast_post.REQUIRED_NAMES, "cycle_renamed"))
        monkeypatch.setattr(
            fast_post, "_names_in_code", lambda cls: {"cycle_renamed", *fast_post.REQUIRED_NAMES} - {"cycle"}
        )
    fast, records = post_path_of(config_for(), caplog)
    assert not fast
    assert [r.levelname for r in records] == ["WARNING"]
    message = records[0].getMessage()
    assert message.startswith("POST /retrieve and /encode go through the ASGI app instead of being answered by the ")
    assert named in message and "--no-fast-post" in message
    # the switch off: the fast path is not asked for, so nothing to warn about
    fast, records = post_path_of(config_for(fast_post=False), caplog)
    assert not fast and [r.levelname for r in records] == ["INFO"]


def test_on_an_untested_uvicorn_every_post_is_answered_through_asgi(retriever, monkeypatch, caplog):
    import uvicorn

    from retriever_server.app import create_app

    monkeypatch.setattr(uvicorn, "__version__", "0.99.0")
    config = config_for()
    app = CountingApp(create_app(retriever, config))
    with caplog.at_level(logging.INFO, logger="retriever_server"), serving(app, config):
        answers = [exchange(config.port, raw)[0][0] for raw in SAME[:2]]
    assert [status for status, _, _ in answers] == [200, 200]
    assert app.seen == [("POST", "/retrieve")] * 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "uvicorn 0.99.0" in warnings[0]
