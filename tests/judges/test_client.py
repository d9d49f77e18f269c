"""JudgeClient against the fake OpenAI-compatible server over real HTTP: retries, cache, dedup, chaos, start-up."""

from __future__ import annotations

import asyncio
import gc
import logging
import random
import threading
import time
import warnings

import pytest

from agentrag_verl.judges.client import ERROR_KINDS, JudgeClient, JudgeRequest, JudgeUnavailableError
from agentrag_verl.judges.config import JudgeConfig, JudgeConfigError
from agentrag_verl.methods.hiprag import judge as hiprag
from agentrag_verl.methods.hiprag.judge import parse_true_false
from agentrag_verl.methods.multistage import judge as multistage
from agentrag_verl.methods.reasonrag import judge as reasonrag
from agentrag_verl.methods.searchp1 import judge as searchp1
from agentrag_verl.methods.searchp1.judge import SearchP1Evaluation
from agentrag_verl.testing.openai_server import DEFAULT_MODEL, FakeOpenAIServer, Fault

pytest.importorskip("aiohttp", reason="needs aiohttp (pip install agentrag-verl[judge])")
pytestmark = pytest.mark.timeout(60)

TRUE = "<answer>True</answer>"
FALSE = "<answer>False</answer>"
SECRET = "sk-test-7f3a9c1e5b"  # a recognisable fake key that must never show up in logs or reprs


def make_client(server: FakeOpenAIServer, **overrides) -> JudgeClient:
    """A client with test-sized timing: backoff in milliseconds, a 2 s attempt deadline (tests of timeouts lower it)."""
    options = {
        "base_url": server.base_url,
        "model": DEFAULT_MODEL,
        "api_key_env": None,
        "timeout_s": 2.0,
        "max_retries": 3,
        "backoff_base_s": 0.001,
        "backoff_max_s": 0.01,
        "max_concurrency": 16,
    }
    options.update(overrides)
    return JudgeClient.from_config(options)


def step(i: int) -> JudgeRequest[bool]:
    return hiprag.under_search_request(f"reasoning {i}", f"conclusion {i}")


def completion_calls(server: FakeOpenAIServer) -> int:
    return sum(r.path == "/v1/chat/completions" for r in server.requests)


# ------------------------------------------------------------------------------------------------ each use, end to end


async def test_every_paper_use_round_trips_over_http(fake_openai_server):
    def reply(body):
        prompt = " ".join(m["content"] for m in body["messages"])
        if "semantically equivalent" in prompt:
            return TRUE
        if "Fact-Checker" in prompt:
            return "The year is wrong. <answer>False</answer>"
        if "Only respond with YES or NO" in prompt:
            return "YES"
        if "So the score is [Score]" in prompt:
            return "Mostly right. So the score is **88**."
        if "Dual-Track Evaluation" in prompt:
            return (
                '```json\n{"planner_score": 1.2, "model_plan_steps": 2, "effective_steps_self": 2, '
                '"effective_steps_ref": 1, "outcome_accuracy_score": 1.0, "outcome_reasoning_score": 0.8,}\n```'
            )
        return "<correct_reasoning_path>\n1. q one\n2. q two\n</correct_reasoning_path>\n<optimized_planner>Do it."

    fake_openai_server.reset(replies=reply)
    requests = [
        hiprag.over_search_request("Paris.", "It is Paris."),
        hiprag.under_search_request("Einstein was born in 1900.", "He was 5 in 1905."),
        multistage.correctness_request("Paris", ["paris"]),
        reasonrag.process_score_request("q", ["a"], "So the answer is <answer>a</answer>"),
        searchp1.evaluation_request("q", ["a"], "plan", ["q one"], "trajectory"),
        searchp1.planner_request("q", ["a"]),
    ]
    async with make_client(fake_openai_server) as client:
        verdicts = await client.judge_many(requests)
    assert all(v.ok for v in verdicts), verdicts
    values = [v.value for v in verdicts]
    assert values[:4] == [True, False, True, 0.88]
    assert values[4] == SearchP1Evaluation(1.2, 2, 2, 1, 1.0, 0.8)
    assert values[5].reasoning_path == ("q one", "q two") and values[5].planner == "Do it."
    body = fake_openai_server.requests[0].body
    assert body["model"] == DEFAULT_MODEL and body["temperature"] == 0.0 and body["max_tokens"] == 512


