"""Server-side micro-batching: concurrent requests merged into one encode + one search call.

Modern agent loops send one query per trajectory step, so a retrieval server sees many small concurrent requests.
Encoding them one by one leaves the encoder at batch size 1 (on a 2-core CPU: ~25 ms per query, i.e. ~40 queries/s
however many clients connect); merging them reaches the encoder's batched throughput.

:class:`MicroBatcher` keeps a FIFO of pending :class:`Job` s. When the worker is free, its loop takes the oldest
job and keeps adding queued jobs while the batch holds fewer than ``max_batch_size`` queries, until either
``max_wait_ms`` have passed since the window opened (the oldest job's arrival or the end of the previous batch,
whichever is later) or nothing happened for ``arrival_gap_ms`` (no new job, no batch end). A burst of requests
(every client of a closed loop answering at once) is collected whole because its arrivals are closer together than
the gap; a lone request waits only the gap. :func:`run_jobs` executes a batch in a single worker thread
(``loop.run_in_executor``), so the event loop keeps accepting requests while the model runs, and the model is never
called from two threads.

Decisions:

- ``max_batch_size`` counts queries, not requests. A request with more queries than that runs as its own batch
  (it is never split; the encoder splits it into forward passes of its own batch size).
- Jobs with different ``topk`` share one search with the largest ``k``; each job gets its first ``topk`` columns.
  Encode-only jobs (``POST /encode``) ride in the same batches; query and passage texts are encoded separately
  because their prefixes differ.
- Results are split back in job order and row order; a job never sees another job's rows. If a batch raises, each
  of its jobs is re-run alone, so one failing job cannot fail its neighbours.
- With batching disabled every job runs alone in the same single worker thread (what a synchronous server does).
- Why the gap rule and the window opening at the batch end: with a fixed wait counted from the oldest arrival, closed
  loop clients split into groups that alternate (jobs that arrived during a batch go out alone at once, while the
  clients just answered are still sending): on a 2-core CPU, 16 clients ran as batches of 15 and 1, 64 clients as
  halves, and the second group's HTTP work competed with the encoder's threads (``benchmarks/retriever_load.py``).
- Defaults: ``arrival_gap_ms=2`` (a lone request pays 2 ms; bursts on a 2-core CPU arrive < 1 ms apart) and
  ``max_wait_ms=20`` (taking in 64 requests took ~8 ms there, so 10 ms left little headroom; the cap only bites when
  arrivals never pause).
- Timestamps use ``time.perf_counter``: uvloop's ``loop.time()`` advances in whole milliseconds.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    import numpy as np

    from .retriever import Retriever

logger = logging.getLogger(__name__)


@dataclass
class Job:
    """One request's work.

    Attributes:
        queries: The texts, in request order.
        topk: Hits per query; ``None`` for encode-only jobs.
        kind: ``"query"`` or ``"passage"`` (which prefix the encoder adds).
    """

    queries: list[str]
    topk: int | None = None
    kind: Literal["query", "passage"] = "query"


@dataclass
class JobResult:
    """A job's share of a batch: ``scores``/``rows`` ``[n, topk]`` for searches, ``embeddings`` ``[n, d]`` always."""

    embeddings: np.ndarray
    scores: np.ndarray | None = None
    rows: np.ndarray | None = None


def run_jobs(retriever: Retriever, jobs: Sequence[Job]) -> list[JobResult]:
    """Run a batch of jobs with one encode call per text kind and one search call (blocking).

    Args:
        retriever: Encoder + backend.
        jobs: The batch.

    Returns:
        One :class:`JobResult` per job, in order.
    """
    import numpy as np

    dim = retriever.encoder.dim
    embeddings: list[np.ndarray | None] = [None] * len(jobs)
    for kind in ("query", "passage"):
        members = [j for j, job in enumerate(jobs) if job.kind == kind]
        if not members:
            continue
        texts = [q for j in members for q in jobs[j].queries]
        emb = retriever.encode_queries(texts, kind) if texts else np.empty((0, dim), np.float32)
        start = 0
        for j in members:
            stop = start + len(jobs[j].queries)
            embeddings[j] = emb[start:stop]
            start = stop
    results = [JobResult(e) for e in embeddings]
    searching = [j for j, job in enumerate(jobs) if job.topk is not None]
    if searching:
        k = max(jobs[j].topk for j in searching)
        query_emb = np.concatenate([embeddings[j] for j in searching])
        scores, rows = retriever.search(query_emb, k)
        start = 0
        for j in searching:
            stop = start + len(jobs[j].queries)
            results[j].scores = scores[start:stop, : jobs[j].topk]
            results[j].rows = rows[start:stop, : jobs[j].topk]
            start = stop
    return results


