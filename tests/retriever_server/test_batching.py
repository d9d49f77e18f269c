"""The micro-batcher and the batch runner, without a model: merging, limits, order, isolation, cancellation."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retriever_server.batching import Job, MicroBatcher, run_jobs


class Recorder:
    """A fake batch function: records each batch's jobs and answers every query with its text uppercased."""

    def __init__(self, delay: float = 0.0, fail_on: str | None = None):
        self.batches: list[list[list[str]]] = []
        self.delay = delay
        self.fail_on = fail_on
        self.threads: set[str] = set()

    def __call__(self, jobs: list[Job]) -> list[list[str]]:
        self.threads.add(threading.current_thread().name)
        self.batches.append([j.queries for j in jobs])
        if self.fail_on and any(self.fail_on in q for j in jobs for q in j.queries):
            raise RuntimeError("boom")
        time.sleep(self.delay)
        return [[q.upper() for q in j.queries] for j in jobs]


async def test_concurrent_jobs_share_a_batch_and_get_their_own_answers():
    fake = Recorder()
    batcher = MicroBatcher(fake, max_batch_size=64, max_wait_ms=20)
    jobs = [Job([f"q{i}a", f"q{i}b"]) for i in range(10)]
    results = await asyncio.gather(*(batcher.submit(j) for j in jobs))
    assert results == [[f"Q{i}A", f"Q{i}B"] for i in range(10)]
    assert len(fake.batches) == 1 and fake.batches[0] == [j.queries for j in jobs]  # arrival order kept
    assert fake.threads == {"retriever-worker_0"}  # one worker thread, off the event loop
    assert batcher.stats()["served"]["batches"] == 1
    await batcher.close()


async def test_max_batch_size_counts_queries_and_large_requests_run_alone():
    fake = Recorder()
    batcher = MicroBatcher(fake, max_batch_size=4, max_wait_ms=20)
    sizes = [3, 2, 1, 9, 1]
    await asyncio.gather(*(batcher.submit(Job([f"{n}-{k}" for k in range(n)])) for n in sizes))
    batch_sizes = [[len(q) for q in b] for b in fake.batches]
    assert batch_sizes == [[3], [2, 1], [9], [1]]  # never over 4 queries, except the 9-query request alone
    await batcher.close()


async def test_a_lone_request_waits_only_the_arrival_gap():
    fake = Recorder()
    batcher = MicroBatcher(fake, max_batch_size=64, max_wait_ms=2000, arrival_gap_ms=5)
    t0 = time.perf_counter()
    await batcher.submit(Job(["alone"]))
    assert time.perf_counter() - t0 < 1.0  # dispatched after the 5 ms gap, far below the 2 s max wait
    await batcher.close()


async def test_a_steady_stream_is_collected_until_max_wait():
    fake = Recorder()
    batcher = MicroBatcher(fake, max_batch_size=1000, max_wait_ms=150, arrival_gap_ms=40)

    async def stream():  # one request every 5 ms: always inside the 40 ms gap
        tasks = []
        for i in range(60):
            tasks.append(asyncio.create_task(batcher.submit(Job([str(i)]))))
            await asyncio.sleep(0.005)
        return await asyncio.gather(*tasks)

    await stream()
    # The first batch closes at the 150 ms max wait (~30 arrivals at 5 ms), not at the gap; generous bounds for CI.
    assert 8 <= len(fake.batches[0]) <= 50 and len(fake.batches) >= 2
    await batcher.close()


async def test_batching_disabled_runs_each_job_alone():
    fake = Recorder()
    batcher = MicroBatcher(fake, enabled=False)
    await asyncio.gather(*(batcher.submit(Job([str(i)])) for i in range(5)))
    assert [len(b) for b in fake.batches] == [1] * 5
    await batcher.close()


