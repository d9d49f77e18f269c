"""The HTTP app over real HTTP: Search-R1 wire compatibility, micro-batching under concurrency, and malformed input.

The ``server`` fixture serves the 68-passage index with limits max_topk=50, max_queries_per_request=64,
max_query_chars=512, max_body_bytes=64 KiB (conftest).
"""

from __future__ import annotations

import asyncio
import json

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

JSON = {"content-type": "application/json"}


def searchr1_observation(hits: list[dict]) -> str:
    """How Search-R1's rollout turns a ``/retrieve`` result into the policy's observation (our own rewrite):
    the first line of ``contents`` is the (quoted) title, the rest is the text, one ``Doc i`` line per hit."""
    lines = []
    for rank, hit in enumerate(hits, start=1):
        title, _, text = hit["document"]["contents"].partition("\n")
        lines.append(f"Doc {rank}(Title: {title}) {text}")
    return "\n".join(lines) + "\n"


def test_searchr1_client_payload(server, qa_rows):
    questions = [row["question"] for row in qa_rows[:5]]
    payload = {"queries": questions, "topk": 3, "return_scores": True}  # exactly what Search-R1's rollout sends
    response = httpx.post(f"{server.base_url}/retrieve", json=payload)
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    result = response.json()["result"]
    assert len(result) == 5 and all(len(hits) == 3 for hits in result)
    for hits in result:
        assert set(hits[0]) == {"document", "score"} and set(hits[0]["document"]) == {"id", "contents"}
        assert isinstance(hits[0]["score"], float)
        assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
        assert searchr1_observation(hits).startswith('Doc 1(Title: "')
    # test_1 "Who wrote the novel The Salt Clock?" is answered by passages 26/27; MiniLM ranks 26 first.
    assert result[1][0]["document"]["id"] in qa_rows[1]["metadata"]["supporting_ids"]


def test_return_scores_false_single_query_and_default_topk(server):
    url = f"{server.base_url}/retrieve"
    plain = httpx.post(url, json={"query": "capital of Caldra", "return_scores": False}).json()
    scored = httpx.post(f"{server.base_url}/retrieve", json={"queries": ["capital of Caldra"], "topk": None}).json()
    assert len(plain["result"][0]) == 3  # no topk => the server's default (3)
    assert set(plain["result"][0][0]) == {"id", "contents"}  # documents only, Search-R1's return_scores=false shape
    assert plain["result"][0] == scored["result"][0]  # return_scores defaults to false, as in Search-R1
    minimal = httpx.post(f"{server.base_url}/retrieve", json={"queries": ["capital of Caldra"], "topk": 5}).json()
    assert [d["id"] for d in minimal["result"][0][:3]] == [d["id"] for d in plain["result"][0]]


def test_encode_and_health(server, minilm_encoder):
    body = httpx.post(f"{server.base_url}/encode", json={"queries": ["salt clock", "Caldra"]}).json()
    emb = np.asarray(body["embeddings"], dtype=np.float32)
    assert body["dim"] == 384 and body["normalized"] is True and emb.shape == (2, 384)
    np.testing.assert_allclose(emb, minilm_encoder.encode(["salt clock", "Caldra"]), atol=1e-5)
    health = httpx.get(f"{server.base_url}/health").json()
    assert health["status"] == "ok" and health["index_size"] == 68 and health["dim"] == 384
    assert health["device"] == "cpu" and health["backend"] == "faiss" and health["queue_depth"] == 0
    assert health["batching"]["enabled"] is True and "served" in health


async def _concurrent(url: str, payloads: list[dict], path: str = "/retrieve") -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=len(payloads), max_keepalive_connections=len(payloads))
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        return await asyncio.gather(*(client.post(path, json=p) for p in payloads))


def _queries_64(qa_rows) -> list[str]:
    questions = [row["question"] for row in qa_rows]  # 30 questions
    variants = [q.lower().rstrip("?") for q in questions] + ["Åsvik herring festival", "quillerite colour", "Velda"]
    return (questions + variants + ["Mérida-Lune university"])[:64]