# ------------------------------------------------------------------------------------------------ retries


@pytest.mark.parametrize(
    ("fault", "kind"),
    [
        (Fault.server_error(500), "server_error"),
        (Fault.server_error(503), "server_error"),
        (Fault.rate_limit(retry_after=0.01), "rate_limit"),
        (Fault.timeout(delay=5.0), "timeout"),  # longer than the client's deadline (0.3 s here)
        (Fault.malformed(), "malformed_response"),
    ],
)
async def test_transient_faults_are_retried_and_counted(fake_openai_server, fault, kind):
    fake_openai_server.reset(replies=TRUE)
    fake_openai_server.inject(fault, times=2)
    async with make_client(fake_openai_server, timeout_s=0.3) as client:
        verdict = await client.judge(step(0))
        metrics = client.metrics()
    assert verdict.ok and verdict.value is True
    assert verdict.attempts == 3  # two faults, then the reply
    assert completion_calls(fake_openai_server) == 3
    assert metrics["judge/calls"] == 3 and metrics["judge/retries"] == 2
    assert metrics[f"judge/retries/{kind}"] == 2
    assert metrics["judge/failures"] == 0


async def test_rate_limit_honours_retry_after(fake_openai_server):
    fake_openai_server.reset(replies=TRUE)
    fake_openai_server.inject(Fault.rate_limit(retry_after=0.2))
    async with make_client(fake_openai_server, backoff_max_s=1.0) as client:
        verdict = await client.judge(step(0))
    assert verdict.ok
    assert verdict.latency_s >= 0.2  # waited Retry-After, not the 1 ms backoff


async def test_retries_stop_after_max_retries(fake_openai_server):
    fake_openai_server.reset(replies=Fault.server_error())
    async with make_client(fake_openai_server, max_retries=2) as client:
        verdict = await client.judge(step(0))
        metrics = client.metrics()
    assert not verdict.ok and verdict.error_kind == "server_error" and verdict.value is None
    assert verdict.attempts == 3 == completion_calls(fake_openai_server)  # 1 + max_retries
    assert metrics["judge/failures/server_error"] == 1 and metrics["judge/retries/server_error"] == 2


async def test_bad_request_is_not_retried(fake_openai_server):
    fake_openai_server.reset(replies=TRUE)
    # the fake answers HTTP 400 to a non-string, non-list "stop"
    request = JudgeRequest(step(0).messages, parse_true_false, params={"stop": 123})
    async with make_client(fake_openai_server) as client:
        verdict = await client.judge(request)
        metrics = client.metrics()
    assert not verdict.ok and verdict.error_kind == "client_error"
    assert "400" in verdict.error
    assert verdict.attempts == 1 == completion_calls(fake_openai_server)
    assert metrics["judge/retries"] == 0 and metrics["judge/failures/client_error"] == 1


async def test_unparsable_replies_are_retried_then_fail(fake_openai_server):
    fake_openai_server.reset(replies="I think they are equivalent.")
    async with make_client(fake_openai_server, max_retries=2) as client:
        verdict = await client.judge(step(0))
    assert not verdict.ok and verdict.error_kind == "parse_error"
    assert verdict.raw == "I think they are equivalent."
    assert verdict.attempts == 3
    fake_openai_server.reset()
    async with make_client(fake_openai_server, max_retries=2, retry_on_parse_error=False) as client:
        verdict = await client.judge(step(0))
    assert verdict.error_kind == "parse_error" and verdict.attempts == 1


async def test_a_garbage_reply_followed_by_a_verdict_recovers(fake_openai_server):
    fake_openai_server.reset(replies=["", "no tag here", FALSE])
    async with make_client(fake_openai_server) as client:
        verdict = await client.judge(step(0))
        metrics = client.metrics()
    assert verdict.ok and verdict.value is False and verdict.attempts == 3
    assert metrics["judge/retries/empty_reply"] == 1 and metrics["judge/retries/parse_error"] == 1