async def test_jobs_arriving_while_a_batch_runs_form_the_next_batch():
    fake = Recorder(delay=0.05)
    batcher = MicroBatcher(fake, max_batch_size=100, max_wait_ms=1)
    first = asyncio.create_task(batcher.submit(Job(["first"])))
    await asyncio.sleep(0.01)  # the first batch is now running in the worker thread
    rest = [asyncio.create_task(batcher.submit(Job([f"r{i}"]))) for i in range(20)]
    await asyncio.gather(first, *rest)
    assert [len(b) for b in fake.batches] == [1, 20]
    await batcher.close()


async def test_a_failing_job_does_not_fail_its_neighbours():
    fake = Recorder(fail_on="boom")
    batcher = MicroBatcher(fake, max_batch_size=64, max_wait_ms=20)
    results = await asyncio.gather(
        batcher.submit(Job(["ok1"])),
        batcher.submit(Job(["boom"])),
        batcher.submit(Job(["ok2"])),
        return_exceptions=True,
    )
    assert results[0] == ["OK1"] and results[2] == ["OK2"]
    assert isinstance(results[1], RuntimeError)
    assert batcher.stats()["served"]["errors"] == 1
    await batcher.close()


async def test_cancelled_requests_are_skipped_and_close_fails_pending():
    fake = Recorder(delay=0.05)
    batcher = MicroBatcher(fake, max_batch_size=1, max_wait_ms=0)
    running = asyncio.create_task(batcher.submit(Job(["running"])))
    await asyncio.sleep(0.01)
    cancelled = asyncio.create_task(batcher.submit(Job(["cancelled"])))
    kept = asyncio.create_task(batcher.submit(Job(["kept"])))
    await asyncio.sleep(0)
    cancelled.cancel()
    assert await running == ["RUNNING"] and await kept == ["KEPT"]
    assert ["cancelled"] not in [q for b in fake.batches for q in b]
    late = asyncio.create_task(batcher.submit(Job(["late"] * 1)))
    await asyncio.sleep(0)
    fake.delay = 0.2
    await batcher.close()
    with pytest.raises((RuntimeError, asyncio.CancelledError)):
        await late


def test_invalid_settings():
    with pytest.raises(ValueError, match="max_batch_size"):
        MicroBatcher(Recorder(), max_batch_size=0)


class FakeRetriever:
    """Deterministic encoder (a hash of the text) + exact numpy search, to test how run_jobs splits a batch."""

    class _Encoder:
        dim = 8

    encoder = _Encoder()

    def __init__(self):
        rng = np.random.default_rng(1)
        self.vectors = rng.standard_normal((50, 8)).astype(np.float32)
        self.calls = {"encode": 0, "search": 0}

    def encode_queries(self, texts, kind="query"):
        self.calls["encode"] += 1
        seeds = [abs(hash((kind, t))) % (2**32) for t in texts]
        return np.stack([np.random.default_rng(s).standard_normal(8).astype(np.float32) for s in seeds])

    def search(self, emb, k):
        self.calls["search"] += 1
        scores = emb @ self.vectors.T
        rows = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(scores, rows, 1), rows


job_strategy = st.builds(
    Job,
    queries=st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=4),
    topk=st.one_of(st.none(), st.integers(1, 6)),
    kind=st.sampled_from(["query", "passage"]),
)


@settings(max_examples=60, deadline=None)
@given(jobs=st.lists(job_strategy, min_size=1, max_size=8))
def test_run_jobs_equals_running_each_job_alone(jobs):
    """Batching never mixes answers: a batch's per-job results equal each job run by itself."""
    fake = FakeRetriever()
    together = run_jobs(fake, jobs)
    assert fake.calls["search"] == (1 if any(j.topk is not None for j in jobs) else 0)
    assert fake.calls["encode"] == len({j.kind for j in jobs})  # one encode call per text kind
    for job, got in zip(jobs, together, strict=True):
        alone = run_jobs(FakeRetriever(), [job])[0]
        np.testing.assert_allclose(got.embeddings, alone.embeddings, rtol=1e-6)
        if job.topk is None:
            assert got.rows is None
        else:
            assert got.rows.shape == (len(job.queries), job.topk)
            np.testing.assert_array_equal(got.rows, alone.rows)
