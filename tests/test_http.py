"""The shared retry policy (agentrag_verl.http) against a real HTTP server on 127.0.0.1, through both transports."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentrag_verl import http
from agentrag_verl.http import RequestError, RetryPolicy

pytestmark = pytest.mark.timeout(60)

SECRET = "sk-http-test-4e1b"  # sent as the bearer token; must never appear in an error


class ScriptedServer:
    """Answers each request with the next scripted action, then with ``200 {"ok": true}``; records arrival times.

    Actions: ``(status, body)``, ``(status, body, headers)``, ``"drop"`` (close the connection without answering)
    or ``("sleep", seconds)`` (answer 200 after that long).
    """

    def __init__(self, script: list) -> None:
        self.script = list(script)
        self.arrivals: list[float] = []
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # keep the test output clean
                pass

            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self._answer()

            def _answer(self) -> None:
                with owner.lock:
                    owner.arrivals.append(time.perf_counter())
                    action = owner.script.pop(0) if owner.script else (200, {"ok": True})
                if action == "drop":
                    self.close_connection = True
                    return
                if action[0] == "sleep":
                    time.sleep(action[1])
                    action = (200, {"ok": True})
                status, body, headers = (*action, {})[:3]
                payload = json.dumps(body).encode() if not isinstance(body, bytes) else body
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/call"
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def calls(self) -> int:
        return len(self.arrivals)


@pytest.fixture
def serve():
    servers = []

    def start(*script) -> ScriptedServer:
        servers.append(ScriptedServer(list(script)))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


async def send(transport: str, url: str, policy: RetryPolicy, timeout_s: float = 5.0) -> tuple[http.Response, list]:
    """One request through ``transport`` under ``policy``; returns the answer and the ``(kind, retry, delay)`` of
    each retry."""
    retries = []
    headers = {"Authorization": f"Bearer {SECRET}"}
    if transport == "httpx":
        client = http.httpx_client(timeout_s, 4, headers)

        def attempt():
            return http.httpx_request(client, "POST", url, json={"q": 1})
    else:
        client = http.aiohttp_session(timeout_s, 4, headers)

        def attempt():
            return http.aiohttp_request(client, "POST", url, data=b'{"q": 1}')

    try:
        response = await policy.call(attempt, on_retry=lambda e, k, d: retries.append((e.kind, k, d)))
    finally:
        await (client.aclose() if transport == "httpx" else client.close())
    return response, retries


TRANSPORTS = pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
FAST = RetryPolicy(max_retries=3, backoff_base_s=0.001, backoff_max_s=0.01)


@TRANSPORTS
@pytest.mark.parametrize(
    ("action", "kind"),
    [
        ((500, {"error": {"message": "boom"}}), "server_error"),
        ((503, b"busy"), "server_error"),
        ((429, {"error": {"message": "slow down"}}), "rate_limit"),
        ((408, b""), "timeout"),
        ("drop", "connection"),  # the server closes the connection without answering
    ],
)
async def test_transient_failures_are_retried_until_an_answer(serve, transport, action, kind):
    server = serve(action, action)
    response, retries = await send(transport, server.url, FAST)
    assert response.status == 200 and response.json() == {"ok": True}
    assert server.calls == 3  # two failures, then the answer
    assert [(k, n) for k, n, _ in retries] == [(kind, 1), (kind, 2)]


@TRANSPORTS
async def test_a_slow_answer_is_a_timeout_and_is_retried(serve, transport):
    server = serve(("sleep", 1.0))  # longer than the 0.2 s deadline of an attempt
    response, retries = await send(transport, server.url, FAST, timeout_s=0.2)
    assert response.status == 200 and server.calls == 2
    assert [kind for kind, _, _ in retries] == ["timeout"]


@TRANSPORTS
@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_other_4xx_are_not_retried(serve, transport, status):
    server = serve((status, {"error": {"message": "model not found"}}))
    with pytest.raises(RequestError) as info:
        await send(transport, server.url, FAST)
    error = info.value
    assert server.calls == 1 and error.attempts == 1
    assert (error.kind, error.status, error.retryable) == ("client_error", status, False)
    assert error.message == f"HTTP {status}: model not found"  # the answer's error message, not the raw JSON
    assert SECRET not in str(error)


@TRANSPORTS
@pytest.mark.parametrize(
    "body",
    [
        {"error": {"message": f"Incorrect API key provided: {SECRET}.", "code": "invalid_api_key"}},  # JSON message
        f"<html>401: key {SECRET} rejected</html>".encode(),  # not JSON: the start of the body is quoted
        ("x" * 190 + SECRET).encode(),  # the 200-character cut falls inside the key: no prefix of it may survive
    ],
    ids=["json", "text", "cut"],
)
async def test_an_echoed_key_is_redacted(serve, transport, body):
    # Some gateways quote the rejected key in their 401 body; the error (and any log line made from it) must not.
    server = serve((401, body))
    with pytest.raises(RequestError) as info:
        await send(transport, server.url, FAST)
    message = info.value.message
    assert SECRET[:8] not in message and SECRET[:8] not in repr(info.value), message
    assert message.startswith("HTTP 401: ") and http.REDACTED in message


@TRANSPORTS
async def test_an_unusable_answer_is_quoted_redacted(serve, transport):
    # A 200 that is not what the caller expects is quoted in its error through Response.detail(), redacted too.
    server = serve((200, {"message": f"welcome {SECRET}"}))
    response, _ = await send(transport, server.url, FAST)
    assert response.detail() == f"welcome {http.REDACTED}"
    assert SECRET not in repr(response)


def test_credentials_are_read_from_every_credential_header():
    headers = {"Authorization": "Bearer sk-a", "api-key": "az-b", "X-Api-Key": "xk-c", "Accept": "sk-not-a-key"}
    assert sorted(http.credentials(headers, None)) == ["az-b", "sk-a", "xk-c"]
    assert http.credentials({"Authorization": "Bearer "}) == ("Bearer",)  # a scheme without a token is itself kept
    assert http.redact("a sk-long b sk-l", http.credentials({"api-key": "sk-l"}, {"x-api-key": "sk-long"})) == (
        "a <redacted> b <redacted>"  # the longer secret first, so a key containing another is replaced whole
    )


@TRANSPORTS
async def test_gives_up_after_max_retries_with_the_last_error(serve, transport):
    server = serve(*[(503, b"still loading")] * 10)
    policy = RetryPolicy(max_retries=2, backoff_base_s=0.001, backoff_max_s=0.01)
    with pytest.raises(RequestError) as info:
        await send(transport, server.url, policy)
    assert server.calls == 3  # 1 + max_retries
    assert (info.value.kind, info.value.attempts, info.value.message) == ("server_error", 3, "HTTP 503: still loading")


@TRANSPORTS
async def test_unreachable_server_gives_up_as_a_connection_error(serve, transport):
    server = serve()
    url = server.url
    server.close()  # nothing listens on the port any more
    policy = RetryPolicy(max_retries=2, backoff_base_s=0.001, backoff_max_s=0.01)
    with pytest.raises(RequestError) as info:
        await send(transport, url, policy)
    assert info.value.kind == "connection" and info.value.attempts == 3 and info.value.status is None


@TRANSPORTS
async def test_waits_grow_exponentially_and_stay_bounded(serve, transport):
    server = serve(*[(500, b"x")] * 4)
    # base 0.05 s, cap 0.15 s: waits 0.05-0.0625, 0.1-0.125, then 0.15 (0.2 capped), then 0.15
    policy = RetryPolicy(max_retries=4, backoff_base_s=0.05, backoff_max_s=0.15)
    _, retries = await send(transport, server.url, policy)
    delays = [delay for _, _, delay in retries]
    assert 0.05 <= delays[0] <= 0.0625 and 0.1 <= delays[1] <= 0.125 and delays[2:] == [0.15, 0.15]
    gaps = [b - a for a, b in itertools.pairwise(server.arrivals)]
    slack = 0.1  # request round trip and scheduling on a loaded host
    assert all(delay <= gap < delay + slack for delay, gap in zip(delays, gaps, strict=True)), (delays, gaps)


@TRANSPORTS
async def test_retry_after_is_honoured_but_capped(serve, transport):
    server = serve((429, b"wait", {"retry-after-ms": "300"}), (503, b"wait", {"Retry-After": "60"}))
    policy = RetryPolicy(max_retries=3, backoff_base_s=0.001, backoff_max_s=0.5)
    started = time.perf_counter()
    _, retries = await send(transport, server.url, policy)
    assert [delay for _, _, delay in retries] == [0.3, 0.5]  # the server's 0.3 s; its 60 s capped at 0.5 s
    assert time.perf_counter() - started >= 0.8


def test_backoff_is_bounded_for_any_retry():
    policy = RetryPolicy(backoff_base_s=0.5, backoff_max_s=20.0)
    for retry in range(200):  # no overflow far past the cap
        step = min(20.0, 0.5 * 2**retry)
        assert step <= policy.backoff_s(retry) <= 20.0
    assert policy.backoff_s(0, retry_after=1e9) == 20.0


def test_status_mapping():
    kinds = {code: http.status_error(code, b"").kind for code in (400, 401, 404, 408, 422, 429, 500, 502, 503, 599)}
    assert kinds == {
        400: "client_error",
        401: "client_error",
        404: "client_error",
        408: "timeout",
        422: "client_error",
        429: "rate_limit",
        500: "server_error",
        502: "server_error",
        503: "server_error",
        599: "server_error",
    }
    assert http.status_error(500, b"", {"Retry-After": "3"}).retry_after is None  # read on 429 and 503 only


def test_caller_failures_can_be_retryable():
    assert RequestError("empty_reply", "no content", retryable=True).retryable
    assert not RequestError("parse_error", "no verdict").retryable  # unknown kinds are not retried by default


def test_invalid_policy_is_rejected():
    with pytest.raises(ValueError, match="max_retries"):
        RetryPolicy(max_retries=-1)
    with pytest.raises(ValueError, match="backoff"):
        RetryPolicy(backoff_base_s=-0.1)


def test_import_is_light():
    code = "import agentrag_verl.http, sys; print(sorted(m for m in ('httpx', 'aiohttp', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