# ------------------------------------------------------------------------------------------------ cache and dedup


async def test_repeated_requests_hit_the_cache(fake_openai_server):
    fake_openai_server.reset(replies=TRUE)
    async with make_client(fake_openai_server) as client:
        first = await client.judge(step(0))
        second = await client.judge(step(0))
        other_params = await client.judge(JudgeRequest(step(0).messages, parse_true_false, {"temperature": 0.7}))
        metrics = client.metrics()
    assert first.ok and not first.cached and first.attempts == 1
    assert second.ok and second.cached and second.attempts == 0 and second.value is True
    assert not other_params.cached  # params are part of the key
    assert completion_calls(fake_openai_server) == 2
    assert metrics["judge/cache_hits"] == 1 and metrics["judge/requests"] == 3


async def test_failures_are_not_cached(fake_openai_server):
    fake_openai_server.reset(replies=[Fault.server_error(), TRUE])
    async with make_client(fake_openai_server, max_retries=0) as client:
        assert not (await client.judge(step(0))).ok
        retry = await client.judge(step(0))
    assert retry.ok and not retry.cached
    assert completion_calls(fake_openai_server) == 2


async def test_disk_cache_is_reused_by_a_new_client(fake_openai_server, tmp_path):
    fake_openai_server.reset(replies=TRUE)
    async with make_client(fake_openai_server, cache_dir=str(tmp_path)) as client:
        await client.judge_many([step(i) for i in range(4)])  # written when the batch ends
        await client.judge(step(4))  # written at close
    async with make_client(fake_openai_server, cache_dir=str(tmp_path)) as rerun:
        verdicts = await rerun.judge_many([step(i) for i in range(5)])
        metrics = rerun.metrics()
    assert all(v.ok and v.cached and v.value is True for v in verdicts)
    assert completion_calls(fake_openai_server) == 5  # only the first client called the endpoint
    assert metrics["judge/cache_hits_disk"] == 5 and metrics["judge/calls"] == 0
    assert (tmp_path / "judge_cache.sqlite3").exists()


async def test_identical_in_flight_requests_share_one_call(fake_openai_server):
    def slow(body):
        time.sleep(0.2)  # keeps the first request in flight while the twins arrive
        return TRUE

    fake_openai_server.reset(replies=slow)
    async with make_client(fake_openai_server) as client:
        verdicts = await client.judge_many([step(0)] * 20)
        metrics = client.metrics()
    assert completion_calls(fake_openai_server) == 1
    assert all(v.ok and v.value is True and not v.cached for v in verdicts)
    assert sum(v.attempts for v in verdicts) == 1  # attempts add up to calls
    assert metrics["judge/dedup_hits"] == 19 and metrics["judge/ok"] == 20


async def test_a_twin_of_a_cancelled_request_makes_the_call_itself(fake_openai_server):
    def slow(body):
        time.sleep(0.3)  # keeps the first call on the wire while its twin joins and it is cancelled
        return TRUE

    fake_openai_server.reset(replies=slow)
    async with make_client(fake_openai_server) as client:
        first = asyncio.ensure_future(client.judge(step(0)))
        await asyncio.sleep(0.1)
        twin = asyncio.ensure_future(client.judge(step(0)))
        await asyncio.sleep(0.05)
        first.cancel()
        verdict = await twin
        metrics = client.metrics()
    assert first.cancelled()
    assert verdict.ok and verdict.value is True and verdict.attempts == 1  # the twin's own call
    assert metrics["judge/dedup_hits"] == 1 and metrics["judge/calls"] == 2 == completion_calls(fake_openai_server)


async def test_concurrency_is_bounded(fake_openai_server):
    lock, active, peak = threading.Lock(), [0], [0]

    def tracked(body):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        with lock:
            active[0] -= 1
        return TRUE

    fake_openai_server.reset(replies=tracked)
    async with make_client(fake_openai_server, max_concurrency=4) as client:
        verdicts = await client.judge_many([step(i) for i in range(24)])
    assert all(v.ok for v in verdicts)
    assert peak[0] == 4  # 24 distinct requests, never more than max_concurrency on the wire


# ------------------------------------------------------------------------------------------------ chaos