class JobService(Protocol):
    """What the HTTP app needs: submit a job, await its result, and report stats for ``/health``."""

    async def submit(self, job: Job) -> JobResult: ...

    def stats(self) -> dict[str, Any]: ...


@dataclass
class _Pending:
    job: Job
    future: asyncio.Future
    enqueued: float


@dataclass
class _Counters:
    requests: int = 0
    queries: int = 0
    batches: int = 0
    largest_batch: int = 0
    busy_seconds: float = 0.0
    compute_seconds: float = 0.0
    errors: int = 0


@dataclass
class MicroBatcher:
    """Merge concurrent jobs into batches run by ``run_batch`` in one worker thread.

    Args:
        run_batch: Blocking function running a list of jobs, e.g. ``functools.partial(run_jobs, retriever)``.
        max_batch_size: Most queries per batch (one request larger than this runs alone).
        max_wait_ms: How long the oldest queued job may wait for others to join its batch.
        arrival_gap_ms: Dispatch before ``max_wait_ms`` once no job has arrived for this long (0: always wait the
            full ``max_wait_ms``).
        enabled: ``False`` runs every job alone (micro-batching off).

    Example:
        >>> import asyncio
        >>> batcher = MicroBatcher(lambda jobs: [len(j.queries) for j in jobs], max_batch_size=8)
        >>> async def main():
        ...     return await asyncio.gather(batcher.submit(Job(["a"])), batcher.submit(Job(["b", "c"])))
        >>> asyncio.run(main())
        [1, 2]
    """

    run_batch: Callable[[list[Job]], list[Any]]
    max_batch_size: int = 128
    max_wait_ms: float = 20.0
    arrival_gap_ms: float = 2.0
    enabled: bool = True
    _pending: collections.deque = field(default_factory=collections.deque, init=False, repr=False)
    _wakeup: asyncio.Event | None = field(default=None, init=False, repr=False)
    _task: asyncio.Task | None = field(default=None, init=False, repr=False)
    _executor: ThreadPoolExecutor | None = field(default=None, init=False, repr=False)
    _last_arrival: float = field(default=0.0, init=False)
    _last_batch_end: float = field(default=0.0, init=False)
    _last_compute: float = field(default=0.0, init=False)
    _queued_queries: int = field(default=0, init=False)
    _in_flight: int = field(default=0, init=False)
    _counters: _Counters = field(default_factory=_Counters, init=False)

    def __post_init__(self) -> None:
        if self.max_batch_size < 1 or self.max_wait_ms < 0 or self.arrival_gap_ms < 0:
            raise ValueError(
                "max_batch_size must be >= 1 and max_wait_ms, arrival_gap_ms >= 0 (got "
                f"{self.max_batch_size}, {self.max_wait_ms}, {self.arrival_gap_ms})."
            )

    async def submit(self, job: Job) -> Any:
        """Queue a job and wait for its result (re-raises the batch function's exception for this job)."""
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done():
            self._start(loop)
        future = loop.create_future()
        self._last_arrival = time.perf_counter()  # not loop.time(): uvloop's clock ticks in whole milliseconds
        self._pending.append(_Pending(job, future, self._last_arrival))
        self._queued_queries += len(job.queries)
        self._counters.requests += 1
        self._counters.queries += len(job.queries)
        self._wakeup.set()
        return await future

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._wakeup = asyncio.Event()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="retriever-worker")
        self._task = loop.create_task(self._loop(), name="retriever-micro-batcher")

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._pending:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            if self.enabled:
                # The window opens when the oldest job arrived or the worker became free, whichever is later:
                # answering a batch is what makes closed-loop clients send their next requests.
                opened = max(self._pending[0].enqueued, self._last_batch_end)
                deadline = opened + self.max_wait_ms / 1000.0
                gap = self.arrival_gap_ms / 1000.0
                while self._queued_queries < self.max_batch_size:
                    quiet_since = max(self._last_arrival, self._last_batch_end)
                    until = min(deadline, quiet_since + gap) if gap > 0 else deadline
                    remaining = until - time.perf_counter()
                    if remaining <= 0:
                        break
                    self._wakeup.clear()
                    try:
                        await asyncio.wait_for(self._wakeup.wait(), remaining)
                    except asyncio.TimeoutError:  # noqa: UP041 - a distinct class on Python 3.10
                        break
            batch = self._take_batch()
            if batch:
                t0 = time.perf_counter()
                await self._run(batch, loop)
                if logger.isEnabledFor(logging.DEBUG):
                    times = [p.enqueued for p in batch]
                    gaps = [b - a for a, b in zip(times, times[1:], strict=False)] or [0.0]
                    logger.debug(
                        "batch: %d jobs, %d queries, waited %.1f ms (largest arrival gap %.2f ms), computed %.1f ms, "
                        "done after %.1f ms, %d queued meanwhile",
                        len(batch),
                        sum(len(p.job.queries) for p in batch),
                        1000 * (t0 - times[0]),
                        1000 * max(gaps),
                        1000 * self._last_compute,
                        1000 * (time.perf_counter() - t0),
                        len(self._pending),
                    )

    def _take_batch(self) -> list[_Pending]:
        batch: list[_Pending] = []
        size = 0
        while self._pending:
            item = self._pending[0]
            n = len(item.job.queries)
            if batch and (not self.enabled or size + n > self.max_batch_size):
                break
            self._pending.popleft()
            self._queued_queries -= n
            if item.future.done():  # the client went away (cancelled) before its turn
                continue
            batch.append(item)
            size += n
            if not self.enabled:
                break
        return batch

    def _timed_run(self, jobs: list[Job]) -> list[Any]:
        t0 = time.perf_counter()
        try:
            return self.run_batch(jobs)
        finally:
            self._counters.compute_seconds += time.perf_counter() - t0
            self._last_compute = time.perf_counter() - t0

    async def _run(self, batch: list[_Pending], loop: asyncio.AbstractEventLoop) -> None:
        jobs = [p.job for p in batch]
        size = sum(len(j.queries) for j in jobs)
        self._in_flight = size
        t0 = time.perf_counter()
        try:
            results = await loop.run_in_executor(self._executor, self._timed_run, jobs)
        except asyncio.CancelledError:  # close() while this batch ran: its callers must not wait forever
            for pending in batch:
                if not pending.future.done():
                    pending.future.set_exception(RuntimeError("the retriever server is shutting down"))
            raise
        except Exception as batch_error:
            if len(batch) == 1:
                results = [batch_error]
            else:  # isolate the failing job(s): re-run each job alone
                results = []
                for job in jobs:
                    try:
                        results.append((await loop.run_in_executor(self._executor, self.run_batch, [job]))[0])
                    except Exception as e:
                        results.append(e)
        finally:
            self._in_flight = 0
        self._counters.batches += 1
        self._counters.largest_batch = max(self._counters.largest_batch, size)
        self._counters.busy_seconds += time.perf_counter() - t0
        for pending, result in zip(batch, results, strict=True):
            if pending.future.done():
                continue
            if isinstance(result, Exception):
                self._counters.errors += 1
                logger.error("Retrieval job failed: %r", result, exc_info=result)
                pending.future.set_exception(result)
            else:
                pending.future.set_result(result)
        await asyncio.sleep(0)  # let the handlers just woken write their responses, then start the quiet clock
        self._last_batch_end = time.perf_counter()

    def stats(self) -> dict[str, Any]:
        """Queue depth and batching counters (for ``GET /health``)."""
        c = self._counters
        return {
            "queue_depth": self._queued_queries,
            "in_flight": self._in_flight,
            "batching": {
                "enabled": self.enabled,
                "max_batch_size": self.max_batch_size,
                "max_wait_ms": self.max_wait_ms,
                "arrival_gap_ms": self.arrival_gap_ms,
            },
            "served": {
                "requests": c.requests,
                "queries": c.queries,
                "batches": c.batches,
                "mean_batch_queries": round(c.queries / c.batches, 2) if c.batches else 0.0,
                "largest_batch_queries": c.largest_batch,
                "busy_seconds": round(c.busy_seconds, 3),
                "compute_seconds": round(c.compute_seconds, 3),
                "errors": c.errors,
            },
        }

    async def close(self) -> None:
        """Stop the loop, fail queued jobs with ``RuntimeError``, and release the worker thread."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None
        while self._pending:
            item = self._pending.popleft()
            if not item.future.done():
                item.future.set_exception(RuntimeError("the retriever server is shutting down"))
        self._queued_queries = 0
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
