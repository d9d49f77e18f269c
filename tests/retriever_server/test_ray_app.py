"""The Ray Serve deployment answers exactly like the in-process retriever and schedules like the standalone server;
the app builder parses its args."""

from __future__ import annotations

import asyncio
import time

import httpx
import numpy as np
import pytest

from agentrag_verl.demo.servers import free_port
from retriever_server.ray_app import RayServeConfig, _coerce, build_app
from retriever_server.retriever import IndexSource, LoadOptions

from .test_app import _concurrent


def test_app_builder_coerces_strings_and_rejects_unknown_keys():
    assert _coerce(RayServeConfig, {"replicas": "2", "gpus_per_replica": "0.5"}) == RayServeConfig(2, 0.5)
    assert _coerce(LoadOptions, {"fp16": "false", "num_threads": "none"}) == LoadOptions(fp16=False)
    assert _coerce(IndexSource, {"index": "x"}).index == "x"
    with pytest.raises(ValueError, match="valid keys"):
        build_app({"index": "x", "replica": "2"})
    with pytest.raises(ValueError, match="needs `index`"):
        build_app({"replicas": "2"})
    with pytest.raises(ValueError, match="expected int"):
        build_app({"index": "x", "replicas": "two"})


@pytest.fixture(scope="module")
def serve_url(ray_cluster, index_dir):
    """The Ray Serve app over the fixture index, micro-batches of at most 16 queries."""
    from ray import serve

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        # Strings, as `serve run retriever_server.ray_app:build_app key=value` passes them; Search-R1 alias index_path.
        app = build_app({"index_path": str(index_dir), "max_batch_size": "16", "num_threads": "1", "topk": "3"})
        serve.run(app, name="retriever", route_prefix="/")
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()


def test_ray_serve_deployment_answers_the_same_queries(serve_url, retriever, qa_rows):
    url = serve_url
    questions = [row["question"] for row in qa_rows[:16]]
    responses = asyncio.run(_concurrent(url, [{"queries": [q], "topk": 3, "return_scores": True} for q in questions]))
    expected = retriever.retrieve(questions, 3)
    for q, resp, exp in zip(questions, responses, expected, strict=True):
        assert resp.status_code == 200, resp.text
        got = resp.json()["result"][0]
        assert [h["document"] for h in got] == [h["document"] for h in exp], q
        np.testing.assert_allclose([h["score"] for h in got], [h["score"] for h in exp], atol=1e-5)
    health = httpx.get(f"{url}/health", timeout=30).json()
    assert health["index_size"] == 68
    assert health["batching"]["implementation"] == "retriever_server.batching.MicroBatcher"
    assert health["served"]["batches"] < health["served"]["requests"]  # concurrent requests were merged
    bad = httpx.post(f"{url}/retrieve", json={"queries": [], "topk": 3}, timeout=30)
    assert bad.status_code == 422 and "empty" in bad.json()["error"]["message"]


def test_ray_serve_a_maximal_request_delays_a_one_query_request_by_at_most_one_micro_batch(
    serve_url, retriever, qa_rows
):
    """A 400-query request runs as 25 micro-batches of 16; a 1-query request sent while it runs goes out in the very
    next micro-batch and is answered long before the large one."""
    questions = [row["question"] for row in qa_rows]
    big = [questions[i % len(questions)] + f" {i}" for i in range(400)]

    async def scenario():
        async with httpx.AsyncClient(base_url=serve_url, timeout=300) as client:
            start = (await client.get("/health")).json()["served"]
            t_big = time.perf_counter()
            big_task = asyncio.create_task(client.post("/retrieve", json={"queries": big, "topk": 3}))
            while (await client.get("/health")).json()["served"]["batches"] < start["batches"] + 3:
                await asyncio.sleep(0.01)  # the large request is now running, micro-batch after micro-batch
            t_small = time.perf_counter()
            small = await client.post("/retrieve", json={"queries": [questions[0]], "topk": 3})
            small_latency = time.perf_counter() - t_small
            at_small = (await client.get("/health")).json()["served"]
            big_response = await big_task
            big_latency = time.perf_counter() - t_big
            end = (await client.get("/health")).json()["served"]
            return small, small_latency, at_small, big_response, big_latency, start, end

    small, small_latency, at_small, big_response, big_latency, start, end = asyncio.run(scenario())
    assert small.status_code == 200 and big_response.status_code == 200
    assert [h["id"] for h in small.json()["result"][0]] == [
        h["document"]["id"] for h in retriever.retrieve(questions[:1], 3)[0]
    ]
    expected = retriever.retrieve(big, 3)
    got = big_response.json()["result"]
    assert [[h["id"] for h in hits] for hits in got] == [[h["document"]["id"] for h in hits] for hits in expected]
    assert end["batches"] - start["batches"] >= 25
    assert end["batches"] - at_small["batches"] >= 10  # the large request still had most of its work left
    # Every request so far waited at most for the micro-batch running at its arrival (the 16 concurrent ones of the
    # test above fit in one batch); the small one did wait for one.
    assert end["max_batches_waited"] == 1  # the small one waited only for the micro-batch running at its arrival
    assert small_latency < big_latency / 4
