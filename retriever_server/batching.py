"""Server-side micro-batching: concurrent requests merged into one encode + one search call, scheduled fairly.

Agent loops send one query per trajectory step, so a retrieval server sees many small concurrent requests. Encoding
them one by one leaves the encoder at batch size 1; merging them reaches its batched throughput.

:class:`MicroBatcher` runs batches in one worker thread and schedules them like this:

- **No wait when idle.** A request that finds the worker idle is dispatched at once, unless a shared batch has just
  ended (settling, below). Requests whose bytes arrived together are still merged, because the event loop hands all
  of them to their handlers before the scheduler task runs.
- **Continuous batching.** Requests that arrive while a batch runs wait in the queue and go out together the moment
  the worker frees.
- **Settling after a shared batch.** When a batch answered two or more requests, the scheduler waits for more before
  it takes the next batch: until as many new requests have arrived as the batch answered (or a full batch), besides
  those that arrived while it ran, for at most ``settle`` (0.1) times that batch's compute time. A closed loop of
  clients, such as rollout workers that send the next step's query at once, is back in a few milliseconds, and its
  requests join one batch. Without settling, the first client back finds the worker idle and starts a small batch, the
  others queue behind it, and the loop splits into groups that alternate; one group's HTTP work then runs while the
  other group's batch computes and takes a core from the encoder's threads. When the queue holds a full batch, nothing
  waits; a workload whose clients do not come back pays at most ``settle`` of a batch's time. A batch of one request
  never settles, so a lone client gets no added step. Measured at 64 clients x 1 query on 2 cores
  (``benchmarks/retriever_vs_reference.py``): 0.82x the in-process bound without settling, in batches of about 32. The
  earlier rule of a fixed 40 event-loop passes reached 0.90x, but it split batches once the HTTP path got faster (the
  passes ran out before the clients were back: a mean batch of 56 and 0.82x). Waiting for the clients gives whole
  batches again: a mean of 63.5-63.8 queries and 0.85-0.87x. Requests that arrived while the batch ran do not count
  toward the wait, and do not end it. Counted, a client that once came back late (after the next batch had started)
  stayed late for good: it stood in for one of the answered clients, and the last of those then missed the batch in
  turn. Ending the wait, they kept a loop that had split into two groups split for good (each group's requests arrive
  while the other's batch runs): on the 2-core box a 64-client loop that started split ran at 836 q/s in batches of
  35, against 950-1,000 q/s whole.
- **Fair shares.** A batch holds at most ``max_batch_size`` queries, divided among the waiting requests by
  water-filling: each gets an equal share, and what a small request does not use goes to the larger ones. A request
  that needs more than its share is split into micro-batches (slices of its queries, in order) interleaved with the
  others' work, and its slices' results are reassembled in order before it is answered. So a request never waits for
  more than the batch running when it arrived, however large the requests around it; with more waiting requests
  than ``max_batch_size``, the oldest go first, one query each.
- **Batches bounded by tokens.** A job may carry the tokens the encoder reads of each query (``Job.tokens``, from
  :class:`~retriever_server.encoders.TokenCounter`); a batch then also holds at most ``max_batch_tokens`` of them,
  shared by water-filling too: each job's query share is cut to the queries that fit its token share, and what the
  cut to whole queries leaves goes to the oldest jobs whose next query fits. A job left out of a batch (its share
  was less than its next query) has that query put first in the next batch, so a job of long queries is never
  starved by a stream of short ones; a query over the whole budget goes alone. Counted by queries alone, a batch of
  128 queries of 256 tokens was as likely as one of 128 x 12: 1,024 long queries took 102 s, and a 1-query request
  sent meanwhile waited 18-40 s. Bounded by tokens, the batch running when a request arrives costs at most
  ``max_batch_tokens`` of encoding (or one query), whatever the queries.

:func:`run_jobs` executes a batch (one encode call per text kind, one search call); ``loop.run_in_executor`` keeps
the event loop accepting requests while the model runs, and the model is never called from two threads.

Decisions:

- ``max_batch_size`` counts queries, not requests. A request's slices are ordinary jobs to :func:`run_jobs`, so
  encode-only jobs (``POST /encode``) are split and reassembled the same way.
- Tokens, not characters, measure a query's cost, because the encoder's work is per token (about the same per token
  for 12- and 256-token queries on MiniLM, where attention is a small part of each layer) and it truncates at
  ``max_length``: a 4,000-character query costs 256, not 1,000. A job without ``tokens`` counts one per query.
- Jobs with different ``topk`` share one search with the largest ``k``; each job gets its first ``topk`` columns.
  Query and passage texts are encoded separately because their prefixes differ.
- Results are split back in job order and row order; a job never sees another job's rows. If a batch raises, each
  of its slices is re-run alone, so one failing request cannot fail its neighbours; a request whose slice fails gets
  that exception and its remaining slices are dropped.
- No fixed wait and no arrival-gap rule: both only delayed requests. Settling waits for a known number of requests
  (those the last batch answered), and its bound is a share of the batch time, so the time it can cost is a fixed
  fraction of throughput, on a CPU and on a GPU alike.
- With batching disabled every request runs alone and whole, first come first served, in the same worker thread
  (what a synchronous server does).
- Timestamps use ``time.perf_counter``: uvloop's ``loop.time()`` advances in whole milliseconds.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import dataclasses
import itertools
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
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
        tokens: The token ids the encoder reads of each query (:meth:`~retriever_server.encoders.TokenCounter.
            tokenize`): the batcher's ``max_batch_tokens`` counts them, and the encoder takes them instead of
            tokenizing the queries again; ``None`` counts one per query.
    """

    queries: list[str]
    topk: int | None = None
    kind: Literal["query", "passage"] = "query"
    tokens: list[list[int]] | None = None


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
        if not texts:
            emb = np.empty((0, dim), np.float32)
        elif all(jobs[j].tokens is not None for j in members):  # tokenized when counted: not again
            emb = retriever.encode_queries(texts, kind, token_ids=[t for j in members for t in jobs[j].tokens])
        else:
            emb = retriever.encode_queries(texts, kind)
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


