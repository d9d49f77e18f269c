"""The retriever server under hostile traffic, over real sockets on 127.0.0.1: malformed and oversized requests,
slow and idle connections, huge chunked bodies, disconnect storms.

A ``python -m retriever_server serve`` process (the real CLI, the fixture index) serves the module with short
timeouts so the slow-client cases take about a second: ``--header-timeout 1 --body-timeout 1 --keep-alive-timeout
1``; the other limits keep their defaults (16 KiB heads, 100 headers, 32 MiB bodies). Every test of that server runs
twice (the ``server`` fixture's two params): once on the server as ``serve`` runs by default, which answers ``POST
/retrieve`` on the connection (``retriever_server.fast_post``), and once on a server started with ``--no-fast-post``,
whose every request takes the ASGI path (uvicorn's request cycle, the app's middleware, ``PostEndpoints``). The h11
parser's server runs in a thread of this process. Every loop here is bounded (a count or a deadline) and every socket
talks to 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from agentrag_verl.demo.servers import free_port
from retriever_server.http_guard import FD_RESERVE

from .conftest import uvicorn_in_thread

TIMEOUT_S = 1.0
"""--header-timeout and --body-timeout of the server under test."""
DEADLINE_S = 2.5
"""--body-deadline of the server under test: a body dripped a byte every TIMEOUT_S / 2 passes the gap timer and is
cut here."""
SLACK_S = 1.5
"""Scheduling slack on a shared 2-core box: a timed-out connection must be closed by TIMEOUT_S + SLACK_S."""
MAX_BODY = 32 << 20
"""The server's default max_body_bytes."""
MAX_REQUEST_TOKENS = 4096
"""--max-request-tokens of the server under test: 16 queries of the encoder's 256 tokens (MiniLM's max length)."""
MAX_BATCH_TOKENS = 256
"""--max-batch-tokens of the server under test: one 256-token query per micro-batch."""
LONG_QUERY = "xxxxxxx " * 511
"""4,088 characters, 2,046 MiniLM tokens: the encoder reads 256 of them."""
OPEN_FILES = 256
"""The CLI server runs under ``ulimit -n 256`` (as the issue found it: 300 slow bodies then refused ``/health`` for 40 s
with nothing in the log), so its default max_connections (4096) is fitted down to OPEN_FILES - FD_RESERVE."""
MAX_CONNECTIONS = OPEN_FILES - FD_RESERVE


LIMITS = {
    "header_timeout_s": ("--header-timeout", TIMEOUT_S),
    "body_timeout_s": ("--body-timeout", TIMEOUT_S),
    "keep_alive_timeout_s": ("--keep-alive-timeout", TIMEOUT_S),
    "body_deadline_s": ("--body-deadline", DEADLINE_S),
    "max_request_tokens": ("--max-request-tokens", MAX_REQUEST_TOKENS),
    "max_batch_tokens": ("--max-batch-tokens", MAX_BATCH_TOKENS),
}
"""The settings of the servers under test (``ServerConfig`` field: ``serve`` flag and value); the rest keep their
defaults, but for max_connections, which the CLI fits to its open-file limit."""

POST_PATHS = {"fast_post": [], "asgi": ["--no-fast-post"]}
"""The two paths of a POST request, by the ``serve`` flags that choose them."""


@dataclass
class Server:
    port: int
    pid: int
    log: Path

    def log_lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()


@pytest.fixture(scope="module", params=list(POST_PATHS))
def server(request, index_dir, tmp_path_factory):
    """The CLI server answering POST on the connection (``fast_post``), then one started with ``--no-fast-post``
    (``asgi``)."""
    log = tmp_path_factory.mktemp(f"hostile_{request.param}") / "server.log"
    port = free_port()
    cmd = [sys.executable, "-m", "retriever_server", "serve", "--index", str(index_dir), "--port", str(port)]
    cmd += ["--num-threads", "1", *POST_PATHS[request.param]]
    for flag, value in LIMITS.values():
        cmd += [flag, str(value)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}

    def open_files_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))

    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, preexec_fn=open_files_limit)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield Server(port, proc.pid, log)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---- raw-socket helpers ---------------------------------------------------------------------------------------------


