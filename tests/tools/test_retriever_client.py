"""RetrieverClient: Search-R1 wire format, retries with backoff (not on 4xx), shared pool per event loop."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from agentrag_verl.tools.retriever_client import (
    RetrievalError,
    RetrieverClient,
    RetrieverConfig,
    doc_id,
    get_retriever_client,
)


def mock_client(handler, **config) -> RetrieverClient:
    cfg = RetrieverConfig(url="http://retriever/retrieve", **config)
    return RetrieverClient(cfg, http=httpx.AsyncClient(transport=httpx.MockTransport(handler)))


async def test_wire_format_and_bare_documents():
    bodies = []

    def handler(request):
        bodies.append(json.loads(request.content))
        # A server answering bare documents (return_scores ignored) is accepted and wrapped.
        return httpx.Response(200, json={"result": [[{"id": "7", "contents": '"T"\nx'}], []]})

    hits = await mock_client(handler, topk=2).search(["a", "b"])
    assert bodies == [{"queries": ["a", "b"], "topk": 2, "return_scores": True}]
    assert hits == [[{"document": {"id": "7", "contents": '"T"\nx'}, "score": None}], []]
    assert doc_id(hits[0][0]) == "7" and doc_id({"document": {"contents": "x"}}) == ""


async def test_5xx_retried_with_exponential_backoff():
    times = []

    def handler(request):
        times.append(time.perf_counter())
        if len(times) < 3:
            return httpx.Response(503, text="busy")
        return httpx.Response(200, json={"result": [[{"document": {"id": "1", "contents": "c"}, "score": 1.0}]]})

    hits = await mock_client(handler, max_retries=3, backoff_s=0.05).search(["q"])
    assert hits[0][0]["score"] == 1.0 and len(times) == 3
    # Delays 0.05 then 0.1 (+ up to 25% jitter, agentrag_verl.http): sleeps never end early, so the lower bounds are
    # exact; the upper bounds only catch a wrong policy (a 0.5 s base), not a busy machine's scheduling delay.
    first, second = times[1] - times[0], times[2] - times[1]
    assert 0.05 <= first < 0.4 and 0.1 <= second < 0.5


async def test_4xx_not_retried_and_exhaustion_raises():
    calls = []

    def bad_request(request):
        calls.append(1)
        return httpx.Response(422, text="bad")

    with pytest.raises(RetrievalError) as e:
        await mock_client(bad_request, max_retries=3, backoff_s=0.01).search(["q"])
    assert e.value.kind == "http_4xx" and len(calls) == 1

    def down(request):
        raise httpx.ConnectError("refused")

    with pytest.raises(RetrievalError, match="cannot reach") as e:
        await mock_client(down, max_retries=2, backoff_s=0.01).search(["q"])
    assert e.value.kind == "connection"


async def test_wrong_result_count_is_bad_response():
    client = mock_client(lambda r: httpx.Response(200, json={"result": [[]]}))
    with pytest.raises(RetrievalError) as e:
        await client.search(["a", "b"])
    assert e.value.kind == "bad_response"


async def test_client_shared_per_event_loop_and_config():
    cfg = RetrieverConfig(url="http://x/retrieve")
    a, b = get_retriever_client(cfg), get_retriever_client(cfg)
    assert a is b and get_retriever_client(RetrieverConfig(url="http://y/retrieve")) is not a
    other = await asyncio.to_thread(lambda: asyncio.run(_get(cfg)))
    assert other is not a


async def _get(cfg):
    return get_retriever_client(cfg)


def test_config_errors_name_the_key():
    with pytest.raises(ValueError, match="retriever_topk"):
        RetrieverConfig(topk=0)
