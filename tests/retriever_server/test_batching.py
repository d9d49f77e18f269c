"""The micro-batcher and the batch runner, without a model: no wait when idle, continuous batching, fair shares,
split requests (order, isolation), cancellation."""

from __future__ import annotations

import asyncio
import functools
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retriever_server.batching import Job, MicroBatcher, fair_shares, run_jobs


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
    batcher = MicroBatcher(fake, max_batch_size=64)
    jobs = [Job([f"q{i}a", f"q{i}b"]) for i in range(10)]
    results = await asyncio.gather(*(batcher.submit(j) for j in jobs))
    assert results == [[f"Q{i}A", f"Q{i}B"] for i in range(10)]
    assert len(fake.batches) == 1 and fake.batches[0] == [j.queries for j in jobs]  # arrival order kept
    assert fake.threads == {"retriever-worker_0"}  # one worker thread of its own, off the event loop
    assert batcher.stats()["served"]["batches"] == 1
    await batcher.close()


async def test_max_batch_size_counts_queries_and_shares_are_fair():
    fake = Recorder()
    batcher = MicroBatcher(fake, max_batch_size=4)
    sizes = [3, 2, 1, 9, 1]
    jobs = [Job([f"{n}-{k}" for k in range(n)]) for n in sizes]
    results = await asyncio.gather(*(batcher.submit(j) for j in jobs))
    assert results == [[q.upper() for q in j.queries] for j in jobs]  # split jobs reassembled in order
    # Five waiting jobs, four slots: the oldest four get one query each; then water-filling.
    assert [[len(q) for q in b] for b in fake.batches] == [[1, 1, 1, 1], [1, 1, 1, 1], [1, 3], [4]]
    assert batcher.stats()["served"]["split_requests"] == 3
    await batcher.close()