def merge_results(parts: list[Any]) -> Any:
    """Join the results of a split job's slices, in order (:class:`JobResult` s, or lists for plain batch functions).

    Raises:
        TypeError: The parts are neither; pass ``merge=`` to :class:`MicroBatcher` for other result types.
    """
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    if isinstance(first, JobResult):
        import numpy as np

        def cat(name: str) -> np.ndarray | None:
            arrays = [getattr(p, name) for p in parts]
            return None if arrays[0] is None else np.concatenate(arrays)

        return JobResult(cat("embeddings"), cat("scores"), cat("rows"))
    if isinstance(first, list):
        return [item for part in parts for item in part]
    raise TypeError(f"cannot join split results of type {type(first).__name__}; pass merge= to MicroBatcher")


def fair_shares(remaining: Sequence[int], capacity: int) -> list[int]:
    """Split ``capacity`` queries among waiting jobs by water-filling, oldest first.

    Every job gets an equal share; what a job does not need goes to the others. With more jobs than ``capacity`` the
    oldest ``capacity`` jobs get one query each. A job with nothing left (an empty job) gets 0.

    >>> fair_shares([1, 500], 8), fair_shares([3, 3, 3], 8), fair_shares([1] * 5, 3)
    ([1, 7], [3, 3, 2], [1, 1, 1, 0, 0])
    """
    shares = [0] * len(remaining)
    active = [i for i, n in enumerate(remaining) if n > 0]
    left = capacity
    while active and left > 0:
        each = left // len(active)
        if each == 0:  # fewer queries left than jobs: one each, oldest first
            for i in active[:left]:
                shares[i] += 1
            break
        still = []
        for i in active:
            give = min(each, remaining[i] - shares[i])
            shares[i] += give
            left -= give
            if shares[i] < remaining[i]:
                still.append(i)
        active = still
    return shares