def connect(server: Server, timeout: float = 5.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_all(sock: socket.socket, deadline_s: float) -> tuple[bytes, float | None]:
    """Everything the server sends until it closes (``(data, seconds until EOF)``), or until ``deadline_s``
    (``(data, None)``: still open)."""
    t0 = time.monotonic()
    data = b""
    while True:
        left = deadline_s - (time.monotonic() - t0)
        if left <= 0:
            return data, None
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return data, None
        except ConnectionResetError:
            return data, time.monotonic() - t0
        if not chunk:
            return data, time.monotonic() - t0
        data += chunk


def statuses(data: bytes) -> list[int]:
    """Status codes of the HTTP/1.x responses in ``data``, in order (a response follows the previous body directly)."""
    return [int(code) for code in re.findall(rb"HTTP/1\.[01] (\d{3}) ", data)]


def exchange(server: Server, raw: bytes, deadline_s: float = 5.0) -> tuple[list[int], float | None, bytes]:
    with connect(server) as sock:
        try:
            sock.sendall(raw)
        except OSError:
            pass  # the server may answer and close before all of a large request is written
        data, closed_after = read_all(sock, deadline_s)
    return statuses(data), closed_after, data


def head(method: bytes, target: bytes, *headers: bytes, version: bytes = b"HTTP/1.1") -> bytes:
    return method + b" " + target + b" " + version + b"\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n"


def post(*headers: bytes, body: bytes = b"") -> bytes:
    return head(b"POST", b"/retrieve", b"Host: t", b"Content-Type: application/json", *headers) + body


QUERY = b'{"query": "Who wrote The Salt Clock?", "topk": 1}'
CLOSE = b"Connection: close"


def chunked(body: bytes, size: int) -> bytes:
    return b"".join(
        b"%x\r\n" % len(body[i : i + size]) + body[i : i + size] + b"\r\n" for i in range(0, len(body), size)
    )


# ---- scenarios that need more than one write ------------------------------------------------------------------------


def dribble_head(server: Server) -> tuple[list[int], float | None, bytes]:
    """A header sent one byte every 50 ms (slowloris): the head deadline counts from the connection, so the drip
    does not extend it."""
    with connect(server) as sock:
        t0 = time.monotonic()
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\nX-Slow: ")
        while time.monotonic() - t0 < TIMEOUT_S + SLACK_S:
            try:
                sock.sendall(b"a")
            except OSError:
                break
            time.sleep(0.05)
        data, _ = read_all(sock, 0.5)
        elapsed = time.monotonic() - t0
    return statuses(data), (elapsed if elapsed < TIMEOUT_S + SLACK_S else None), data


def head_grows_in_pieces(server: Server) -> tuple[list[int], float | None, bytes]:
    """A header value sent 4 KiB at a time, never finished: the incomplete head passes 16 KiB -> 431, closed."""
    with connect(server) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\nX-Big: ")
        for _ in range(16):  # up to 64 KiB
            try:
                sock.sendall(b"b" * 4096)
            except OSError:
                break
            time.sleep(0.01)
        data, closed = read_all(sock, 3)
    return statuses(data), closed, data


def then_disconnect(raw: bytes, *, reset: bool = False) -> Callable[[Server], tuple[list[int], float | None, bytes]]:
    """Send ``raw`` and vanish (``reset``: with a TCP RST, as a crashed client's kernel would)."""

    def run(server: Server) -> tuple[list[int], float | None, bytes]:
        sock = connect(server)
        sock.sendall(raw)
        if reset:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        return [], 0.0, b""

    return run


def drip_body(framing: bytes, first: bytes) -> Callable[[Server], tuple[list[int], float | None, bytes]]:
    """A body sent a byte every TIMEOUT_S / 2 (never a gap long enough for --body-timeout) after ``first``: cut at the
    body deadline. The time returned counts from the complete head."""

    def run(server: Server) -> tuple[list[int], float | None, bytes]:
        with connect(server) as sock:
            sock.sendall(post(framing, body=first))
            t0 = time.monotonic()
            while time.monotonic() - t0 < DEADLINE_S + SLACK_S:
                time.sleep(TIMEOUT_S / 2)
                try:
                    sock.sendall(b" ")
                except OSError:
                    break
            data, _ = read_all(sock, 0.5)
            elapsed = time.monotonic() - t0
        return statuses(data), (elapsed if elapsed < DEADLINE_S + SLACK_S else None), data

    return run


def half_close(server: Server) -> tuple[list[int], float | None, bytes]:
    """A complete request, then the client shuts its sending side (a pattern of simple scripts)."""
    with connect(server) as sock:
        sock.sendall(head(b"GET", b"/health", b"Host: t"))
        sock.shutdown(socket.SHUT_WR)
        data, closed = read_all(sock, 3)
    return statuses(data), closed, data


def pipelined_then_gone(server: Server) -> tuple[list[int], float | None, bytes]:
    """100 pipelined ``POST /retrieve`` on one connection, none of the answers read, then the client closes; three
    times. The server is still answering the first of them when the connection goes."""
    request = post(b"Content-Length: %d" % len(QUERY), body=QUERY)
    for _ in range(3):
        with connect(server) as sock:
            sock.sendall(request * 100)
            time.sleep(0.2)
    return [], 0.0, b""


def connect_flood(server: Server) -> tuple[list[int], float | None, bytes]:
    """50 connections opened and closed at once without a byte."""
    for _ in range(50):
        connect(server).close()
    return [], 0.0, b""


# ---- the table ------------------------------------------------------------------------------------------------------


def post_json(obj: object) -> bytes:
    body = json.dumps(obj).encode()
    return post(b"Content-Length: %d" % len(body), CLOSE, body=body)


CLOSED = "closed within the timeout"
CUT = "closed at the body deadline"
SENT = "nothing to read"
GET_HEALTH = head(b"GET", b"/health", b"Host: t", CLOSE)
BIG = b"a" * 40_000

# (kind, what is sent or a scenario, the expected outcome: a set of allowed first statuses, CLOSED or SENT)
CASES: list[tuple[str, bytes | Callable[[Server], tuple[list[int], float | None, bytes]], object]] = [
    # slow and idle clients
    ("idle connection", b"", CLOSED),
    ("partial request line", b"POST /retr", CLOSED),
    ("partial headers", b"POST /retrieve HTTP/1.1\r\nHost: t\r\n", CLOSED),
    ("header dribbled a byte at a time", dribble_head, CLOSED),
    ("body stalls (content-length)", post(b"Content-Length: 100", body=b'{"query": "a'), CLOSED),
    ("body stalls mid-chunk", post(b"Transfer-Encoding: chunked", body=b'20\r\n{"query"'), CLOSED),
    ("body dripped a byte at a time", drip_body(b"Content-Length: 100", b'{"query": "a'), CUT),
    ("chunk dripped a byte at a time", drip_body(b"Transfer-Encoding: chunked", b'64\r\n{"query": "a'), CUT),
    # oversized heads
    ("one 40 KB header", head(b"GET", b"/health", b"Host: t", b"X-Big: " + BIG, CLOSE), {431}),
    ("head grows past 16 KiB in pieces", head_grows_in_pieces, {431}),
    ("40 KB URL path", head(b"GET", b"/" + BIG, b"Host: t", CLOSE), {431}),
    ("40 KB query string", head(b"GET", b"/health?x=" + BIG, b"Host: t", CLOSE), {431}),
    ("200 headers", head(b"GET", b"/health", b"Host: t", CLOSE, *(b"X-%d: 1" % i for i in range(200))), {431}),
    ("101 headers", head(b"GET", b"/health", b"Host: t", CLOSE, *(b"X-%d: 1" % i for i in range(99))), {431}),
    # not HTTP/1.1 at all
    ("binary garbage", b"\x00\x01\x02\xff garbage\r\n\r\n", {400}),
    ("TLS ClientHello on the plain port", bytes.fromhex("16030100a5010000a10303") + os.urandom(64), {400}),
    ("HTTP/2 prior-knowledge preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", {400}),
    ("HTTP/9.9", head(b"GET", b"/health", b"Host: t", version=b"HTTP/9.9"), {400, 505}),
    ("request line without a version", b"GET /health\r\n\r\n", {400}),
    ("POST line without a version", b"POST /retrieve\r\nContent-Length: %d\r\n\r\n" % len(QUERY) + QUERY, {400}),
    ("lower-case method", head(b"get", b"/health", b"Host: t", CLOSE), {400}),
    ("unknown method", head(b"FOO", b"/health", b"Host: t", CLOSE), {400, 405}),
    # malformed headers
    ("header without a colon", head(b"GET", b"/health", b"Host: t", b"NoColonHere", CLOSE), {400}),
    ("space in a header name", head(b"GET", b"/health", b"Host: t", b"Bad Name: x", CLOSE), {400}),
    ("control byte in a header value", head(b"GET", b"/health", b"Host: t", b"X-C: a\x01b", CLOSE), {400}),
    ("obsolete line folding", head(b"GET", b"/health", b"Host: t", b"X-F: a", b" folded", CLOSE), {400}),
    ("bare LF line ends", b"GET /health HTTP/1.1\nHost: t\nConnection: close\n\n", {200, 400}),
    # request smuggling and bogus lengths
    ("two different Content-Length", post(b"Content-Length: 5", b"Content-Length: 6", body=b"{}"), {400}),
    (
        "Content-Length with chunked",
        post(b"Content-Length: 5", b"Transfer-Encoding: chunked", body=b"0\r\n\r\n"),
        {400},
    ),
    ("negative Content-Length", post(b"Content-Length: -1", body=b"{}"), {400}),
    ("non-numeric Content-Length", post(b"Content-Length: 12abc", body=b"{}"), {400}),
    ("Content-Length 10^30", post(b"Content-Length: " + b"1" + b"0" * 30), {400, 413}),
    ("declared 1 GiB body", post(b"Content-Length: %d" % (1 << 30), body=b'{"query": '), {413}),
    ("Expect: 100-continue over the limit", post(b"Content-Length: %d" % (1 << 30), b"Expect: 100-continue"), {413}),
    ("unknown Transfer-Encoding", post(b"Transfer-Encoding: gzip", body=b"{}"), {400, 501}),
    # malformed chunked bodies
    ("chunk size not hex", post(b"Transfer-Encoding: chunked", body=b"ZZ\r\nabc\r\n0\r\n\r\n"), {400}),
    ("chunk size overflows", post(b"Transfer-Encoding: chunked", body=b"F" * 40 + b"\r\nabc\r\n0\r\n\r\n"), {400}),
    ("chunk without its CRLF", post(b"Transfer-Encoding: chunked", body=b"3\r\nabcXY0\r\n\r\n"), {400}),
    (
        "chunked body over the limit",
        post(b"Transfer-Encoding: chunked", body=chunked(b"x" * (MAX_BODY + (2 << 20)), 1 << 20) + b"0\r\n\r\n"),
        {413},
    ),
    # valid but unusual framing
    ("one-byte chunks", post(b"Transfer-Encoding: chunked", CLOSE, body=chunked(QUERY, 1) + b"0\r\n\r\n"), {200}),
    (
        "chunked with trailers",
        post(b"Transfer-Encoding: chunked", CLOSE, body=chunked(QUERY, 16) + b"0\r\nX-Trailer: 1\r\n\r\n"),
        {200},
    ),
    ("two pipelined requests", head(b"GET", b"/health", b"Host: t") + GET_HEALTH, {200}),
    ("HTTP/1.0 without Host", head(b"GET", b"/health", version=b"HTTP/1.0"), {200}),
    ("HTTP/1.1 without Host", head(b"GET", b"/health", CLOSE), {200, 400}),
    (
        "WebSocket upgrade",
        head(b"GET", b"/health", b"Host: t", b"Connection: Upgrade", b"Upgrade: websocket", CLOSE),
        {200},
    ),
    (
        "h2c upgrade",
        head(b"GET", b"/health", b"Host: t", b"Connection: Upgrade, HTTP2-Settings", b"Upgrade: h2c", CLOSE),
        {200},
    ),
    ("absolute-form target", head(b"GET", b"http://evil.example/health", b"Host: t", CLOSE), {200, 400, 404}),
    # paths
    ("path traversal", head(b"GET", b"/../../etc/passwd", b"Host: t", CLOSE), {404}),
    ("NUL in the path", head(b"GET", b"/health%00", b"Host: t", CLOSE), {404}),
    ("non-ASCII path bytes", head(b"GET", b"/h\xe9alth", b"Host: t", CLOSE), {400, 404}),
    ("GET /docs (off by default)", head(b"GET", b"/docs", b"Host: t", CLOSE), {404}),
    ("GET /openapi.json (off by default)", head(b"GET", b"/openapi.json", b"Host: t", CLOSE), {404}),
    ("GET /redoc (off by default)", head(b"GET", b"/redoc", b"Host: t", CLOSE), {404}),
    # clients that vanish
    ("disconnect mid-body", then_disconnect(post(b"Content-Length: 100", body=b'{"q')), SENT),
    ("disconnect mid-chunk", then_disconnect(post(b"Transfer-Encoding: chunked", body=b"20\r\n{")), SENT),
    (
        "reset right after a full request",
        then_disconnect(post(b"Content-Length: %d" % len(QUERY), body=QUERY), reset=True),
        SENT,
    ),
    ("half-closed after the request", half_close, {200}),
    ("50 connects without a byte", connect_flood, SENT),
    ("100 pipelined POSTs, none read, then gone", pipelined_then_gone, SENT),
    # the cost of one request
    (
        "8192 queries x topk 100",  # 41 KB in; it returned 181 MB and added 454 MB of RSS
        post_json({"queries": ["a"] * 8192, "topk": 100, "return_scores": True}),
        ({422}, "(max_hits_per_request)"),
    ),
    (
        "20 queries of 4,088 characters",  # 20 x 256 tokens: over the server's 4096
        post_json({"queries": [LONG_QUERY] * 20, "topk": 3}),
        ({422}, "(max_request_tokens)"),
    ),
]


def run_case(server: Server, sent: object) -> tuple[list[int], float | None, bytes]:
    if callable(sent):
        return sent(server)
    return exchange(server, sent, deadline_s=TIMEOUT_S + SLACK_S + 1)


def test_300_mib_chunked_body_is_cut_at_the_limit(server):
    """Streamed, never buffered: the server's peak RSS grows by less than 64 MiB (2 x the 32 MiB body limit).

    First in the module, so that no earlier large body has left freed memory for this one to reuse unseen."""
    status_file = Path(f"/proc/{server.pid}/status")

    def kib(key: str) -> int:
        line = next(line for line in status_file.read_text().splitlines() if line.startswith(key))
        return int(line.split()[1])

    Path(f"/proc/{server.pid}/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current RSS
    base = kib("VmRSS")
    piece = b"%x\r\n" % (1 << 16) + b"x" * (1 << 16) + b"\r\n"
    sent = 0
    with connect(server) as sock:
        sock.sendall(post(b"Transfer-Encoding: chunked"))
        try:
            while sent < 300 << 20:
                sock.sendall(piece)
                sent += 1 << 16
            sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the server answered 413 and closed the connection
        data, _ = read_all(sock, 5)
    growth_mib = (kib("VmHWM") - base) / 1024
    print(
        f"300 MiB chunked body: {sent >> 20} MiB written before the server closed; peak RSS growth {growth_mib:.1f} MiB"
    )
    assert growth_mib < 64
    assert sent < 300 << 20  # the server stopped reading (limit + 1 MiB of drain), it did not swallow 300 MiB
    assert not data or statuses(data) == [413]
    assert httpx.get(f"http://127.0.0.1:{server.port}/health").status_code == 200


def unexpected_outcomes(server: Server, cases: list, workers: int = 12) -> list[str]:
    """Run the cases concurrently; the ones whose outcome is not the expected one, described."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda case: run_case(server, case[1]), cases))
    failures = []
    for (kind, _, expected), (codes, closed_after, data) in zip(cases, results, strict=True):
        if expected == CLOSED:
            ok = not codes and closed_after is not None and closed_after <= TIMEOUT_S + SLACK_S
        elif expected == CUT:  # by the deadline, not earlier by the gap timer (the drip never leaves a gap)
            ok = not codes and closed_after is not None and DEADLINE_S - 0.2 <= closed_after <= DEADLINE_S + SLACK_S
        elif expected == SENT:
            ok = True
        else:
            allowed, says = expected if isinstance(expected, tuple) else (expected, "")
            ok = bool(codes) and codes[0] in allowed
            if ok and codes[0] >= 400 and b"application/json" in data:  # our JSON errors explain themselves
                message = json.loads(data.split(b"\r\n\r\n", 1)[1])["error"]["message"]
                ok = len(message) > 20 and says in message
        outcome = f"answered {codes[0]}" if codes else "no answer"
        if closed_after is not None:
            outcome += f", closed after {closed_after:.2f} s"
        print(f"  {kind}: {outcome}")  # the table of cases and outcomes (pytest -s)
        if not ok:
            failures.append(f"{kind}: expected {expected}, got statuses {codes}, closed after {closed_after}")
    return failures


def assert_quiet_log(new: list[str], most: int) -> None:
    """At most ``most`` new log lines, none of them a traceback or an error."""
    assert len(new) <= most, "\n".join(new)
    assert not [line for line in new if "Traceback" in line or "ERROR" in line], "\n".join(new)


def test_hostile_requests_get_a_bounded_answer(server):
    assert len(CASES) >= 40
    before = len(server.log_lines())
    failures = unexpected_outcomes(server, CASES)
    assert not failures, "\n".join(failures)
    # every pipelined request is answered
    codes, _, _ = run_case(server, head(b"GET", b"/health", b"Host: t") * 99 + GET_HEALTH)
    assert codes == [200] * 100
    # the server is fine, and logged at most one line per hostile connection, none of them a traceback or an error
    time.sleep(TIMEOUT_S)
    assert_quiet_log(server.log_lines()[before:], most=len(CASES) + 2)  # the pipelined case holds 3 connections
    health = httpx.get(f"http://127.0.0.1:{server.port}/health").json()
    assert health["status"] == "ok"
    # /health names the index and the model without their absolute paths
    assert not health["index"].startswith("/") and not health["model"].startswith("/")


def test_a_connection_over_the_cap_is_answered_503_and_logged(server):
    before = len(server.log_lines())
    held = [connect(server) for _ in range(MAX_CONNECTIONS)]  # idle: each is closed by the header timeout (1 s)
    try:
        with connect(server) as extra:
            extra.sendall(GET_HEALTH)
            data, closed = read_all(extra, TIMEOUT_S)
    finally:
        for sock in held:
            sock.close()
    assert statuses(data) == [503] and closed is not None, data
    error = json.loads(data.split(b"\r\n\r\n", 1)[1])["error"]
    assert error["type"] == "service_unavailable" and f"limit of {MAX_CONNECTIONS} open connections" in error["message"]
    assert b"retry-after: 1" in data.lower()
    deadline = time.monotonic() + 5
    while True:  # the held connections are gone: /health answers again
        try:
            if httpx.get(f"http://127.0.0.1:{server.port}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the server did not recover from its connection limit"
        time.sleep(0.1)
    warnings = [line for line in server.log_lines()[before:] if "connection limit reached" in line]
    assert len(warnings) == 1 and " WARNING " in warnings[0] and f"max_connections {MAX_CONNECTIONS}" in warnings[0]


def test_a_maximal_request_delays_a_one_query_request_by_about_one_micro_batch(server):
    """The largest request the server allows (16 queries of 256 tokens: MAX_REQUEST_TOKENS) runs as 16 micro-batches
    of MAX_BATCH_TOKENS; 1-query requests sent meanwhile, one after the other, are each answered after at most the
    micro-batch running when they arrived and their own, long before the big request ends."""
    url = f"http://127.0.0.1:{server.port}"
    big_done: list[float] = []

    def big_request() -> httpx.Response:
        try:
            return httpx.post(f"{url}/retrieve", json={"queries": [LONG_QUERY] * 16, "topk": 3}, timeout=120)
        finally:
            big_done.append(time.monotonic())

    small: list[tuple[float, float]] = []  # (sent, answered)
    with ThreadPoolExecutor(max_workers=1) as pool:
        big = pool.submit(big_request)
        time.sleep(0.3)  # the big request is being served
        while not big_done and len(small) < 200:
            t0 = time.monotonic()
            answer = httpx.post(f"{url}/retrieve", json={"query": "Who wrote The Salt Clock?", "topk": 1}, timeout=60)
            assert answer.status_code == 200 and len(answer.json()["result"][0]) == 1
            small.append((t0, time.monotonic()))
        response = big.result()
    assert response.status_code == 200 and [len(hits) for hits in response.json()["result"]] == [3] * 16
    served = httpx.get(f"{url}/health").json()["served"]
    micro_batch_s = served["longest_batch_seconds"]
    before_big = [answered - sent for sent, answered in small if answered < big_done[0]]
    print(f"1-query latencies while the maximal request ran: {[round(x, 3) for x in before_big]} s; longest batch "
          f"{micro_batch_s:.3f} s")  # fmt: skip
    assert len(before_big) >= 3, small  # by queries alone the big request was one batch, and they all waited for it
    assert max(before_big) <= 3 * micro_batch_s + 0.5  # the running micro-batch and their own, with scheduling slack
    assert served["largest_batch_tokens"] <= MAX_BATCH_TOKENS


def test_the_post_path_is_the_one_asked_for(server, request):
    """The server says at start-up, in one INFO line, which path POST requests take: the one its flags asked for."""
    lines = [line for line in server.log_lines() if "POST /retrieve and /encode" in line]
    if request.node.callspec.params["server"] == "fast_post":
        assert lines and lines[0].endswith("answered by the connection (retriever_server.fast_post)"), lines
    else:
        assert lines and lines[0].endswith("go through the ASGI app (fast_post off: --no-fast-post)"), lines
    assert len(lines) == 1 and " INFO " in lines[0]


def test_the_cli_fits_max_connections_under_the_open_file_limit(server):
    lowered = [line for line in server.log_lines() if "max_connections lowered" in line]
    assert len(lowered) == 1 and f"from 4096 to {MAX_CONNECTIONS}" in lowered[0] and "ulimit -n" in lowered[0]


@pytest.fixture(scope="module")
def h11_server(retriever):
    """The same app and rules on uvicorn's other parser, h11 (what runs where httptools is not installed), in a
    thread of this process."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    from retriever_server.app import ServerConfig, create_app
    from retriever_server.http_guard import guarded_protocol, uvicorn_config

    limits = dict(header_timeout_s=TIMEOUT_S, body_timeout_s=TIMEOUT_S, keep_alive_timeout_s=TIMEOUT_S)
    config = ServerConfig(port=free_port(), max_body_bytes=1 << 20, **limits)
    settings = uvicorn_config(create_app(retriever, config), config, log_level="warning")
    settings.http = guarded_protocol(config, H11Protocol)
    with uvicorn_in_thread(settings):
        yield Server(config.port, os.getpid(), Path(os.devnull))


H11_CASES = [
    case
    for case in CASES
    if case[0]
    in (
        "idle connection",
        "partial headers",
        "body stalls (content-length)",
        "body stalls mid-chunk",
        "head grows past 16 KiB in pieces",
        "two different Content-Length",
        "Content-Length with chunked",
        "chunk size not hex",
        "one-byte chunks",
        "declared 1 GiB body",
        "one 40 KB header",
        "request line without a version",
    )
] + [
    (
        "chunked body over a 1 MiB limit",
        post(b"Transfer-Encoding: chunked", body=chunked(b"x" * (2 << 20), 1 << 16)),
        {413},
    ),
]


def test_the_rules_hold_on_the_h11_parser_too(h11_server):
    failures = unexpected_outcomes(h11_server, H11_CASES, workers=len(H11_CASES))
    assert not failures, "\n".join(failures)


def test_150_idle_connections_are_closed_within_the_header_timeout(server):
    socks, connected_at = [], []
    for _ in range(150):
        socks.append(connect(server))
        connected_at.append(time.monotonic())

    def closed_at(sock: socket.socket) -> float | None:
        start = time.monotonic()
        after = read_all(sock, TIMEOUT_S + SLACK_S + 1)[1]
        return None if after is None else start + after

    try:
        with ThreadPoolExecutor(max_workers=50) as pool:
            closes = list(pool.map(closed_at, socks))
    finally:
        for sock in socks:
            sock.close()
    assert all(c is not None for c in closes), f"{sum(c is None for c in closes)} connections still open"
    lifetimes = [c - t for c, t in zip(closes, connected_at, strict=True)]
    print(
        f"150 idle connections: closed {min(lifetimes):.2f}-{max(lifetimes):.2f} s after each connected "
        f"(header timeout {TIMEOUT_S} s)"
    )
    assert max(lifetimes) <= TIMEOUT_S + SLACK_S  # closed by the header timeout, not held
    assert min(lifetimes) >= 0.9 * TIMEOUT_S  # and not before it


def test_disconnect_storm_logs_one_line_per_request_at_most(server):
    """200 malformed or abandoned requests: at most 200 log lines, all INFO, no traceback; the server still serves."""
    before = len(server.log_lines())
    kinds = [
        post(b"Transfer-Encoding: chunked", body=b"ZZ\r\n"),  # malformed chunk size
        post(b"Content-Length: 100", body=b'{"q'),  # body cut short
        post(b"Transfer-Encoding: chunked", body=b"10\r\n{"),  # chunk cut short
        b"\x16\x03\x01garbage\r\n\r\n",  # not HTTP
    ]
    for i in range(200):
        then_disconnect(kinds[i % len(kinds)], reset=i % 2 == 1)(server)
    time.sleep(TIMEOUT_S)
    ok = httpx.post(
        f"http://127.0.0.1:{server.port}/retrieve", content=QUERY, headers={"content-type": "application/json"}
    )
    assert ok.status_code == 200 and len(ok.json()["result"][0]) == 1
    new = server.log_lines()[before:]
    print(f"disconnect storm: 200 requests, {len(new)} log lines")
    assert len(new) <= 200, "\n".join(new[-20:])
    assert all(" INFO retriever_server.http: " in line for line in new), "\n".join(new[:20])