def test_64_concurrent_requests_equal_one_at_a_time(server, qa_rows):
    queries = _queries_64(qa_rows)
    assert len(set(queries)) == 64
    sequential = [
        httpx.post(server.url, json={"queries": [q], "topk": 5, "return_scores": True}).json()["result"]
        for q in queries
    ]
    before = httpx.get(f"{server.base_url}/health").json()["served"]
    responses = asyncio.run(
        _concurrent(server.base_url, [{"queries": [q], "topk": 5, "return_scores": True} for q in queries])
    )
    after = httpx.get(f"{server.base_url}/health").json()["served"]
    for q, seq, resp in zip(queries, sequential, responses, strict=True):
        assert resp.status_code == 200, q
        got = resp.json()["result"]
        assert [h["document"] for h in got[0]] == [h["document"] for h in seq[0]], q  # same passages, same order
        # Scores agree to float32 rounding: a query padded inside a batch gives the same embedding up to ~1e-7.
        np.testing.assert_allclose([h["score"] for h in got[0]], [h["score"] for h in seq[0]], atol=1e-5)
    assert after["requests"] - before["requests"] == 64
    assert after["batches"] - before["batches"] < 32  # merged: 64 one-query requests ran in far fewer batches


def test_mixed_concurrent_requests_keep_their_own_shapes(server, qa_rows):
    questions = [row["question"] for row in qa_rows[:12]]
    payloads = [
        {"queries": questions[i : i + 1 + i % 3], "topk": 1 + i % 4, "return_scores": bool(i % 2)} for i in range(12)
    ]
    expected = [
        httpx.post(f"{server.base_url}/retrieve", json={**p, "return_scores": True}).json()["result"] for p in payloads
    ]
    responses = asyncio.run(_concurrent(server.base_url, payloads))
    for p, exp, resp in zip(payloads, expected, responses, strict=True):
        result = resp.json()["result"]
        assert len(result) == len(p["queries"]) and all(len(hits) == p["topk"] for hits in result)
        docs = [[h["document"] if p["return_scores"] else h for h in hits] for hits in result]
        assert docs == [[h["document"] for h in hits] for hits in exp]
    encoded = asyncio.run(_concurrent(server.base_url, [{"queries": [q]} for q in questions], "/encode"))
    assert all(r.status_code == 200 and len(r.json()["embeddings"]) == 1 for r in encoded)


