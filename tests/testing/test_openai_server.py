"""Tests for agentrag_verl.testing.openai_server: real HTTP round trips with httpx and the openai client."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from agentrag_verl.testing.openai_server import (
    DEFAULT_MODEL,
    DEFAULT_REPLY,
    FakeOpenAIServer,
    Fault,
    FaultKind,
    RecordedRequest,
)

try:
    import openai
except ImportError:  # the `judge` extra is not installed: the httpx tests still run
    openai = None

pytestmark = pytest.mark.timeout(60)
needs_openai = pytest.mark.skipif(openai is None, reason="needs the openai client (pip install agentrag-verl[judge])")

API_KEY = "sk-test-secret-key-1234"
USER_MSG = [{"role": "user", "content": "hello big world"}]


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loopback requests must not be routed through a proxy configured in the environment."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(replies=["one two", "three"]) as srv:
        yield srv


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10, trust_env=False) as client:
        yield client


def _chat(http: httpx.Client, srv: FakeOpenAIServer, **extra: object) -> httpx.Response:
    return http.post(f"{srv.base_url}/chat/completions", json={"model": "m", "messages": USER_MSG, **extra})


def _openai_client(srv: FakeOpenAIServer, **kwargs: object) -> openai.OpenAI:
    kwargs.setdefault("api_key", "unused")
    kwargs.setdefault("max_retries", 0)
    kwargs.setdefault("timeout", 10)
    return openai.OpenAI(base_url=srv.base_url, **kwargs)


# ---------------------------------------------------------------------------- lifecycle


def test_binds_loopback_ephemeral_port_and_stops() -> None:
    srv = FakeOpenAIServer()
    with pytest.raises(RuntimeError, match="not running"):
        _ = srv.base_url
    assert srv.start() is srv
    try:
        assert srv.running
        assert srv.port > 0
        assert srv.base_url == f"http://127.0.0.1:{srv.port}/v1"
        assert srv._httpd is not None and srv._httpd.server_address[0] == "127.0.0.1"
        with pytest.raises(RuntimeError, match="already running"):
            srv.start()
        port = srv.port
    finally:
        srv.stop()
    assert not srv.running
    srv.stop()  # idempotent
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2, trust_env=False)


def test_context_manager_restart_gets_a_working_server() -> None:
    srv = FakeOpenAIServer(replies="again")
    for _ in range(2):
        with srv:
            body = httpx.post(
                f"{srv.base_url}/completions", json={"model": "m", "prompt": "p"}, timeout=5, trust_env=False
            ).json()
            assert body["choices"][0]["text"] == "again"
        assert not srv.running


# ---------------------------------------------------------------------------- httpx round trips


def test_httpx_chat_completion_schema_and_usage(server: FakeOpenAIServer, http: httpx.Client) -> None:
    resp = _chat(http, server)
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "application/json"
    body = resp.json()
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert body["model"] == "m"
    assert isinstance(body["created"], int) and abs(body["created"] - time.time()) < 60
    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "one two", "refusal": None},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ]
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def test_httpx_text_completion_schema_and_usage(server: FakeOpenAIServer, http: httpx.Client) -> None:
    resp = http.post(f"{server.base_url}/completions", json={"model": "base", "prompt": "a b c d"})
    assert resp.status_code == 200
    body = resp.json()
    assert body["object"] == "text_completion"
    assert body["id"].startswith("cmpl-")
    assert body["model"] == "base"
    assert body["choices"] == [
        {"index": 0, "text": "one two", "logprobs": None, "finish_reason": "stop", "stop_reason": None}
    ]
    assert body["usage"] == {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}


def test_text_completion_names_the_stop_string_like_vllm(http: httpx.Client) -> None:
    # vLLM's stop_reason: which stop string ended the completion (the loop restores it when the text lacks it)
    with FakeOpenAIServer(replies="a b</conclusion> c") as srv:
        resp = http.post(
            f"{srv.base_url}/completions", json={"model": "m", "prompt": "p", "stop": ["</x>", "</conclusion>"]}
        )
    choice = resp.json()["choices"][0]
    assert (choice["text"], choice["finish_reason"], choice["stop_reason"]) == ("a b", "stop", "</conclusion>")


def test_httpx_models_list(http: httpx.Client) -> None:
    with FakeOpenAIServer(models=["a", "b"]) as srv:
        body = http.get(f"{srv.base_url}/models").json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["a", "b"]
    assert {m["object"] for m in body["data"]} == {"model"}


def test_default_reply_and_model(http: httpx.Client) -> None:
    with FakeOpenAIServer() as srv:
        body = http.post(f"{srv.base_url}/chat/completions", json={"messages": USER_MSG}).json()
        models = http.get(f"{srv.base_url}/models").json()
    assert body["choices"][0]["message"]["content"] == DEFAULT_REPLY
    assert body["model"] == DEFAULT_MODEL
    assert [m["id"] for m in models["data"]] == [DEFAULT_MODEL]


def test_n_choices_same_text_and_usage(server: FakeOpenAIServer, http: httpx.Client) -> None:
    body = _chat(http, server, n=3).json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert [c["message"]["content"] for c in body["choices"]] == ["one two"] * 3
    assert body["usage"]["completion_tokens"] == 6


def test_n_choices_from_list_reply(http: httpx.Client) -> None:
    with FakeOpenAIServer(replies=[["a", "b c"], ["only one"]]) as srv:
        body = http.post(f"{srv.base_url}/completions", json={"model": "m", "prompt": "p", "n": 2}).json()
        assert [c["text"] for c in body["choices"]] == ["a", "b c"]
        assert body["usage"]["completion_tokens"] == 3
        bad = http.post(f"{srv.base_url}/completions", json={"model": "m", "prompt": "p", "n": 2})
        assert bad.status_code == 500
        assert bad.json()["error"]["code"] == "reply_choice_count"
        assert srv.errors == ["reply has 1 choices but the request asked for n=2"]


@pytest.mark.parametrize(
    ("stop", "text", "finish"),
    [
        ("STOP", "alpha beta ", "stop"),
        (["gamma", "beta"], "alpha ", "stop"),
        (["zzz"], "alpha beta STOP gamma", "stop"),
        (None, "alpha beta STOP gamma", "stop"),
    ],
)
def test_stop_truncates_at_first_stop_string(http: httpx.Client, stop: object, text: str, finish: str) -> None:
    with FakeOpenAIServer(replies="alpha beta STOP gamma") as srv:
        body = _chat(http, srv, stop=stop).json()
    assert body["choices"][0]["message"]["content"] == text
    assert body["choices"][0]["finish_reason"] == finish
    assert body["usage"]["completion_tokens"] == len(text.split())


def test_max_tokens_truncates_with_finish_reason_length(http: httpx.Client) -> None:
    with FakeOpenAIServer(replies="w1  w2\nw3 w4") as srv:
        cut = _chat(http, srv, max_tokens=3).json()["choices"][0]
        whole = _chat(http, srv, max_completion_tokens=4).json()["choices"][0]
    assert (cut["message"]["content"], cut["finish_reason"]) == ("w1  w2\nw3", "length")
    assert (whole["message"]["content"], whole["finish_reason"]) == ("w1  w2\nw3 w4", "stop")


def test_bad_requests_get_openai_style_errors(server: FakeOpenAIServer, http: httpx.Client) -> None:
    not_json = http.post(f"{server.base_url}/chat/completions", content=b"{nope", headers={"content-type": "x"})
    assert not_json.status_code == 400
    no_messages = http.post(f"{server.base_url}/chat/completions", json={"model": "m"})
    assert no_messages.status_code == 400 and no_messages.json()["error"]["param"] == "messages"
    streaming = _chat(http, server, stream=True)
    assert streaming.status_code == 400 and streaming.json()["error"]["param"] == "stream"
    bad_n = _chat(http, server, n=0)
    assert bad_n.status_code == 400 and bad_n.json()["error"]["param"] == "n"
    unknown = http.post(f"{server.base_url}/embeddings", json={"input": "x"})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "unknown_url"
    wrong_method = http.get(f"{server.base_url}/chat/completions")
    assert wrong_method.status_code == 405
    # None of these consumed a scripted reply.
    assert _chat(http, server).json()["choices"][0]["message"]["content"] == "one two"


# ---------------------------------------------------------------------------- recording


def test_requests_are_recorded_with_path_and_body(server: FakeOpenAIServer, http: httpx.Client) -> None:
    _chat(http, server, temperature=0.5)
    http.get(f"{server.base_url}/models")
    http.post(f"{server.base_url}/completions", json={"model": "m", "prompt": "p"}, headers={"X-Trace": "t1"})
    reqs = server.requests
    assert [(r.method, r.path) for r in reqs] == [
        ("POST", "/v1/chat/completions"),
        ("GET", "/v1/models"),
        ("POST", "/v1/completions"),
    ]
    assert isinstance(reqs[0], RecordedRequest)
    assert reqs[0].body == {"model": "m", "messages": USER_MSG, "temperature": 0.5}
    assert reqs[1].body is None
    assert reqs[2].headers["x-trace"] == "t1"
    reqs.clear()  # a snapshot: the server's record is untouched
    assert len(server.requests) == 3


def test_reset_clears_records_faults_and_rewinds_script(server: FakeOpenAIServer, http: httpx.Client) -> None:
    assert _chat(http, server).json()["choices"][0]["message"]["content"] == "one two"
    server.inject(Fault.server_error(), times=3)
    server.reset()
    assert server.requests == [] and server.pending_faults == 0
    assert _chat(http, server).json()["choices"][0]["message"]["content"] == "one two"
    server.reset(replies="new script")
    assert _chat(http, server).json()["choices"][0]["message"]["content"] == "new script"
    assert len(server.requests) == 1


def test_concurrent_requests_each_consume_one_reply(http: httpx.Client) -> None:
    replies = [f"reply-{i}" for i in range(24)]
    got: list[str] = []
    lock = threading.Lock()

    def worker(client: httpx.Client) -> None:
        for _ in range(3):
            text = _chat(client, srv).json()["choices"][0]["message"]["content"]
            with lock:
                got.append(text)

    with FakeOpenAIServer(replies=replies) as srv:
        clients = [httpx.Client(timeout=10, trust_env=False) for _ in range(8)]
        threads = [threading.Thread(target=worker, args=(c,)) for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        for c in clients:
            c.close()
        assert sorted(got) == sorted(replies)
        assert len(srv.requests) == 24


def test_exhausted_script_returns_500_with_clear_error(server: FakeOpenAIServer, http: httpx.Client) -> None:
    assert _chat(http, server).status_code == 200
    assert _chat(http, server).status_code == 200
    resp = _chat(http, server)
    assert resp.status_code == 500
    error = resp.json()["error"]
    assert error["code"] == "replies_exhausted"
    assert "exhausted" in error["message"] and "2" in error["message"]
    assert len(server.errors) == 1 and "exhausted" in server.errors[0]


# ---------------------------------------------------------------------------- openai client


@needs_openai
def test_openai_sync_chat_completions_and_n(server: FakeOpenAIServer) -> None:
    client = _openai_client(server)
    chat = client.chat.completions.create(model="judge", messages=USER_MSG, n=2)
    assert [c.message.content for c in chat.choices] == ["one two", "one two"]
    assert chat.choices[1].index == 1 and chat.choices[0].finish_reason == "stop"
    assert chat.model == "judge"
    assert (chat.usage.prompt_tokens, chat.usage.completion_tokens, chat.usage.total_tokens) == (3, 4, 7)
    comp = client.completions.create(model="base", prompt="x y")
    assert comp.choices[0].text == "three"
    assert comp.usage.prompt_tokens == 2
    assert [m.id for m in client.models.list().data] == [DEFAULT_MODEL]
    assert server.requests[0].body["n"] == 2
    assert server.requests[0].headers["authorization"] == "<redacted>"


@needs_openai
async def test_openai_async_chat_and_completions(server: FakeOpenAIServer) -> None:
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=10)
    try:
        chat = await client.chat.completions.create(model="judge", messages=USER_MSG)
        comp = await client.completions.create(model="base", prompt="p", n=3)
    finally:
        await client.close()
    assert chat.choices[0].message.content == "one two"
    assert [c.text for c in comp.choices] == ["three"] * 3
    assert [r.path for r in server.requests] == ["/v1/chat/completions", "/v1/completions"]


@needs_openai
def test_openai_retries_through_injected_rate_limits() -> None:
    with FakeOpenAIServer(replies=["finally"]) as srv:
        srv.inject(Fault.rate_limit(retry_after=0.01), times=2)
        client = _openai_client(srv, max_retries=2)
        out = client.chat.completions.create(model="m", messages=USER_MSG)
        assert out.choices[0].message.content == "finally"
        assert len(srv.requests) == 3
        assert srv.pending_faults == 0


# ---------------------------------------------------------------------------- faults


@needs_openai
def test_timeout_fault_makes_clients_time_out() -> None:
    with FakeOpenAIServer(replies=[Fault.timeout(), "fast"]) as srv:
        srv.inject(Fault.timeout())
        with httpx.Client(timeout=0.3, trust_env=False) as http, pytest.raises(httpx.TimeoutException):
            _chat(http, srv)
        with pytest.raises(openai.APITimeoutError):
            _openai_client(srv, timeout=0.3).chat.completions.create(model="m", messages=USER_MSG)
        after = _openai_client(srv).chat.completions.create(model="m", messages=USER_MSG)
        assert after.choices[0].message.content == "fast"


@needs_openai
async def test_timeout_fault_async_openai_client() -> None:
    with FakeOpenAIServer(replies=[Fault.timeout(delay=30)]) as srv:
        client = openai.AsyncOpenAI(base_url=srv.base_url, api_key="unused", max_retries=0, timeout=0.3)
        try:
            with pytest.raises(openai.APITimeoutError):
                await client.chat.completions.create(model="m", messages=USER_MSG)
        finally:
            await client.close()


def test_short_timeout_fault_answers_after_its_delay(http: httpx.Client) -> None:
    with FakeOpenAIServer(replies=[Fault.timeout(delay=0.3, reply="late"), "next"]) as srv:
        srv.inject(Fault.timeout(delay=0.3))
        start = time.monotonic()
        first = _chat(http, srv).json()["choices"][0]["message"]["content"]
        assert time.monotonic() - start >= 0.3
        assert first == "late"  # the injected delay fell through to the scripted timeout entry
        assert _chat(http, srv).json()["choices"][0]["message"]["content"] == "next"


def test_stop_is_prompt_while_a_client_waits_on_a_timeout_fault() -> None:
    srv = FakeOpenAIServer(replies=[Fault.timeout(delay=60)]).start()
    url = f"{srv.base_url}/chat/completions"
    outcome: list[object] = []

    def client() -> None:
        try:
            outcome.append(httpx.post(url, json={"messages": USER_MSG}, timeout=30, trust_env=False).status_code)
        except httpx.HTTPError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=client)
    thread.start()
    deadline = time.monotonic() + 5
    while not srv.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(srv.requests) == 1
    start = time.monotonic()
    srv.stop()
    assert time.monotonic() - start < 2.0
    thread.join(5)
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], httpx.HTTPError)  # dropped, never answered


@needs_openai
def test_rate_limit_fault(http: httpx.Client) -> None:
    with FakeOpenAIServer(replies=[Fault.rate_limit(retry_after=7), Fault.rate_limit(message="slow down")]) as srv:
        resp = _chat(http, srv)
        assert resp.status_code == 429
        assert resp.headers["retry-after"] == "7"
        assert resp.headers["retry-after-ms"] == "7000"
        assert resp.json()["error"]["code"] == "rate_limit_exceeded"
        with pytest.raises(openai.RateLimitError) as info:
            _openai_client(srv).chat.completions.create(model="m", messages=USER_MSG)
        assert info.value.status_code == 429
        assert "slow down" in str(info.value)


@needs_openai
def test_server_error_fault(http: httpx.Client) -> None:
    with FakeOpenAIServer(replies=[Fault.server_error(), Fault.server_error(status=503, message="overloaded")]) as srv:
        resp = _chat(http, srv)
        assert resp.status_code == 500
        assert resp.json()["error"]["type"] == "server_error"
        with pytest.raises(openai.InternalServerError) as info:
            _openai_client(srv).completions.create(model="m", prompt="p")
        assert info.value.status_code == 503
        assert "overloaded" in str(info.value)


@needs_openai
def test_malformed_fault(http: httpx.Client) -> None:
    with FakeOpenAIServer(replies=[Fault.malformed(), Fault.malformed(body=b"<html>oops")]) as srv:
        resp = _chat(http, srv)
        assert resp.status_code == 200
        assert resp.headers["content-type"] == "application/json"
        with pytest.raises(json.JSONDecodeError):
            resp.json()
        # openai raises json.JSONDecodeError itself in some versions and wraps it in an APIError in others.
        with pytest.raises((ValueError, openai.APIError)):
            _openai_client(srv).chat.completions.create(model="m", messages=USER_MSG)
        assert len(srv.requests) == 2


def test_injected_faults_then_recovery(server: FakeOpenAIServer, http: httpx.Client) -> None:
    server.inject(Fault.rate_limit(), times=2)
    server.inject(Fault.server_error())
    assert server.pending_faults == 3
    statuses = [_chat(http, server).status_code for _ in range(3)]
    assert statuses == [429, 429, 500]
    assert server.pending_faults == 0
    # The injected faults consumed no scripted replies.
    assert [_chat(http, server).json()["choices"][0]["message"]["content"] for _ in range(2)] == ["one two", "three"]


def test_injected_faults_do_not_apply_to_models_endpoint(server: FakeOpenAIServer, http: httpx.Client) -> None:
    server.inject(Fault.server_error())
    assert http.get(f"{server.base_url}/models").status_code == 200
    assert _chat(http, server).status_code == 500


def test_fault_construction_and_validation() -> None:
    assert Fault("rate_limit").kind is FaultKind.RATE_LIMIT
    assert Fault.timeout(delay=2.5) == Fault(FaultKind.TIMEOUT, delay=2.5)
    assert Fault.timeout().delay >= 30
    with pytest.raises(ValueError):
        Fault("no_such_fault")
    with pytest.raises(ValueError):
        Fault.server_error(status=404)
    with pytest.raises(ValueError):
        Fault.timeout(delay=-1)
    srv = FakeOpenAIServer()
    with pytest.raises(TypeError):
        srv.inject("rate_limit")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        srv.inject(Fault.rate_limit(), times=-1)
    with pytest.raises(TypeError):
        FakeOpenAIServer(replies=["ok", 3])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        FakeOpenAIServer(replies=42)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- callable replies


@needs_openai
def test_callable_replies_see_the_request(http: httpx.Client) -> None:
    seen: list[dict] = []

    def judge(request: dict) -> str | Fault:
        seen.append(request)
        text = request["messages"][-1]["content"] if "messages" in request else request["prompt"]
        if "fail" in text:
            return Fault.rate_limit()
        return "yes" if "Paris" in text else "no"

    with FakeOpenAIServer(replies=judge) as srv:
        client = _openai_client(srv)
        ask = [{"role": "user", "content": "Is Paris the capital?"}]
        assert client.chat.completions.create(model="m", messages=ask).choices[0].message.content == "yes"
        assert client.completions.create(model="m", prompt="Is Rome in Spain?").choices[0].text == "no"
        with pytest.raises(openai.RateLimitError):
            client.completions.create(model="m", prompt="please fail")
        assert _chat(http, srv).json()["choices"][0]["message"]["content"] == "no"
    assert len(seen) == 4
    assert seen[0]["messages"] == ask and seen[0]["model"] == "m"


def test_callable_that_raises_gives_500_and_is_reported(http: httpx.Client) -> None:
    def broken(request: dict) -> str:
        raise KeyError("missing")

    with FakeOpenAIServer(replies=broken) as srv:
        resp = _chat(http, srv)
        assert resp.status_code == 500
        assert resp.json()["error"]["code"] == "replies_callable_error"
        assert srv.errors == ["replies callable raised KeyError: 'missing'"]


# ---------------------------------------------------------------------------- auth


@needs_openai
def test_api_key_is_enforced_only_when_configured(http: httpx.Client) -> None:
    with FakeOpenAIServer(replies="ok") as open_srv:
        assert _chat(http, open_srv).status_code == 200  # no header at all
    with FakeOpenAIServer(replies="ok", api_key=API_KEY) as srv:
        missing = _chat(http, srv)
        assert missing.status_code == 401
        assert missing.json()["error"]["code"] == "invalid_api_key"
        assert (
            http.post(
                f"{srv.base_url}/chat/completions",
                json={"model": "m", "messages": USER_MSG},
                headers={"Authorization": "Bearer wrong"},
            ).status_code
            == 401
        )
        assert http.get(f"{srv.base_url}/models").status_code == 401
        with pytest.raises(openai.AuthenticationError):
            _openai_client(srv, api_key="wrong").chat.completions.create(model="m", messages=USER_MSG)
        good = _openai_client(srv, api_key=API_KEY).chat.completions.create(model="m", messages=USER_MSG)
        assert good.choices[0].message.content == "ok"
        assert len(srv.requests) == 5


def test_unauthorized_fault_and_echo_quote_the_key_sent(http: httpx.Client) -> None:
    # Some gateways quote the rejected key in their 401 body; the fake does too, so clients can be tested on it.
    bearer = {"Authorization": "Bearer sk-sent-1"}
    with FakeOpenAIServer(replies=[Fault.unauthorized(), "ok"]) as srv:
        assert http.get(f"{srv.base_url}/models", headers=bearer).status_code == 200  # faults spare /models
        body = {"model": "m", "messages": USER_MSG}
        rejected = http.post(f"{srv.base_url}/chat/completions", json=body, headers=bearer)
        assert rejected.status_code == 401
        assert rejected.json()["error"] == {
            "message": "Incorrect API key provided: sk-sent-1.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
        assert _chat(http, srv).json()["choices"][0]["message"]["content"] == "ok"
    with FakeOpenAIServer(api_key=API_KEY, echo_rejected_key=True) as srv:
        answer = http.get(f"{srv.base_url}/models", headers=bearer)
        assert (answer.status_code, answer.json()["error"]["message"]) == (
            401,
            "Incorrect API key provided: sk-sent-1.",
        )
        assert API_KEY not in answer.text


@needs_openai
def test_api_key_never_logged_or_recorded(http: httpx.Client, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="agentrag_verl.testing.openai_server")
    with FakeOpenAIServer(replies=["ok"], api_key=API_KEY) as srv:
        _openai_client(srv, api_key=API_KEY).chat.completions.create(model="m", messages=USER_MSG)
        _chat(http, srv)  # exhausted -> warning log
        assert API_KEY not in repr(srv)
        assert all(API_KEY not in str(r) for r in srv.requests)
        assert srv.requests[0].headers["authorization"] == "<redacted>"
    assert any("POST /v1/chat/completions" in rec.getMessage() for rec in caplog.records)
    assert API_KEY not in caplog.text


def test_conftest_fixture_serves_scripted_replies(fake_openai_server):
    """The shared pytest fixture: a running server that a test scripts with ``reset(replies=...)``."""
    import httpx

    fake_openai_server.reset(replies=["first"])
    body = {"model": "m", "messages": [{"role": "user", "content": "q"}]}
    r = httpx.post(f"{fake_openai_server.base_url}/chat/completions", json=body, timeout=5)
    assert r.json()["choices"][0]["message"]["content"] == "first"