class Timers:
    """Records every timer the event loop is asked to set (``call_at``; ``call_later`` and timeouts go through it)."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.calls: list[float] = []
        self._call_at = loop.call_at

        def call_at(when, callback, *args, **kwargs):
            self.calls.append(when - loop.time())
            return self._call_at(when, callback, *args, **kwargs)

        loop.call_at = call_at


async def test_a_request_on_an_idle_server_is_dispatched_at_once():
    starts: list[float] = []

    def run_batch(jobs):
        starts.append(time.perf_counter())
        return [j.queries for j in jobs]

    batcher = MicroBatcher(run_batch, max_batch_size=64)
    await batcher.submit(Job(["warm-up"]))  # starts the scheduler task and the worker thread
    timers = Timers(asyncio.get_running_loop())
    delays = []
    for i in range(20):
        t0 = time.perf_counter()
        assert await batcher.submit(Job([f"alone {i}"])) == [f"alone {i}"]
        delays.append(starts[-1] - t0)
        await asyncio.sleep(0)
    assert timers.calls == []  # no wait of any length between submit and dispatch
    assert sorted(delays)[len(delays) // 2] < 0.003  # queueing delay: a thread hand-off, no timer
    assert batcher.stats()["served"]["max_batches_waited"] == 0
    await batcher.close()


async def test_batching_disabled_runs_each_job_alone_and_whole():
    fake = Recorder()
    batcher = MicroBatcher(fake, max_batch_size=2, enabled=False)
    results = await asyncio.gather(*(batcher.submit(Job([str(i)] * (1 + i))) for i in range(5)))
    assert [len(r) for r in results] == [1, 2, 3, 4, 5]
    assert [[len(q) for q in b] for b in fake.batches] == [[1], [2], [3], [4], [5]]  # never split, never merged
    await batcher.close()


async def test_jobs_arriving_while_a_batch_runs_form_the_next_batch():
    spans: list[tuple[float, float]] = []
    fake = Recorder(delay=0.05)

    def run_batch(jobs):
        t0 = time.perf_counter()
        out = fake(jobs)
        spans.append((t0, time.perf_counter()))
        return out

    batcher = MicroBatcher(run_batch, max_batch_size=100)
    first = asyncio.create_task(batcher.submit(Job(["first"])))
    await asyncio.sleep(0.01)  # the first batch is now running in the worker thread
    rest = [asyncio.create_task(batcher.submit(Job([f"r{i}"]))) for i in range(20)]
    await asyncio.gather(first, *rest)
    assert [len(b) for b in fake.batches] == [1, 20]
    assert spans[1][0] - spans[0][1] < 0.02  # the next batch went out as the worker freed, without a wait
    assert batcher.stats()["served"]["max_batches_waited"] == 1  # the batch running at their arrival
    await batcher.close()


async def test_a_maximal_request_delays_a_one_query_request_by_at_most_one_micro_batch():
    delay = 0.04
    spans: list[tuple[float, float, list[list[str]]]] = []

    def run_batch(jobs):
        t0 = time.perf_counter()
        time.sleep(delay)
        spans.append((t0, time.perf_counter(), [j.queries for j in jobs]))
        return [[q.upper() for q in j.queries] for j in jobs]

    batcher = MicroBatcher(run_batch, max_batch_size=8)
    big = Job([f"big {i}" for i in range(96)])  # 12 micro-batches
    big_task = asyncio.create_task(batcher.submit(big))
    await asyncio.sleep(2.5 * delay)  # inside the big request's third micro-batch
    t0 = time.perf_counter()
    assert await batcher.submit(Job(["small"])) == ["SMALL"]
    small_latency = time.perf_counter() - t0
    assert await big_task == [q.upper() for q in big.queries]  # reassembled in order
    (served_in,) = [i for i, span in enumerate(spans) if ["small"] in span[2]]
    running_at_arrival = max(i for i, span in enumerate(spans) if span[0] <= t0)
    assert served_in == running_at_arrival + 1  # the very next micro-batch
    assert spans[served_in][2] == [[f"big {i}" for i in range(3 * 8, 3 * 8 + 7)], ["small"]]  # shared fairly
    assert small_latency < 3 * delay  # the rest of one micro-batch, then its own; the whole request takes 12
    assert batcher.stats()["served"]["max_batches_waited"] == 1
    await batcher.close()


async def test_batches_are_bounded_by_tokens_and_a_long_request_delays_a_short_one_by_one_micro_batch():
    per_token = 0.0001  # seconds of work per token: the encoder's cost is about linear in tokens
    spans: list[tuple[float, float, list[list[str]], int]] = []

    def run_batch(jobs):
        tokens = sum(sum(map(len, j.tokens)) for j in jobs)
        t0 = time.perf_counter()
        time.sleep(per_token * tokens)
        spans.append((t0, time.perf_counter(), [j.queries for j in jobs], tokens))
        return [[q.upper() for q in j.queries] for j in jobs]

    batcher = MicroBatcher(run_batch, max_batch_size=128, max_batch_tokens=512)
    big = Job([f"long {i}" for i in range(24)], tokens=[[0] * 256] * 24)  # 12 micro-batches of 2 long queries
    big_task = asyncio.create_task(batcher.submit(big))
    await asyncio.sleep(2.5 * 512 * per_token)  # inside the big request's third micro-batch
    t0 = time.perf_counter()
    assert await batcher.submit(Job(["short"], tokens=[[0] * 12])) == ["SHORT"]
    small_latency = time.perf_counter() - t0
    assert await big_task == [q.upper() for q in big.queries]
    assert max(span[3] for span in spans) <= 512  # by queries alone, the first batch held all 24 x 256 tokens
    (served_in,) = [i for i, span in enumerate(spans) if ["short"] in span[2]]
    running_at_arrival = max(i for i, span in enumerate(spans) if span[0] <= t0)
    assert served_in == running_at_arrival + 1  # the very next micro-batch
    assert spans[served_in][2][-1] == ["short"] and spans[served_in][3] <= 512  # with what of the big one fits
    assert small_latency < 3 * 512 * per_token  # the rest of one micro-batch, then its own
    assert batcher.stats()["batching"]["max_batch_tokens"] == 512
    await batcher.close()


async def test_a_job_left_out_goes_first_next_and_jobs_without_tokens_count_one_per_query():
    fake = Recorder()
    batcher = MicroBatcher(fake, max_batch_size=8, max_batch_tokens=100)
    jobs = [Job(["huge", "small"], tokens=[[0] * 300, [0] * 5]), Job(["a", "b", "c"])]
    results = await asyncio.gather(*(batcher.submit(j) for j in jobs))
    assert results == [["HUGE", "SMALL"], ["A", "B", "C"]]
    assert fake.batches[0] == [["a", "b", "c"]]  # 3 x 1 token; 300 do not fit the share left
    assert fake.batches[1] == [["huge"]]  # left out, so first: over the whole budget, it goes alone
    assert fake.batches[2] == [["small"]]
    # 20 one-query jobs of 16 tokens would fill every batch of 100; the older job of 60-token queries, left out of one
    # batch, is first in the next: it is never starved
    fake = Recorder()
    batcher = MicroBatcher(fake, max_batch_size=8, max_batch_tokens=100)
    first = asyncio.create_task(batcher.submit(Job(["first"], tokens=[[0] * 16])))
    await asyncio.sleep(0)  # running: the rest queue behind it
    long = asyncio.create_task(batcher.submit(Job(["l0", "l1", "l2"], tokens=[[0] * 60] * 3)))
    shorts = [asyncio.create_task(batcher.submit(Job([f"s{i}"], tokens=[[0] * 16]))) for i in range(20)]
    await asyncio.gather(first, long, *shorts)
    with_long = [i for i, b in enumerate(fake.batches) if any(q[0].startswith("l") for q in b)]
    assert len(with_long) == 3 and with_long[-1] <= 6, fake.batches  # 20 x 16 tokens alone would take 5 batches
    assert all(sum(16 if q[0].startswith("s") else 60 for q in b for _ in q) <= 100 for b in fake.batches[1:])
    await batcher.close()


async def test_split_jobs_keep_order_and_a_failing_slice_fails_only_its_job():
    fake = Recorder(fail_on="bad-2")
    batcher = MicroBatcher(fake, max_batch_size=4)
    good = [Job([f"g{j}-{k}" for k in range(5 + j)]) for j in range(3)]
    bad = Job([f"bad-{k}" for k in range(10)])  # fails in its third query
    results = await asyncio.gather(
        *(batcher.submit(j) for j in [good[0], bad, good[1], good[2]]), return_exceptions=True
    )
    assert isinstance(results[1], RuntimeError)
    assert [results[0], results[2], results[3]] == [[q.upper() for q in j.queries] for j in good]
    ran = [q for b in fake.batches for job in b for q in job]
    assert "bad-9" not in ran  # the failed request's remaining slices were dropped
    assert batcher.stats()["served"]["errors"] == 1
    await batcher.close()


async def test_a_failing_job_does_not_fail_its_neighbours():
    fake = Recorder(fail_on="boom")
    batcher = MicroBatcher(fake, max_batch_size=64)
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
    batcher = MicroBatcher(fake, max_batch_size=1)
    running = asyncio.create_task(batcher.submit(Job(["running"])))
    await asyncio.sleep(0.01)
    cancelled = asyncio.create_task(batcher.submit(Job(["cancelled"])))
    kept = asyncio.create_task(batcher.submit(Job(["kept"])))
    await asyncio.sleep(0)
    cancelled.cancel()
    assert await running == ["RUNNING"] and await kept == ["KEPT"]
    assert ["cancelled"] not in [q for b in fake.batches for q in b]
    assert batcher.stats()["queue_depth"] == 0
    late = asyncio.create_task(batcher.submit(Job(["late"] * 1)))
    await asyncio.sleep(0)
    fake.delay = 0.2
    await batcher.close()
    with pytest.raises((RuntimeError, asyncio.CancelledError)):
        await late


async def test_split_encode_and_search_jobs_equal_running_them_whole():
    fake = FakeRetriever()
    batcher = MicroBatcher(functools.partial(run_jobs, fake), max_batch_size=3)
    jobs = [
        Job([f"passage {i}" for i in range(7)], None, "passage"),
        Job([f"query {i}" for i in range(8)], 4),
        Job(["one"], 2),
        Job([f"enc {i}" for i in range(5)], None),
    ]
    results = await asyncio.gather(*(batcher.submit(j) for j in jobs))
    assert batcher.stats()["served"]["split_requests"] == 3
    for job, got in zip(jobs, results, strict=True):
        alone = run_jobs(FakeRetriever(), [job])[0]
        np.testing.assert_allclose(got.embeddings, alone.embeddings, rtol=1e-6)
        if job.topk is None:
            assert got.rows is None and got.scores is None
        else:
            np.testing.assert_array_equal(got.rows, alone.rows)
            np.testing.assert_allclose(got.scores, alone.scores, rtol=1e-6)
    await batcher.close()


@settings(max_examples=200, deadline=None)
@given(remaining=st.lists(st.integers(0, 50), max_size=12), capacity=st.integers(1, 40))
def test_fair_shares_fill_the_batch_max_min_fairly(remaining, capacity):
    shares = fair_shares(remaining, capacity)
    assert all(0 <= s <= r for s, r in zip(shares, remaining, strict=True))
    assert sum(shares) == min(capacity, sum(remaining))
    for s, r in zip(shares, remaining, strict=True):
        if s < r:  # held back: nobody got more than one query more than it
            assert all(t <= s + 1 for t in shares), shares


def test_invalid_settings():
    with pytest.raises(ValueError, match="max_batch_size"):
        MicroBatcher(Recorder(), max_batch_size=0)
    with pytest.raises(ValueError, match="settle"):
        MicroBatcher(Recorder(), settle=-0.1)
    with pytest.raises(ValueError, match="settle"):
        MicroBatcher(Recorder(), settle=2)


async def closed_loop(batcher: MicroBatcher, clients: int, rounds: int, think: float = 0.0) -> None:
    """``clients`` clients that each send their next request some time after their answer: 1-3 event-loop passes
    (an HTTP client in another process comes back a little later than the answer is written), plus ``think``
    seconds, staggered over the clients (the last one back after ``think``)."""

    async def client(i: int) -> None:
        for r in range(rounds):
            assert await batcher.submit(Job([f"c{i} r{r}"])) == [f"C{i} R{r}"]
            for _ in range(1 + (i + r) % 3):
                await asyncio.sleep(0)
            if think:
                await asyncio.sleep(think * (i + 1) / clients)

    await asyncio.gather(*(client(i) for i in range(clients)))


@pytest.mark.parametrize(("settle", "full"), [(0.1, True), (0.0, False)])
async def test_settling_keeps_a_closed_loop_of_clients_in_one_batch(settle, full):
    # Without settling, the first client back finds the worker idle and starts a batch of its own, and the loop
    # splits into groups that alternate; with it, the answered clients' next requests join one batch. A batch takes
    # 50 ms, so settling waits up to 5 ms: at 5 ms (0.5 ms of settling) a loaded 2-core CI box once split a batch.
    fake = Recorder(delay=0.05)
    batcher = MicroBatcher(fake, max_batch_size=64, settle=settle)
    await closed_loop(batcher, clients=16, rounds=8)
    sizes = [sum(len(q) for q in b) for b in fake.batches]
    assert sum(sizes) == 16 * 8
    assert (sizes == [16] * 8) is full, sizes
    await batcher.close()


async def test_settling_waits_for_clients_that_come_back_over_milliseconds():
    # The clients come back over 5 ms, one after another (a load generator in another process, answering 64
    # responses): a batch of 200 ms waits up to 20 ms for them, so every batch is whole.
    fake = Recorder(delay=0.2)
    batcher = MicroBatcher(fake, max_batch_size=64)
    await closed_loop(batcher, clients=16, rounds=4, think=0.005)
    assert [sum(len(q) for q in b) for b in fake.batches] == [16] * 4
    await batcher.close()


async def test_a_client_that_came_back_late_once_rejoins_the_batch():
    # Client 15 sends its first request while the first batch runs; the 15 others come back over 30 ms after each
    # answer. The next batch waits for the 15 answered clients besides the late one, so from then on the loop is one
    # batch of 16. Counting the late request as one of the 15 left the last client back behind in every batch
    # (measured: 15 per batch for good).
    fake = Recorder(delay=0.05)
    batcher = MicroBatcher(fake, max_batch_size=64, settle=1.0)

    async def late_client():
        await asyncio.sleep(0.01)
        for r in range(6):
            assert await batcher.submit(Job([f"late r{r}"])) == [f"LATE R{r}"]
            for _ in range(1 + r % 3):
                await asyncio.sleep(0)

    await asyncio.gather(closed_loop(batcher, clients=15, rounds=6, think=0.03), late_client())
    assert [sum(len(q) for q in b) for b in fake.batches] == [15, 16, 16, 16, 16, 16, 1]
    await batcher.close()


async def test_settling_waits_at_most_its_share_of_the_batch_time():
    # Two requests answered; one client comes back and the other never does. The next batch waits for the second
    # client for settle x the batch's compute time (0.5 x 100 ms), then starts without it.
    fake = Recorder(delay=0.1)
    batcher = MicroBatcher(fake, max_batch_size=64, settle=0.5)
    await asyncio.gather(batcher.submit(Job(["a"])), batcher.submit(Job(["b"])))
    t0 = time.perf_counter()
    await asyncio.wait_for(batcher.submit(Job(["c"])), timeout=2.0)
    started_after = time.perf_counter() - t0 - 0.1  # minus its own compute
    assert 0.04 < started_after < 0.25, started_after  # the 50 ms cap (with slack for a busy machine)
    await batcher.close()


async def test_a_loop_split_in_two_groups_merges():
    # Group B's requests arrive while group A's batch runs. The next batch waits for A's clients besides B's
    # requests, so from the second batch on the loop is one batch of 16; ending the wait because B's requests were
    # as many as A's batch answered kept the two groups alternating for good (8 per batch).
    fake = Recorder(delay=0.05)
    batcher = MicroBatcher(fake, max_batch_size=64, settle=0.5)

    async def group(name: str, start: float):
        await asyncio.sleep(start)
        await asyncio.gather(*(client(f"{name}{i}") for i in range(8)))

    async def client(name: str):
        for r in range(4):
            assert await batcher.submit(Job([f"{name} r{r}"])) == [f"{name.upper()} R{r}"]

    await asyncio.gather(group("a", 0.0), group("b", 0.01))
    assert [sum(len(q) for q in b) for b in fake.batches] == [8, 16, 16, 16, 8]
    await batcher.close()


async def test_no_settling_when_the_queue_holds_a_full_batch():
    # 64 queries arrived while the batch ran: the next batch starts at once (settling would add up to 1.0 x 100 ms).
    fake = Recorder(delay=0.1)
    batcher = MicroBatcher(fake, max_batch_size=64, settle=1.0)
    first = [asyncio.ensure_future(batcher.submit(Job([f"a{i}"]))) for i in range(4)]
    await asyncio.sleep(0.02)  # the first batch is computing
    second = [asyncio.ensure_future(batcher.submit(Job([f"b{i}"] * 16))) for i in range(4)]
    await asyncio.gather(*first)
    t0 = time.perf_counter()
    await asyncio.gather(*second)
    assert time.perf_counter() - t0 < 0.1 + 0.06  # its compute and some slack, not the 100 ms of settling
    assert [len(b) for b in fake.batches] == [4, 4]
    await batcher.close()


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