# (description, method, path, body, headers, expected status). Limits: see the module docstring.
MALFORMED = [
    ("invalid JSON", "POST", "/retrieve", b'{"queries": ["a"', JSON, 400),
    ("empty body", "POST", "/retrieve", b"", JSON, 400),
    ("not UTF-8", "POST", "/retrieve", b'{"query": "\xff\xfe"}', JSON, 400),
    ("nested too deep", "POST", "/retrieve", b'{"queries":' + b"[" * 30_000 + b"]" * 30_000 + b"}", JSON, 400),
    ("body is an array", "POST", "/retrieve", b'["a"]', JSON, 422),
    ("body is a string", "POST", "/retrieve", b'"a"', JSON, 422),
    ("body is null", "POST", "/retrieve", b"null", JSON, 422),
    ("no queries", "POST", "/retrieve", b"{}", JSON, 422),
    ("empty queries list", "POST", "/retrieve", b'{"queries": []}', JSON, 422),
    ("queries is a string", "POST", "/retrieve", b'{"queries": "a"}', JSON, 422),
    ("queries is a number", "POST", "/retrieve", b'{"queries": 3}', JSON, 422),
    ("queries holds a number", "POST", "/retrieve", b'{"queries": ["a", 3]}', JSON, 422),
    ("queries holds null", "POST", "/retrieve", b'{"queries": [null]}', JSON, 422),
    ("queries nested list", "POST", "/retrieve", b'{"queries": [["a"]]}', JSON, 422),
    ("query is a list", "POST", "/retrieve", b'{"query": ["a"]}', JSON, 422),
    ("query and queries", "POST", "/retrieve", b'{"query": "a", "queries": ["b"]}', JSON, 422),
    ("oversized query", "POST", "/retrieve", json.dumps({"query": "a" * 513}).encode(), JSON, 422),
    ("65 queries", "POST", "/retrieve", json.dumps({"queries": ["a"] * 65}).encode(), JSON, 422),
    ("topk string", "POST", "/retrieve", b'{"query": "a", "topk": "3"}', JSON, 422),
    ("topk boolean", "POST", "/retrieve", b'{"query": "a", "topk": true}', JSON, 422),
    ("topk zero", "POST", "/retrieve", b'{"query": "a", "topk": 0}', JSON, 422),
    ("topk negative", "POST", "/retrieve", b'{"query": "a", "topk": -1}', JSON, 422),
    ("topk huge", "POST", "/retrieve", b'{"query": "a", "topk": 1000000}', JSON, 422),
    ("topk beyond int64", "POST", "/retrieve", b'{"query": "a", "topk": 100000000000000000000000000000}', JSON, 422),
    ("topk fraction", "POST", "/retrieve", b'{"query": "a", "topk": 2.5}', JSON, 422),
    ("topk NaN", "POST", "/retrieve", b'{"query": "a", "topk": NaN}', JSON, 422),
    ("topk overflowing float", "POST", "/retrieve", b'{"query": "a", "topk": 1e400}', JSON, 422),
    ("topk object", "POST", "/retrieve", b'{"query": "a", "topk": {"k": 3}}', JSON, 422),
    ("return_scores string", "POST", "/retrieve", b'{"query": "a", "return_scores": "yes"}', JSON, 422),
    ("return_scores number", "POST", "/retrieve", b'{"query": "a", "return_scores": 1}', JSON, 422),
    ("lone high surrogate", "POST", "/retrieve", b'{"query": "caf\\ud800e"}', JSON, 422),
    ("lone low surrogate", "POST", "/retrieve", b'{"queries": ["ok", "\\udc00"]}', JSON, 422),
    ("text/plain", "POST", "/retrieve", b'{"query": "a"}', {"content-type": "text/plain"}, 415),
    ("form encoded", "POST", "/retrieve", b"query=a", {"content-type": "application/x-www-form-urlencoded"}, 415),
    ("multipart", "POST", "/retrieve", b"--x--", {"content-type": "multipart/form-data; boundary=x"}, 415),
    ("body over 64 KiB", "POST", "/retrieve", json.dumps({"query": "a", "pad": "x" * 70_000}).encode(), JSON, 413),
    ("GET /retrieve", "GET", "/retrieve", None, {}, 405),
    ("unknown path", "POST", "/search", b'{"query": "a"}', JSON, 404),
    ("encode bad kind", "POST", "/encode", b'{"query": "a", "kind": "doc"}', JSON, 422),
    ("encode kind false", "POST", "/encode", b'{"query": "a", "kind": false}', JSON, 422),
    ("encode kind empty string", "POST", "/encode", b'{"query": "a", "kind": ""}', JSON, 422),
    ("encode kind empty list", "POST", "/encode", b'{"query": "a", "kind": []}', JSON, 422),
    ("encode empty list", "POST", "/encode", b'{"queries": []}', JSON, 422),
]


@pytest.mark.parametrize(
    ("case", "method", "path", "body", "headers", "status"), MALFORMED, ids=[m[0] for m in MALFORMED]
)
def test_malformed_requests_get_4xx_with_a_message(server, case, method, path, body, headers, status):
    response = httpx.request(method, f"{server.base_url}{path}", content=body, headers=headers)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["type"] and len(error["message"]) > 20, error  # a sentence, not just a code


def test_server_keeps_serving_after_malformed_requests(server):
    assert len(MALFORMED) >= 30
    for _, method, path, body, headers, _status in MALFORMED:
        httpx.request(method, f"{server.base_url}{path}", content=body, headers=headers)
    ok = httpx.post(f"{server.base_url}/retrieve", json={"query": "Who wrote The Salt Clock?", "topk": 1})
    assert ok.status_code == 200 and len(ok.json()["result"][0]) == 1
    assert httpx.get(f"{server.base_url}/health").json()["served"]["errors"] == 0


