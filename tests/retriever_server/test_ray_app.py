"""The Ray Serve deployment answers exactly like the in-process retriever; the app builder parses its args."""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
import pytest

from agentrag_verl.testing.retriever import free_port
from retriever_server.ray_app import IndexSource, RayServeConfig, _coerce, build_app
from retriever_server.retriever import LoadOptions

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


def test_ray_serve_deployment_answers_the_same_queries(ray_cluster, index_dir, retriever, qa_rows):
    from ray import serve

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        # Strings, as `serve run retriever_server.ray_app:build_app key=value` passes them; Search-R1 alias index_path.
        app = build_app({"index_path": str(index_dir), "max_wait_ms": "10", "num_threads": "1", "topk": "3"})
        serve.run(app, name="retriever", route_prefix="/")
        url = f"http://127.0.0.1:{port}"
        questions = [row["question"] for row in qa_rows[:16]]
        responses = asyncio.run(
            _concurrent(url, [{"queries": [q], "topk": 3, "return_scores": True} for q in questions])
        )
        expected = retriever.retrieve(questions, 3)
        for q, resp, exp in zip(questions, responses, expected, strict=True):
            assert resp.status_code == 200, resp.text
            got = resp.json()["result"][0]
            assert [h["document"] for h in got] == [h["document"] for h in exp], q
            np.testing.assert_allclose([h["score"] for h in got], [h["score"] for h in exp], atol=1e-5)
        health = httpx.get(f"{url}/health", timeout=30).json()
        assert health["index_size"] == 68 and health["batching"]["implementation"] == "ray.serve.batch"
        assert health["served"]["batches"] < health["served"]["requests"]  # serve.batch merged concurrent requests
        bad = httpx.post(f"{url}/retrieve", json={"queries": [], "topk": 3}, timeout=30)
        assert bad.status_code == 422 and "empty" in bad.json()["error"]["message"]
    finally:
        serve.shutdown()
