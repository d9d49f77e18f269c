"""Sharded indexes: build --shards writes consistent shard files, the merge equals unsharded Flat search, the
fan-out retries a restarting shard or answers 503, and bad shard settings are refused."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from agentrag_verl.testing import write_corpus
from retriever_server.build import BuildConfig, build_index, check_index_dir
from retriever_server.encoders import EncoderConfig
from retriever_server.ray_app import Fanout, ShardUnavailable
from retriever_server.sharded import ShardedBackend, ShardSpec, merge_topk, plan_shards

from .conftest import synthetic_corpus

faiss = pytest.importorskip("faiss")


@pytest.fixture(autouse=True)
def small_blas_blocks():
    """faiss's BLAS database block of 16 rows instead of 1024, so that these small indexes get aligned shards (see
    ``retriever_server.build.shard_alignment``) and sharded Flat scores are bit-identical to unsharded ones."""
    before = faiss.cvar.distance_compute_blas_database_bs
    faiss.cvar.distance_compute_blas_database_bs = 16
    yield 16
    faiss.cvar.distance_compute_blas_database_bs = before


def _unit(rng, n, d):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _in_memory_shards(x, shards):
    from retriever_server.build import shard_ranges
    from retriever_server.search import FaissBackend

    loaded = []
    for i, (lo, hi) in enumerate(shard_ranges(len(x), shards, faiss.cvar.distance_compute_blas_database_bs)):
        index = faiss.IndexFlatIP(x.shape[1])
        index.add(x[lo:hi])
        loaded.append((ShardSpec("mem", i, shards, lo, hi, None), FaissBackend(index)))
    return ShardedBackend(loaded)


@pytest.mark.parametrize("shards", [2, 3, 7])
def test_merged_flat_shards_equal_the_unsharded_search(shards):
    from retriever_server.search import import_faiss

    import_faiss()  # the project's BLAS threshold, as served
    rng = np.random.default_rng(shards)
    x = _unit(rng, 500, 24)
    whole = faiss.IndexFlatIP(24)
    whole.add(x)
    sharded = _in_memory_shards(x, shards)
    for nq in (1, 3, 16):  # below and above the BLAS threshold
        q = _unit(rng, nq, 24)
        for k in (1, 5, 50, 600):  # 600 > rows: padded like faiss
            expected_s, expected_r = whole.search(q, k)
            got_s, got_r = sharded.search(q, k)
            np.testing.assert_array_equal(got_r, expected_r)
            np.testing.assert_array_equal(got_s, expected_s)


def test_ties_are_ordered_like_faiss():
    rng = np.random.default_rng(0)
    x = 0.1 * _unit(rng, 90, 8)
    target = _unit(rng, 1, 8)[0]
    for row in (3, 40, 77):  # the same vector in each of three shards
        x[row] = target
    whole = faiss.IndexFlatIP(8)
    whole.add(x)
    expected_s, expected_r = whole.search(target[None], 6)
    got_s, got_r = _in_memory_shards(x, 3).search(target[None], 6)
    assert list(got_r[0, :3]) == [77, 40, 3]  # equal scores: highest row first, as faiss orders them
    np.testing.assert_array_equal(got_r, expected_r)
    np.testing.assert_array_equal(got_s, expected_s)


def test_merge_drops_missing_hits_and_pads():
    scores = [np.array([[0.9, -3.4e38]], np.float32), np.array([[0.5, 0.4]], np.float32)]
    rows = [np.array([[2, -1]]), np.array([[7, 8]])]
    s, r = merge_topk(list(zip(scores, rows, strict=True)), 4)
    assert r.tolist() == [[2, 7, 8, -1]] and s[0, :3].tolist() == pytest.approx([0.9, 0.5, 0.4])


# ---- build --shards ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus300(tmp_path_factory):
    return write_corpus(synthetic_corpus(300), tmp_path_factory.mktemp("shards") / "corpus.jsonl")


def _config(corpus, out, model, *, shards=1, index_type="Flat", **kw):
    encoder = EncoderConfig.from_preset(model, "e5", batch_size=16, max_length=64)
    return BuildConfig(str(corpus), str(out), encoder, index_type, chunk_size=64, shards=shards, progress=False, **kw)


@pytest.fixture(scope="module")
def flat_dir(tmp_path_factory, corpus300, tiny_bert_dir):
    out = tmp_path_factory.mktemp("flat")
    build_index(_config(corpus300, out, tiny_bert_dir))
    return out


def test_build_shards_writes_consistent_files_and_serves_the_same_hits(tmp_path, flat_dir, corpus300, tiny_bert_dir):
    from retriever_server.retriever import Retriever

    out = tmp_path / "sharded"
    shutil.copytree(flat_dir, out)
    report = build_index(_config(corpus300, out, tiny_bert_dir, shards=3))
    assert report.chunks_encoded == 0  # the embeddings are reused; only the index is rebuilt
    meta = json.loads((out / "meta.json").read_text())
    assert meta["shards"] == 3 and "index" not in meta["files"] and not (out / "index.faiss").exists()
    records = meta["files"]["shards"]
    assert [r["rows"] for r in records] == [[0, 96], [96, 192], [192, 300]]  # starts on 16-row BLAS blocks
    assert [r["name"] for r in records] == [f"shards/shard-00{i}-of-003.faiss" for i in range(3)]
    for r in records:
        index = faiss.read_index(str(out / r["name"]))
        emb = np.load(out / "embeddings.npy")[r["rows"][0] : r["rows"][1]]
        np.testing.assert_array_equal(faiss.rev_swig_ptr(index.get_xb(), index.ntotal * index.d), emb.ravel())

    whole, sharded = Retriever.from_index_dir(flat_dir), Retriever.from_index_dir(out)
    assert sharded.backend.name == "faiss x3 shards" and sharded.describe()["shards"] == 3
    queries = ["river island town", "salt clock mill", "novel album film festival", "bridge"]
    q = whole.encode_queries(queries)
    for k in (1, 10, 300):
        for a, b in zip(whole.search(q, k), sharded.search(q, k), strict=True):
            np.testing.assert_array_equal(a, b)
    assert sharded.retrieve(queries, 5) == whole.retrieve(queries, 5)

    # unsharded again: the shard files go, index.faiss comes back
    assert build_index(_config(corpus300, out, tiny_bert_dir)).chunks_encoded == 0
    assert (out / "index.faiss").is_file() and not (out / "shards").exists()
    assert check_index_dir(out)["shards"] == 1


def test_trained_index_types_shard_with_one_quantizer(tmp_path, flat_dir, corpus300, tiny_bert_dir):
    from retriever_server.retriever import Retriever

    out = tmp_path / "ivf"
    shutil.copytree(flat_dir, out)
    build_index(_config(corpus300, out, tiny_bert_dir, shards=2, index_type="IVF4,Flat"))
    files = [faiss.read_index(str(out / r["name"])) for r in check_index_dir(out)["files"]["shards"]]
    centroids = [faiss.rev_swig_ptr(faiss.downcast_index(f.quantizer).get_xb(), 4 * f.d).copy() for f in files]
    np.testing.assert_array_equal(centroids[0], centroids[1])
    sharded = Retriever.from_index_dir(out)
    sharded.backend._shards[0][1].index.nprobe = sharded.backend._shards[1][1].index.nprobe = 4  # all lists: exact
    whole = Retriever.from_index_dir(flat_dir)
    q = whole.encode_queries(["river island town", "salt clock"])
    np.testing.assert_array_equal(sharded.search(q, 7)[1], whole.search(q, 7)[1])


def test_bad_shard_counts_are_refused(tmp_path, flat_dir, corpus300, tiny_bert_dir):
    for bad in (0, -2):
        with pytest.raises(ValueError, match="shards is .*at least 1 \\(--shards\\)"):
            build_index(_config(corpus300, tmp_path / "a", tiny_bert_dir, shards=bad))
    with pytest.raises(ValueError, match="--shards 301 is more than the 300 passages"):
        build_index(_config(corpus300, tmp_path / "b", tiny_bert_dir, shards=301))
    out = tmp_path / "c"
    shutil.copytree(flat_dir, out)
    with pytest.raises(ValueError, match="--shards 400 is more than the 300 passages"):
        build_index(_config(corpus300, out, tiny_bert_dir, shards=400))
    assert check_index_dir(out)["shards"] == 1  # the complete index was not touched
    cli = subprocess.run(
        [sys.executable, "-m", "retriever_server", "build", "--corpus", str(corpus300), "--model", tiny_bert_dir]
        + ["--out", str(tmp_path / "d"), "--shards", "0"],
        capture_output=True,
        text=True,
    )
    assert cli.returncode != 0 and "--shards" in cli.stderr


def test_mismatched_shard_files_are_refused(tmp_path, flat_dir, corpus300, tiny_bert_dir):
    from retriever_server.retriever import Retriever

    two, four = tmp_path / "two", tmp_path / "four"
    for out, n in ((two, 2), (four, 4)):
        shutil.copytree(flat_dir, out)
        build_index(_config(corpus300, out, tiny_bert_dir, shards=n))
    # a missing shard file
    broken = tmp_path / "missing"
    shutil.copytree(two, broken)
    (broken / "shards/shard-001-of-002.faiss").unlink()
    with pytest.raises(ValueError, match="shard-001-of-002.faiss is missing but the build wrote"):
        Retriever.from_index_dir(broken)
    # another build's shard file under this build's name (another row count: another size)
    swapped = tmp_path / "swapped"
    shutil.copytree(two, swapped)
    shutil.copy(four / "shards/shard-000-of-004.faiss", swapped / "shards/shard-000-of-002.faiss")
    with pytest.raises(ValueError, match="shard-000-of-002.faiss has .* bytes but the build wrote"):
        check_index_dir(swapped)
    # ... and the shard itself checks its row count, when the size record was edited to match
    meta = json.loads((swapped / "meta.json").read_text())
    meta["files"]["shards"][0]["bytes"] = (swapped / "shards/shard-000-of-002.faiss").stat().st_size
    (swapped / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="holds 80 vectors .* shard 0 of 2 \\(rows 0-143\\) has 144 rows"):
        Retriever.from_index_dir(swapped)
    # recorded row ranges that do not cover the rows once
    meta["files"]["shards"][1]["rows"] = [150, 300]
    (swapped / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="contiguous ranges covering every row once"):
        check_index_dir(swapped)


def test_serving_as_another_shard_count(tmp_path, flat_dir, corpus300, tiny_bert_dir):
    from retriever_server.search import FaissBackend

    specs = plan_shards(flat_dir, 4)  # an unsharded Flat folder: rows sliced out of embeddings.npy
    assert [(s.start, s.stop, s.file) for s in specs] == [(0, 80, None), (80, 144, None), (144, 224, None)] + [
        (224, 300, None)
    ]
    assert [s.file for s in plan_shards(flat_dir)] == ["index.faiss"]
    whole = FaissBackend.load(flat_dir / "index.faiss")
    q = np.load(flat_dir / "embeddings.npy")[:5]
    for a, b in zip(whole.search(q, 9), ShardedBackend.load(specs).search(q, 9), strict=True):
        np.testing.assert_array_equal(a, b)
    hnsw = tmp_path / "hnsw"
    shutil.copytree(flat_dir, hnsw)
    build_index(_config(corpus300, hnsw, tiny_bert_dir, index_type="HNSW8"))
    with pytest.raises(ValueError, match="cannot be served as 2 shards; rebuild .*--shards 2"):
        plan_shards(hnsw, 2)


def test_sharded_app_options(tmp_path, flat_dir, capsys):
    from retriever_server.cli import main
    from retriever_server.ray_app import ShardedConfig, _coerce, build_app, wants_sharding
    from retriever_server.retriever import IndexSource
    from retriever_server.sharded import shard_bytes

    parsed = _coerce(ShardedConfig, {"shards": "4", "cpus_per_shard": "0.5", "reserve_memory": "false"})
    assert parsed == ShardedConfig(shards=4, cpus_per_shard=0.5, reserve_memory=False)
    assert not wants_sharding(IndexSource(str(flat_dir)), ShardedConfig())
    assert wants_sharding(IndexSource(str(flat_dir)), ShardedConfig(shards=2))
    assert [shard_bytes(s) for s in plan_shards(flat_dir, 2)] == [144 * 32 * 4, 156 * 32 * 4]
    index_file = tmp_path / "e5_Flat.index"
    shutil.copy(flat_dir / "index.faiss", index_file)
    with pytest.raises(ValueError, match="needs an index directory"):
        build_app({"index": str(index_file), "shards": "2"})
    with pytest.raises(ValueError, match="valid keys"):
        build_app({"index": str(flat_dir), "shard": "2"})
    assert main(["serve", "--index", str(flat_dir), "--shards", "2"]) == 2
    assert "add --ray" in capsys.readouterr().err


# ---- the fan-out's outage rule (no Ray: fake handles) ------------------------------------------------------------


class _Response:
    def __init__(self, fn):
        self.fn = fn

    def result(self, timeout_s=None):
        return self.fn()

    def cancel(self):
        pass


class _FlakyShard:
    """A shard handle whose first ``failures`` calls fail as a dead replica would."""

    def __init__(self, backend, start, failures=0, error=ConnectionError):
        self.backend, self.start, self.failures, self.error, self.calls = backend, start, failures, error, 0
        self.search = self

    def remote(self, queries, k):
        self.calls += 1
        if self.calls <= self.failures:
            return _Response(lambda: (_ for _ in ()).throw(self.error("replica died")))
        from retriever_server.sharded import globalize

        s, r = self.backend.search(queries, k)
        return _Response(lambda: (s, globalize(r, self.start)))


def _fanout(x, failures, *, retry_s=5.0, error=ConnectionError):
    sharded = _in_memory_shards(x, 2)
    handles = [
        (spec, _FlakyShard(b, spec.start, f, error)) for (spec, b), f in zip(sharded._shards, failures, strict=True)
    ]
    fanout = Fanout(None, handles, retry_s=retry_s, retryable=lambda e: isinstance(e, ConnectionError))
    fanout.FIRST_BACKOFF_S = 0.01
    return fanout, handles


def test_fanout_retries_a_restarting_shard_and_returns_the_full_result():
    rng = np.random.default_rng(1)
    x, q = _unit(rng, 50, 8), _unit(rng, 2, 8)
    whole = faiss.IndexFlatIP(8)
    whole.add(x)
    fanout, handles = _fanout(x, [0, 3])
    scores, rows = fanout.search(q, 5)
    np.testing.assert_array_equal(rows, whole.search(q, 5)[1])
    assert handles[0][1].calls == 1 and handles[1][1].calls == 4  # only the failed shard is asked again
    assert fanout.counters["retries"] == 3 and fanout.outage_since is None


def test_fanout_answers_503_after_the_retry_budget_and_recovers():
    rng = np.random.default_rng(2)
    x, q = _unit(rng, 50, 8), _unit(rng, 1, 8)
    fanout, handles = _fanout(x, [0, 10**9], retry_s=0.2)
    with pytest.raises(ShardUnavailable) as caught:
        fanout.search(q, 3)
    assert caught.value.status == 503 and "Shard 1 of 2 (rows 32-49) did not answer" in caught.value.message
    assert "retry" in caught.value.message and "ConnectionError" in caught.value.message
    before = handles[1][1].calls
    with pytest.raises(ShardUnavailable):  # budget spent: one attempt, then 503 at once
        fanout.search(q, 3)
    assert handles[1][1].calls == before + 1
    handles[1][1].failures = 0  # the replacement replica is up
    assert fanout.search(q, 3)[1].shape == (1, 3) and fanout.outage_since is None


def test_fanout_does_not_retry_errors_of_the_search_itself():
    rng = np.random.default_rng(3)
    fanout, handles = _fanout(_unit(rng, 20, 8), [1, 0], error=ValueError)
    with pytest.raises(ValueError, match="replica died"):
        fanout.search(_unit(rng, 1, 8), 3)
    assert handles[0][1].calls == 1


# ---- Ray Serve: the sharded app -------------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def slow_shard_starts():
    """Shard replicas of this module's Ray instance take 4 s to start (the environment Ray's workers inherit), so a
    killed shard is away long enough for requests to meet the restart."""
    import os

    from retriever_server.ray_app import SHARD_START_DELAY_ENV

    before = os.environ.get(SHARD_START_DELAY_ENV)
    os.environ[SHARD_START_DELAY_ENV] = "4"
    yield
    if before is None:
        os.environ.pop(SHARD_START_DELAY_ENV)
    else:
        os.environ[SHARD_START_DELAY_ENV] = before


@pytest.mark.slow
@pytest.mark.parametrize(
    "retry_s, timeout_s",
    [
        # Serve holds calls to a shard without replicas until its replacement is up: requests wait, then get the
        # full answer
        pytest.param(60, 60, id="restart-within-the-budget-every-answer-exact"),
        # waits bounded at 1 s and outages at 0.3 s: clear 503s until the replacement is up
        pytest.param(0.3, 1, id="restart-longer-than-the-budget-503s"),
    ],
)
def test_ray_sharded_app_equals_unsharded_and_survives_a_shard_kill(
    ray_cluster, tmp_path, index_dir, corpus_file, minilm_config, minilm_encoder, retriever, qa_rows, retry_s, timeout_s
):
    import concurrent.futures
    import os
    import signal
    import time

    import httpx
    from ray import serve

    from agentrag_verl.demo.servers import free_port
    from retriever_server.ray_app import build_app

    sharded_dir = tmp_path / "two_shards"
    shutil.copytree(index_dir, sharded_dir)
    config = BuildConfig(str(corpus_file), str(sharded_dir), minilm_config, chunk_size=16, shards=2, progress=False)
    assert build_index(config, encoder=minilm_encoder).chunks_encoded == 0

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        # strings, as `serve run retriever_server.ray_app:build_app key=value` passes them
        args = {"index": str(sharded_dir), "shards": "2", "num_threads": "1"}
        args |= {"cpus_per_shard": "0.25", "cpus_per_ingress": "0.25", "cpus_per_replica": "0.25"}
        args |= {"shard_retry_s": str(retry_s), "shard_timeout_s": str(timeout_s), "health_check_period_s": "1"}
        serve.run(build_app(args), name="retriever", route_prefix="/")
        url = f"http://127.0.0.1:{port}"
        questions = [row["question"] for row in qa_rows[:16]]
        expected = retriever.retrieve(questions, 3)  # the unsharded index, in this process

        def ask(i: int) -> httpx.Response:
            body = {"queries": [questions[i % 16]], "topk": 3, "return_scores": True}
            return httpx.post(f"{url}/retrieve", json=body, timeout=120)

        def check(i: int, response: httpx.Response) -> bool:
            """True for the unsharded answer; False for a 503; anything else fails the test."""
            if response.status_code == 503:
                assert response.json()["error"]["type"] == "shard_unavailable", response.text
                return False
            assert response.status_code == 200, response.text
            got, exp = response.json()["result"][0], expected[i % 16]
            assert [h["document"] for h in got] == [h["document"] for h in exp], questions[i % 16]
            np.testing.assert_allclose([h["score"] for h in got], [h["score"] for h in exp], atol=1e-5)
            return True

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            first = list(pool.map(ask, range(16)))  # concurrent 1-query requests: micro-batched by the ingress
        assert all(check(i, r) for i, r in enumerate(first))
        health = httpx.get(f"{url}/health", timeout=30).json()
        assert health["index_size"] == 68 and health["shards"] == [[0, 32], [32, 68]]  # starts on 16-row blocks
        assert health["served"]["batches"] < health["served"]["requests"]

        # kill shard 1's replica process (as the OOM killer would) while clients keep asking
        shard1 = serve.get_deployment_handle("retriever-shard-1", "retriever")
        old = shard1.info.remote().result(timeout_s=30)
        assert old["rows"] == [32, 68] and old["rss_bytes"] > 0
        outcomes: list[tuple[float, bool, float]] = []
        stop = time.monotonic() + 120

        def client(c: int) -> None:
            i = c
            while time.monotonic() < stop:
                t = time.monotonic()
                response = ask(i)
                outcomes.append((t, check(i, response), time.monotonic() - t))
                i += 4

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            clients = [pool.submit(client, c) for c in range(4)]
            time.sleep(1.0)
            killed_at = time.monotonic()
            os.kill(old["pid"], signal.SIGKILL)
            while time.monotonic() < stop:  # until requests sent well after the kill succeed again
                time.sleep(0.5)
                if sum(ok for t, ok, _ in outcomes if t > killed_at + 2) >= 8:
                    stop = time.monotonic()
            for f in clients:
                f.result()  # re-raises a wrong answer
        after = [(ok, took) for t, ok, took in outcomes if t + took > killed_at]  # answered after the kill
        assert sum(ok for ok, _ in after) >= 8, "the service did not recover after the shard was killed"
        print(
            f"after the kill: {len(after)} requests, {sum(ok for ok, _ in after)} exact answers, "
            f"{sum(not ok for ok, _ in after)} 503s, slowest {max(took for _, took in after):.1f} s"
        )
        unavailable = sum(not ok for ok, _ in after)
        if retry_s >= 60:  # the restart (4 s) took less than the budget: requests waited and got exact answers
            assert unavailable == 0 and max(took for _, took in after) > 2
        else:  # the restart took longer than the budget: clear 503s (checked by `check`), then exact answers again
            assert unavailable > 0
        new = shard1.info.remote().result(timeout_s=30)
        assert new["pid"] != old["pid"] and new["rows"] == [32, 68]  # Serve started a replacement replica
    finally:
        serve.shutdown()