def test_empty_queries_get_no_passages_and_do_not_fail_the_request(server):
    body = {"queries": ["capital of Caldra", "", " \n\t\u3000", "Salt Clock"], "topk": 2, "return_scores": True}
    result = httpx.post(f"{server.base_url}/retrieve", json=body).json()["result"]
    assert [len(hits) for hits in result] == [2, 0, 0, 2]
    alone = httpx.post(f"{server.base_url}/retrieve", json={"queries": ["Salt Clock"], "topk": 2}).json()["result"]
    assert [h["document"] for h in result[3]] == alone[0]
    assert httpx.post(f"{server.base_url}/retrieve", json={"query": ""}).json() == {"result": [[]]}
    assert len(httpx.post(f"{server.base_url}/encode", json={"query": ""}).json()["embeddings"][0]) == 384


@pytest.mark.parametrize(
    "query",
    [
        "Åsvik 🐟 festival",  # non-BMP emoji
        "مدينة Mérida-Lune",  # right-to-left script
        "e\u0301 combining accent and zero\u200bwidth space",
        "nul \x00 character",
        "x" * 512,  # exactly max_query_chars
    ],
)
def test_unusual_but_valid_unicode_is_served(server, query):
    response = httpx.post(f"{server.base_url}/retrieve", json={"query": query, "topk": 2})
    assert response.status_code == 200 and len(response.json()["result"][0]) == 2


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=6,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.dictionaries(st.sampled_from(["queries", "query", "topk", "return_scores", "kind", "x"]), json_values),
    path=st.sampled_from(["/retrieve", "/encode"]),
)
def test_fuzzed_bodies_never_get_a_500(server, body, path):
    response = httpx.post(f"{server.base_url}{path}", content=json.dumps(body), headers=JSON)
    assert response.status_code in (200, 400, 413, 415, 422), (body, response.text)


def test_docs_and_paths_are_shown_only_when_asked(retriever, index_dir):
    from agentrag_verl.testing.retriever import RetrieverServer

    with RetrieverServer(retriever, docs=True, health_paths=True) as opened:
        assert httpx.get(f"{opened.base_url}/openapi.json").status_code == 200
        assert httpx.get(f"{opened.base_url}/docs").status_code == 200
        health = httpx.get(f"{opened.base_url}/health").json()
        assert health["index"] == str(index_dir) and health["model"] == retriever.encoder.config.model
    with RetrieverServer(retriever) as default:
        assert httpx.get(f"{default.base_url}/openapi.json").status_code == 404
        health = httpx.get(f"{default.base_url}/health").json()
        assert health["index"] == index_dir.name and "/" not in health["model"]
        encoded = httpx.post(f"{default.base_url}/encode", json={"query": "a"}).json()
        assert encoded["model"] == health["model"]


def test_a_wrong_method_on_a_post_endpoint_gets_405_with_allow(server):
    for path in ("/retrieve", "/encode"):
        response = httpx.get(f"{server.base_url}{path}")
        assert response.status_code == 405 and response.headers["allow"] == "POST"
        assert response.json()["error"]["type"] == "method_not_allowed"
        assert "POST /retrieve" in response.json()["error"]["message"]  # names the endpoints there are


def test_a_fault_in_the_service_gets_a_logged_500_and_the_server_keeps_serving(retriever, caplog):
    from starlette.testclient import TestClient

    from retriever_server.app import create_app
    from retriever_server.batching import run_jobs

    class Failing:
        calls = 0

        async def submit(self, job):
            self.calls += 1
            if self.calls == 1:
                raise RuntimeError("index shard lost")
            return run_jobs(retriever, [job])[0]

        def stats(self):
            return {}

    with TestClient(create_app(retriever, service=Failing()), raise_server_exceptions=False) as client:
        with caplog.at_level("ERROR", logger="retriever_server.app"):
            failed = client.post("/retrieve", json={"query": "Salt Clock"})
        assert failed.status_code == 500
        assert failed.json()["error"] == {
            "type": "internal_error",
            "message": "Internal server error: RuntimeError: index shard lost",
            "field": None,
        }
        assert "Internal error on POST /retrieve" in caplog.text and "index shard lost" in caplog.text
        assert len(client.post("/retrieve", json={"query": "Salt Clock", "topk": 2}).json()["result"][0]) == 2
