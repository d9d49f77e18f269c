"""The MCTS policy client against FakeOpenAIServer: chat and completions endpoints, stop strings, retries, errors."""

from __future__ import annotations

import pytest

from agentrag_verl.methods.reasonrag import grammar as reasonrag
from agentrag_verl.methods.reasonrag.policy import PolicyClient, PolicyConfig, PolicyError
from agentrag_verl.methods.reasonrag.tree import REASONING_STOP, state_messages
from agentrag_verl.testing import FakeOpenAIServer, Fault

MESSAGES = state_messages("Who founded Marrow & Tilde Instruments?", [], "reasoning")


def client(server: FakeOpenAIServer, **options) -> PolicyClient:
    options = {"base_url": server.base_url, "model": "policy", "api_key_env": None, "backoff_s": 0.01, **options}
    return PolicyClient(PolicyConfig(**options))


async def test_chat_request_and_restored_stop():
    # The server cuts the reply at "</query>" and drops it (OpenAI semantics); the client restores it.
    with FakeOpenAIServer("Search. So the next query is <query>Orla Brennick</query> So the answer is") as server:
        policy = client(server, temperature=0.7, extra_params={"top_k": 20})
        text = await policy.generate(MESSAGES, stop=REASONING_STOP, seed=7)
        await policy.aclose()
        body = server.requests[0].body
    assert text == "Search. So the next query is <query>Orla Brennick</query>"
    assert reasonrag.next_stage(text) == "grounding"
    assert server.requests[0].path == "/v1/chat/completions"
    assert body["messages"] == MESSAGES and body["stop"] == ["</query>", "</answer>"]
    assert (body["seed"], body["temperature"], body["top_k"], body["max_tokens"]) == (7, 0.7, 20, 512)


async def test_completions_endpoint_renders_the_chat_template(tiny_model_dir):
    with FakeOpenAIServer("So the answer is <answer>1934</answer>") as server:
        policy = client(server, api="completions", tokenizer=str(tiny_model_dir), send_seed=False)
        text = await policy.generate(MESSAGES, stop=REASONING_STOP, seed=1)
        await policy.aclose()
        request = server.requests[0]
    assert text == "So the answer is <answer>1934</answer>"
    assert request.path == "/v1/completions" and "seed" not in request.body
    prompt = request.body["prompt"]
    # Qwen-style template: system turn (Figure 12), user turn, then the assistant turn is opened.
    assert prompt.startswith("<|im_start|>system\nYou are a question-answering assistant")
    assert prompt.endswith("Question: Who founded Marrow & Tilde Instruments?<|im_end|>\n<|im_start|>assistant\n")


async def test_retries_transient_errors_then_succeeds():
    with FakeOpenAIServer("So the answer is <answer>x</answer>") as server:
        server.inject(Fault.server_error(503), times=2)
        server.inject(Fault.rate_limit(retry_after=0), times=1)
        policy = client(server, max_retries=3)
        assert await policy.generate(MESSAGES, stop=REASONING_STOP) == "So the answer is <answer>x</answer>"
        assert (policy.calls, policy.retries) == (4, 3)
        await policy.aclose()


async def test_gives_up_after_retries_and_on_client_errors():
    with FakeOpenAIServer(Fault.server_error(500)) as server:
        policy = client(server, max_retries=1)
        with pytest.raises(PolicyError, match=r"failed after 2 attempts \(HTTP 500"):
            await policy.generate(MESSAGES, stop=REASONING_STOP)
        await policy.aclose()
    with FakeOpenAIServer("x", api_key="secret-key") as server:
        policy = client(server, max_retries=3)  # no key sent -> HTTP 401, not retried
        with pytest.raises(PolicyError, match="rejected the request with HTTP 401") as err:
            await policy.generate(MESSAGES, stop=REASONING_STOP)
        assert policy.calls == 1 and "secret-key" not in str(err.value)
        await policy.aclose()


async def test_malformed_body_is_an_error():
    with FakeOpenAIServer(Fault.malformed(b'{"choices": []}')) as server:
        policy = client(server, max_retries=0)
        with pytest.raises(PolicyError, match="not a chat completion"):
            await policy.generate(MESSAGES, stop=REASONING_STOP)
        await policy.aclose()


def test_key_from_environment_never_shown(monkeypatch):
    monkeypatch.delenv("REASONRAG_TEST_KEY", raising=False)
    with pytest.raises(ValueError, match="REASONRAG_TEST_KEY is not set"):
        PolicyClient(PolicyConfig(api_key_env="REASONRAG_TEST_KEY"))
    monkeypatch.setenv("REASONRAG_TEST_KEY", "sk-hidden")
    policy = PolicyClient(PolicyConfig(api_key_env="REASONRAG_TEST_KEY"))
    assert "sk-hidden" not in repr(policy)


def test_config_errors():
    with pytest.raises(ValueError, match="set policy.tokenizer"):
        PolicyConfig(api="completions")
    with pytest.raises(ValueError, match="http"):
        PolicyConfig(base_url="localhost:8000")
    with pytest.raises(ValueError, match=r"must not set \['stop'\]"):
        PolicyConfig(extra_params={"stop": ["x"]})