async def test_chaos_every_request_ends_in_a_verdict_or_a_counted_failure(fake_openai_server):
    """~200 requests under 10% timeouts, 10% HTTP 500 and 10% garbage replies (half unparsable text, half
    malformed JSON bodies): nothing raises, every request gets a verdict or a counted failure, counts add up."""
    seed_lock, attempts_seen = threading.Lock(), {}

    def chaotic(body):
        prompt = body["messages"][-1]["content"]
        with seed_lock:  # deterministic per (prompt, attempt), whatever the thread interleaving
            attempt = attempts_seen[prompt] = attempts_seen.get(prompt, 0) + 1
        draw = random.Random(f"{prompt}|{attempt}").random()
        if draw < 0.10:
            return Fault.timeout(delay=3.0)
        if draw < 0.20:
            return Fault.server_error()
        if draw < 0.25:
            return "Sorry, I cannot judge this."
        if draw < 0.30:
            return Fault.malformed()
        return TRUE if draw < 0.65 else FALSE

    fake_openai_server.reset(replies=chaotic)
    n = 200
    options = {"max_concurrency": 64, "timeout_s": 0.5, "max_retries": 2}
    async with make_client(fake_openai_server, **options) as client:
        verdicts = await client.judge_many([step(i) for i in range(n)])
        metrics = client.metrics()
    assert len(verdicts) == n
    ok = [v for v in verdicts if v.ok]
    failed = [v for v in verdicts if not v.ok]
    assert all(isinstance(v.value, bool) and v.error_kind is None for v in ok)
    assert all(v.value is None and v.error_kind in ERROR_KINDS for v in failed)
    # with 3 attempts and 30% faults per attempt, ~2.7% of requests (0.3^3) fail: a few, not many
    assert len(failed) < 0.1 * n
    assert metrics["judge/requests"] == n == metrics["judge/ok"] + metrics["judge/failures"]
    assert metrics["judge/ok"] == len(ok)
    assert sum(metrics[f"judge/failures/{k}"] for k in ERROR_KINDS) == len(failed)
    assert metrics["judge/calls"] == sum(v.attempts for v in verdicts) == completion_calls(fake_openai_server)
    assert metrics["judge/retries"] == metrics["judge/calls"] - n
    for kind in ("timeout", "server_error", "parse_error", "malformed_response"):
        assert metrics[f"judge/retries/{kind}"] > 0  # every injected fault kind occurred and was retried


# ------------------------------------------------------------------------------------------------ start-up and secrets


def test_missing_api_key_fails_at_construction(monkeypatch):
    monkeypatch.delenv("JUDGE_TEST_KEY", raising=False)
    with pytest.raises(JudgeConfigError, match="JUDGE_TEST_KEY") as info:
        JudgeClient(JudgeConfig(base_url="http://127.0.0.1:9/v1", model="m", api_key_env="JUDGE_TEST_KEY"))
    assert "api_key_env" in str(info.value)


async def test_unreachable_endpoint_fails_the_start_up_check():
    with FakeOpenAIServer() as server:
        base_url = server.base_url
    # the server is stopped: nothing listens on its port any more
    config = JudgeConfig(base_url=base_url, model="m", api_key_env=None, timeout_s=2.0, backoff_base_s=0.001)
    async with JudgeClient(config) as client:
        with pytest.raises(JudgeUnavailableError, match="unreachable") as info:
            await client.check()
        verdict = await client.judge(step(0))
    # openai's aiohttp transport reports a refused connection as a connect timeout; both are retried
    assert verdict.error_kind in ("connection", "timeout") and verdict.attempts == 1 + config.max_retries
    assert base_url in str(info.value) and "judge.base_url" in str(info.value)


async def test_check_reports_a_model_the_endpoint_does_not_serve(fake_openai_server):
    async with make_client(fake_openai_server, model="gpt-judge") as client:
        with pytest.raises(JudgeUnavailableError, match="gpt-judge"):
            await client.check()
    async with make_client(fake_openai_server) as client:
        assert (await client.check())["models"] == [DEFAULT_MODEL]