@dataclass(eq=False)
class _Pending:
    """A submitted job: its next undispatched query and the results of its slices so far."""

    job: Job
    future: asyncio.Future
    enqueued: float
    base: int
    """The scheduler's batch count at arrival, minus the batch then running (for ``max_batches_waited``)."""
    next: int = 0
    parts: list = field(default_factory=list)
    cumulative: list[int] | None = None
    """Running totals of ``job.tokens`` from 0 (``[n + 1]``), or ``None`` for a job without tokens."""
    skipped: bool = False
    """Left out of the last batch (its share of the tokens was less than its next query): first in the next one."""

    def __post_init__(self) -> None:
        if self.job.tokens is not None:
            self.cumulative = list(itertools.accumulate(map(len, self.job.tokens), initial=0))

    @property
    def remaining(self) -> int:
        return len(self.job.queries) - self.next

    def cost(self, count: int, after: int = 0) -> int:
        """Tokens of ``count`` queries of the job, from its next query plus ``after``."""
        c = self.cumulative
        n = len(self.job.queries)
        start = min(self.next + after, n)
        stop = min(start + count, n)
        return stop - start if c is None else c[stop] - c[start]

    def fitting(self, tokens: int, after: int = 0) -> int:
        """How many queries of the job, from its next query plus ``after``, fit in ``tokens``."""
        c = self.cumulative
        start = min(self.next + after, len(self.job.queries))
        if c is None:
            return min(len(self.job.queries) - start, tokens)
        return bisect.bisect_right(c, c[start] + tokens) - 1 - start


@dataclass
class _Slice:
    pending: _Pending
    job: Job
    last: bool


@dataclass
class _Counters:
    requests: int = 0
    queries: int = 0
    batches: int = 0
    largest_batch: int = 0
    largest_batch_tokens: int = 0
    split_requests: int = 0
    max_batches_waited: int = 0
    busy_seconds: float = 0.0
    compute_seconds: float = 0.0
    longest_batch_seconds: float = 0.0
    errors: int = 0


