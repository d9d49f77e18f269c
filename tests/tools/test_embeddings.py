"""EmbeddingClient against the real retriever server's /encode on 127.0.0.1 (MiniLM), and its config errors."""

from __future__ import annotations

import math

import pytest

from agentrag_verl.http import RequestError
from agentrag_verl.tools.embeddings import EmbeddingClient


def _root(retriever_service) -> str:
    return retriever_service.url.rsplit("/", 1)[0]  # .url is the /retrieve URL


async def test_embeds_one_unit_vector_per_query_in_order(retriever_service):
    client = EmbeddingClient.from_config({"url": _root(retriever_service), "kind": "retriever"})
    queries = ["capital of Caldra", "what is quillerite", "capital of Caldra"]
    vectors = await client.embed(queries)
    assert len(vectors) == 3 and len({len(v) for v in vectors}) == 1
    assert all(math.isclose(math.fsum(x * x for x in v), 1.0, rel_tol=1e-3) for v in vectors)  # normalized E5-style
    assert vectors[0] == pytest.approx(vectors[2])  # same query, same vector: the order is kept
    assert vectors[0] != pytest.approx(vectors[1])


async def test_unreachable_endpoint_raises_after_the_retries():
    client = EmbeddingClient(url="http://127.0.0.1:9", timeout_s=2, max_retries=1)  # port 9 (discard) is closed here
    with pytest.raises(RequestError) as info:
        await client.embed(["q"])
    assert info.value.attempts == 2 and info.value.kind == "connection"


def test_config_errors_name_the_key_and_the_choices():
    with pytest.raises(ValueError, match="embedding.url"):
        EmbeddingClient(url="")
    with pytest.raises(ValueError, match=r"choose one of \['retriever', 'openai'\]"):
        EmbeddingClient(url="http://127.0.0.1:8000", kind="bert")
    with pytest.raises(ValueError, match="timeout"):
        EmbeddingClient.from_config({"url": "http://127.0.0.1:8000", "timeout": 3})