async def test_secret_never_leaks_into_logs_or_reprs(monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("JUDGE_TEST_KEY", SECRET)
    with FakeOpenAIServer(replies=TRUE, api_key=SECRET) as server:
        server.inject(Fault.server_error())
        async with make_client(server, api_key_env="JUDGE_TEST_KEY") as client:
            assert (await client.check())["models"] == [DEFAULT_MODEL]
            assert (await client.judge(step(0))).ok
            text = repr(client) + repr(client.config) + str(client.metrics())
        monkeypatch.setenv("JUDGE_TEST_KEY", "sk-wrong")
        async with make_client(server, api_key_env="JUDGE_TEST_KEY") as wrong:
            verdict = await wrong.judge(step(1))
            with pytest.raises(JudgeUnavailableError, match="JUDGE_TEST_KEY") as info:
                await wrong.check()
    assert verdict.error_kind == "client_error" and verdict.attempts == 1  # 401 is not retried
    assert "JUDGE_TEST_KEY" in text
    for haystack in (text, caplog.text, str(info.value), verdict.error):
        assert SECRET not in haystack and "sk-wrong" not in haystack


# ------------------------------------------------------------------------------------------------ loops, blocking API


def test_blocking_api_outside_an_event_loop(fake_openai_server):
    fake_openai_server.reset(replies=TRUE)
    with make_client(fake_openai_server) as client:
        assert client.check_blocking()["model"] == DEFAULT_MODEL
        verdicts = client.judge_many_blocking([step(i) for i in range(8)])
        again = client.judge_many_blocking([step(0)])
    assert all(v.ok for v in verdicts) and again[0].cached


async def test_blocking_api_refuses_to_stall_a_running_loop(fake_openai_server):
    async with make_client(fake_openai_server) as client:
        with pytest.raises(RuntimeError, match="await client.judge_many"):
            client.judge_many_blocking([step(0)])


def test_one_client_serves_successive_event_loops(fake_openai_server):
    fake_openai_server.reset(replies=TRUE)
    client = make_client(fake_openai_server)

    async def run(i):
        return await client.judge(step(i))

    assert asyncio.run(run(0)).ok and asyncio.run(run(1)).ok  # the HTTP client is made per loop
    assert asyncio.run(run(0)).cached
    client.close()
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(run(2))
    # close() cannot close the HTTP clients of loops that asyncio.run already closed (documented): collect them
    # here so their ResourceWarnings do not surface in a later test
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        client = None
        gc.collect()


async def test_metrics_reset_and_prefix(fake_openai_server):
    fake_openai_server.reset(replies=TRUE)
    async with make_client(fake_openai_server) as client:
        await client.judge_many([step(i) for i in range(3)])
        first = client.metrics(prefix="hiprag/judge/", reset=True)
        second = client.metrics()
    assert first["hiprag/judge/calls"] == 3 and first["hiprag/judge/latency_p95_s"] > 0
    assert first["hiprag/judge/prompt_tokens"] > 0 and first["hiprag/judge/completion_tokens"] == 3  # 1 token each
    assert all(isinstance(v, float) for v in first.values())
    assert second["judge/calls"] == 0 and set(k.removeprefix("judge/") for k in second) == set(
        k.removeprefix("hiprag/judge/") for k in first
    )


# ------------------------------------------------------------------------------------------------ config


def test_config_from_omegaconf_and_errors():
    from omegaconf import OmegaConf

    cfg = JudgeConfig.from_config(OmegaConf.create({"model": "judge", "api_key_env": None, "max_tokens": None}))
    assert cfg.model == "judge" and cfg.api_key_env is None and cfg.sampling_params() == {"temperature": 0.0}
    with pytest.raises(JudgeConfigError, match="Unknown judge option.*'modle'.*'model'"):
        JudgeConfig.from_config({"modle": "x"})
    with pytest.raises(JudgeConfigError, match="judge.max_concurrency"):
        JudgeConfig(max_concurrency=0)
    with pytest.raises(JudgeConfigError, match=r"judge.http_backend was removed.*delete the key"):
        JudgeConfig.from_config({"model": "judge", "http_backend": "aiohttp-raw"})
    with pytest.raises(JudgeConfigError, match="judge.base_url"):
        JudgeConfig(base_url="localhost:8000")