@dataclass
class MicroBatcher:
    """Run concurrent jobs as fair, continuous micro-batches of ``run_batch`` in one worker thread.

    Args:
        run_batch: Blocking function running a list of jobs, e.g. ``functools.partial(run_jobs, retriever)``; returns
            one result per job.
        max_batch_size: Most queries per batch; larger requests are split (see the module docstring).
        max_batch_tokens: Most tokens per batch, counted from the jobs' ``tokens`` (``None``: queries alone bound a
            batch; see the module docstring).
        enabled: ``False`` runs every job alone and whole, first come first served (micro-batching off).
        settle: After a batch of two or more requests, how long to wait for as many queued requests as it answered,
            as a fraction of its compute time (see the module docstring); 0 takes the next batch at once.
        merge: Joins a split job's slice results in order (default :func:`merge_results`).
        executor: Where batches run, one at a time; default: a thread of its own, released by :meth:`close`. A server
            passes :func:`~retriever_server.threads.compute_thread`, the thread that loaded its model.

    Example:
        >>> import asyncio
        >>> batcher = MicroBatcher(lambda jobs: [j.queries for j in jobs], max_batch_size=2)
        >>> async def main():
        ...     return await asyncio.gather(batcher.submit(Job(["a"])), batcher.submit(Job(["b", "c", "d"])))
        >>> asyncio.run(main())
        [['a'], ['b', 'c', 'd']]
    """

    run_batch: Callable[[list[Job]], list[Any]]
    max_batch_size: int = 128
    max_batch_tokens: int | None = None
    enabled: bool = True
    settle: float = 0.1
    merge: Callable[[list[Any]], Any] = merge_results
    executor: Executor | None = None
    _pending: collections.deque = field(default_factory=collections.deque, init=False, repr=False)
    _wakeup: asyncio.Event | None = field(default=None, init=False, repr=False)
    _task: asyncio.Task | None = field(default=None, init=False, repr=False)
    _executor: Executor | None = field(default=None, init=False, repr=False)
    _queued_queries: int = field(default=0, init=False)
    _in_flight: int = field(default=0, init=False)
    _running: bool = field(default=False, init=False)
    _started: int = field(default=0, init=False)
    _last_compute: float = field(default=0.0, init=False)
    _counters: _Counters = field(default_factory=_Counters, init=False)

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1 (got {self.max_batch_size}).")
        if self.max_batch_tokens is not None and self.max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens must be >= 1 or None (got {self.max_batch_tokens}).")
        if not 0 <= self.settle <= 1:
            raise ValueError(f"settle must be from 0 to 1 (got {self.settle}): a fraction of a batch's compute time.")

    async def submit(self, job: Job) -> Any:
        """Queue a job and wait for its result (re-raises the batch function's exception for this job)."""
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done():
            self._start(loop)
        future = loop.create_future()
        base = self._started - (1 if self._running else 0)
        self._pending.append(_Pending(job, future, time.perf_counter(), base))
        self._queued_queries += len(job.queries)
        self._counters.requests += 1
        self._counters.queries += len(job.queries)
        self._wakeup.set()
        return await future

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._wakeup = asyncio.Event()
        if self._executor is None:
            self._executor = self.executor or ThreadPoolExecutor(max_workers=1, thread_name_prefix="retriever-worker")
        self._task = loop.create_task(self._loop(), name="retriever-micro-batcher")

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = self._take_batch()
            if not batch:  # idle: sleep until the next submit, then dispatch at once
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            t0 = time.perf_counter()
            await self._run(batch, loop)
            if len(batch) > 1:  # let the answered clients' next requests in (module docstring: settling)
                await self._settle(answered=sum(1 for s in batch if s.last))
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug(
                    "batch: %d slices, %d queries, oldest waited %.1f ms, computed %.1f ms, done after %.1f ms, "
                    "%d queries queued meanwhile",
                    len(batch),
                    sum(len(s.job.queries) for s in batch),
                    1000 * (t0 - min(s.pending.enqueued for s in batch)),
                    1000 * self._last_compute,
                    1000 * (time.perf_counter() - t0),
                    self._queued_queries,
                )

    async def _settle(self, answered: int) -> None:
        """Wait until as many new requests as the last batch ``answered`` have arrived besides those that arrived
        while it ran (or a full batch), for at most ``settle`` times that batch's compute time (module docstring:
        settling)."""
        waiting = len(self._pending)  # arrived while the batch ran
        deadline = time.perf_counter() + self.settle * self._last_compute
        while len(self._pending) < waiting + answered and self._queued_queries < self.max_batch_size:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                return
            self._wakeup.clear()  # set by every submit
            try:
                await asyncio.wait_for(self._wakeup.wait(), remaining)
            except TimeoutError:
                return

    def _take_batch(self) -> list[_Slice]:
        """The next batch: fair shares of the waiting jobs (or the oldest job whole when batching is off)."""
        live = []
        for p in self._pending:
            if p.future.done():  # the client went away, or an earlier slice failed
                self._queued_queries -= p.remaining
            else:
                live.append(p)
        if len(live) != len(self._pending):
            self._pending = collections.deque(live)
        if not live:
            return []
        if self.enabled:
            shares = self._shares(live)
        else:
            shares = [live[0].remaining] + [0] * (len(live) - 1)
        batch: list[_Slice] = []
        for i, (p, n) in enumerate(zip(live, shares, strict=True)):
            if n == 0 and not (p.remaining == 0 and (self.enabled or i == 0)):  # an empty job rides along
                continue
            start, p.next = p.next, p.next + n
            if start == 0:
                waited = self._started - p.base
                self._counters.max_batches_waited = max(self._counters.max_batches_waited, waited)
                if p.next < len(p.job.queries):
                    self._counters.split_requests += 1
            whole = start == 0 and p.next == len(p.job.queries)
            job = p.job
            if not whole:
                tokens = None if job.tokens is None else job.tokens[start : p.next]
                job = dataclasses.replace(job, queries=job.queries[start : p.next], tokens=tokens)
            batch.append(_Slice(p, job, last=p.remaining == 0))
            self._queued_queries -= n
        self._pending = collections.deque(p for p in self._pending if p.remaining > 0)
        return batch

    def _shares(self, live: list[_Pending]) -> list[int]:
        """Queries of each waiting job in the next batch: fair shares of ``max_batch_size`` queries and of
        ``max_batch_tokens`` tokens (module docstring: fair shares, batches bounded by tokens)."""
        budget = self.max_batch_tokens
        if budget is None or all(p.cumulative is None for p in live):
            return fair_shares([p.remaining for p in live], self.max_batch_size)
        shares = [0] * len(live)
        room, left = self.max_batch_size, budget
        for i, p in enumerate(live):  # a job left out of the last batch goes first, by one query
            if p.skipped and p.remaining and room and (p.cost(1) <= left or room == self.max_batch_size):
                shares[i] = 1
                room, left = room - 1, left - p.cost(1)
        extra = fair_shares([p.remaining - n for p, n in zip(live, shares, strict=True)], room)
        tokens = fair_shares([p.cost(e, n) for p, n, e in zip(live, shares, extra, strict=True)], max(0, left))
        for i, p in enumerate(live):
            take = min(extra[i], p.fitting(tokens[i], shares[i]))
            shares[i] += take
            room, left = room - take, left - p.cost(take, shares[i] - take)
        for i, p in enumerate(live):  # what the cut to whole queries left, oldest first
            while room and shares[i] < p.remaining and p.cost(1, shares[i]) <= left:
                left -= p.cost(1, shares[i])
                shares[i] += 1
                room -= 1
        waiting = [i for i, p in enumerate(live) if p.remaining]
        if waiting and not any(shares):  # the oldest job's next query is over the whole budget: it goes alone
            shares[waiting[0]] = 1
        for p, n in zip(live, shares, strict=True):
            p.skipped = bool(p.remaining) and not n
        return shares

    def _timed_run(self, jobs: list[Job]) -> list[Any]:
        t0 = time.perf_counter()
        try:
            return self.run_batch(jobs)
        finally:
            self._last_compute = time.perf_counter() - t0
            self._counters.compute_seconds += self._last_compute
            self._counters.longest_batch_seconds = max(self._counters.longest_batch_seconds, self._last_compute)

    async def _run(self, batch: list[_Slice], loop: asyncio.AbstractEventLoop) -> None:
        jobs = [s.job for s in batch]
        size = sum(len(j.queries) for j in jobs)
        tokens = sum(len(j.queries) if j.tokens is None else sum(map(len, j.tokens)) for j in jobs)
        self._in_flight, self._running = size, True
        self._started += 1
        t0 = time.perf_counter()
        try:
            results = await loop.run_in_executor(self._executor, self._timed_run, jobs)
        except asyncio.CancelledError:  # close() while this batch ran: its callers must not wait forever
            for s in batch:
                if not s.pending.future.done():
                    s.pending.future.set_exception(RuntimeError("the retriever server is shutting down"))
            raise
        except Exception as batch_error:
            if len(batch) == 1:
                results = [batch_error]
            else:  # isolate the failing job(s): re-run each slice alone
                results = []
                for job in jobs:
                    try:
                        results.append((await loop.run_in_executor(self._executor, self.run_batch, [job]))[0])
                    except Exception as e:
                        results.append(e)
        finally:
            self._in_flight, self._running = 0, False
        self._counters.batches += 1
        self._counters.largest_batch = max(self._counters.largest_batch, size)
        self._counters.largest_batch_tokens = max(self._counters.largest_batch_tokens, tokens)
        self._counters.busy_seconds += time.perf_counter() - t0
        for s, result in zip(batch, results, strict=True):
            future = s.pending.future
            if future.done():
                continue
            if isinstance(result, Exception):
                self._counters.errors += 1
                logger.error("Retrieval job failed: %r", result, exc_info=result)
                future.set_exception(result)  # its remaining slices are dropped at the next _take_batch
                continue
            s.pending.parts.append(result)
            if s.last:
                try:
                    future.set_result(self.merge(s.pending.parts))
                except Exception as e:
                    self._counters.errors += 1
                    future.set_exception(e)

    def stats(self) -> dict[str, Any]:
        """Queue depth and scheduling counters (for ``GET /health``)."""
        c = self._counters
        return {
            "queue_depth": self._queued_queries,
            "in_flight": self._in_flight,
            "batching": {
                "enabled": self.enabled,
                "max_batch_size": self.max_batch_size,
                "max_batch_tokens": self.max_batch_tokens,
                "scheduler": "continuous, fair shares" if self.enabled else "one request at a time",
            },
            "served": {
                "requests": c.requests,
                "queries": c.queries,
                "batches": c.batches,
                "mean_batch_queries": round(c.queries / c.batches, 2) if c.batches else 0.0,
                "largest_batch_queries": c.largest_batch,
                "largest_batch_tokens": c.largest_batch_tokens,
                "split_requests": c.split_requests,
                "max_batches_waited": c.max_batches_waited,
                "busy_seconds": round(c.busy_seconds, 3),
                "compute_seconds": round(c.compute_seconds, 3),
                "longest_batch_seconds": round(c.longest_batch_seconds, 4),
                "errors": c.errors,
            },
        }

    async def close(self) -> None:
        """Stop the loop, fail queued jobs with ``RuntimeError``, and release the worker thread (if its own)."""
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
        if self._executor is not None and self._executor is not self.executor:  # its own, not a shared one
            self._executor.shutdown(wait=False, cancel_futures=True)
        self._executor = None
