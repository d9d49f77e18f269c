"""Process settings for serving on CPU: idle OpenMP threads must not spin on the cores the next batch needs, busy ones
must not fall asleep between the encoder's operations, and memory a batch freed must stay for the next one.

torch and faiss each ship their own OpenMP runtime (two copies of libgomp in the pip wheels), each with a thread per
core. After a parallel region libgomp's threads spin for up to ``GOMP_SPINCOUNT`` iterations (300,000 by default)
before they sleep. In a server that alternates encode (torch) and search (faiss) on the same cores, the threads of
the runtime that just finished keep spinning while the other runtime's threads start, so every batch begins with
half its cores taken, and a lone query encoded on one thread leaves torch's second thread spinning at 100% of a
core beside the event loop. Measured on the 2-core box (MiniLM, 20k Flat, one encode + search of 64 queries, medians
of three interleaved runs): 499 q/s at the default spin, 519 at 0, 537 at 1,000, 552 at 10,000; the server gained
10-15% at 64 clients and 1.2x at one client (docs/retriever.md, *Serving under load*). The setting is read once,
when libgomp loads, so it must be in the environment before torch or faiss is imported; :func:`quiet_openmp` does
that for the serving processes unless the user set the variable.

The opposite trap: libgomp keeps one team of threads per thread that ever ran a parallel region, and when its teams
hold more threads than the machine has cores it cuts every spin to 1,000 iterations (its "throttled" spin). A model
loaded in the main thread (loading and the first forward pass run parallel regions) and then run in a server's worker
thread leaves two teams, 4 threads on 2 cores: the worker's helper thread then sleeps after almost every operation
and must be woken for the next one. Measured in the server (MiniLM, one 64-query request at a time, 4 s): 5,000 and
7,000 voluntary context switches for the two compute threads and 578 q/s; loaded in the thread that runs the batches,
250 and 100 switches and 663 q/s. So a server loads its model in :func:`compute_thread` and runs every batch there.

The heap: glibc serves an allocation above its mmap threshold with a fresh ``mmap`` and returns freed memory at the
top of the heap to the system once it exceeds the trim threshold. Both thresholds adapt to the largest block freed
so far (about 4 MB for an encoder's activations), so the 40-odd MB a batch allocates and frees go back to the system
after every batch and the next batch takes a page fault on every 4 KB page it touches again. Measured on the 2-core
box (a virtual machine, where a fault costs about 1.4 µs; MiniLM, 64 queries): 10,600 faults and 103-107 ms per
encode; with fixed thresholds (:data:`HEAP`), 450 faults and 88-92 ms, the same embeddings to the last bit.
A thread other than the main one allocates from a secondary arena, whose memory comes in heaps of 64 MB, and a heap
that a batch's freed blocks leave wholly free is unmapped at once, whatever the trim threshold. A batch that spans
several heaps in the compute thread then faults its pages in every time: 160 MB of 4 MB blocks took 5,131 faults per
batch, against none in one arena. So the serving processes also keep to one arena (``M_ARENA_MAX``). Measured in
the server at 64 clients (two paired runs each): 340-700 faults per batch in the compute threads against 140-160,
52.5 instead of 54 ms of the compute thread's CPU per batch, 1,011-1,031 instead of 980-991 q/s.
:func:`keep_heap` makes these settings for the serving processes (``mallopt``; the thresholds are read at every
allocation, the arena limit when a thread first allocates, so it is made before the compute thread starts), unless
the user chose glibc's malloc settings through its environment variables.

The garbage collector: a loaded encoder leaves about 490,000 Python objects (torch, transformers, the tokenizer),
and every full collection walks all of them while it holds the GIL: 126 ms, twice in 20 s of serving 64 clients,
during which no batch runs Python and no request is read. :func:`load_for_serving` freezes what the load created
(``gc.freeze``), so full collections skip it: 3 ms each.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import platform
import sys
import threading
from collections.abc import Callable, Mapping, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

OPENMP_ENV = {"GOMP_SPINCOUNT": "10000"}
"""What :func:`quiet_openmp` sets (``OMP_WAIT_POLICY`` also controls spinning, so a user who set it is left alone)."""


def quiet_openmp(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Put :data:`OPENMP_ENV` into ``environ`` (default ``os.environ``) where the user has not chosen otherwise.

    Call it before torch or faiss is imported: libgomp reads the variable when it loads. In a process that already
    imported one of them the setting still reaches its child processes, and a warning says so.

    Returns:
        The variables that were set (empty when the user set ``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY``).
    """
    env = os.environ if environ is None else environ
    if "GOMP_SPINCOUNT" in env or "OMP_WAIT_POLICY" in env:
        return {}
    env.update(OPENMP_ENV)
    if environ is None:
        loaded = [name for name in ("torch", "faiss") if name in sys.modules]
        if loaded:
            logger.warning(
                "GOMP_SPINCOUNT=%s was set after %s had been imported, so it applies to child processes only; set it "
                "in the environment before starting Python to apply it here.",
                OPENMP_ENV["GOMP_SPINCOUNT"],
                " and ".join(loaded),
            )
    return dict(OPENMP_ENV)


HEAP = {"M_MMAP_THRESHOLD": 32 << 20, "M_TRIM_THRESHOLD": 1 << 30, "M_ARENA_MAX": 1}
"""What :func:`keep_heap` sets: blocks under 32 MiB (glibc's largest mmap threshold) come from the heap, up to 1 GiB
of freed heap is kept for the next batch, and threads that start afterwards allocate from the main arena, so a
server's RSS stays at its largest batch's working set. The arena limit only stops new arenas: in a process whose
threads already have their own (a Ray worker), a new thread may be given one of those."""

_MALLOPT_PARAMS = {"M_TRIM_THRESHOLD": -1, "M_MMAP_THRESHOLD": -3, "M_ARENA_MAX": -8}  # glibc's <malloc.h>
_MALLOC_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_ARENA_MAX")


def keep_heap(environ: Mapping[str, str] | None = None) -> dict[str, int]:
    """Fix glibc's mmap and trim thresholds and its arena count at :data:`HEAP` (module docstring: the heap), for this
    process. Call it before the threads that run batches start.

    Returns:
        What was set; empty when the C library is not glibc, or when the user set ``MALLOC_MMAP_THRESHOLD_``,
        ``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_ARENA_MAX`` or a ``glibc.malloc`` tunable in ``GLIBC_TUNABLES``
        (``environ``, default ``os.environ``).
    """
    env = os.environ if environ is None else environ
    if any(name in env for name in _MALLOC_ENV) or "glibc.malloc." in env.get("GLIBC_TUNABLES", ""):
        return {}
    if platform.libc_ver()[0] != "glibc":
        return {}
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    done = {}
    for name, value in HEAP.items():
        if mallopt(_MALLOPT_PARAMS[name], value) != 1:
            logger.warning("mallopt(%s, %d) was refused; batches may fault their memory in again.", name, value)
            continue
        done[name] = value
    return done


def serving_process() -> None:
    """What a serving process calls first, before torch or faiss is imported: :func:`quiet_openmp` and
    :func:`keep_heap`."""
    quiet_openmp()
    keep_heap()


T = TypeVar("T")
_compute: ThreadPoolExecutor | None = None
_compute_lock = threading.Lock()


def compute_thread() -> ThreadPoolExecutor:
    """The process's one thread for model and index work: a server loads its retriever here and runs its batches
    here, so OpenMP keeps one team (module docstring)."""
    global _compute
    with _compute_lock:
        if _compute is None:
            _compute = ThreadPoolExecutor(max_workers=1, thread_name_prefix="retriever-compute")
        return _compute


def in_compute_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` run in :func:`compute_thread`, waited for (its exception is raised here)."""
    return compute_thread().submit(fn, *args, **kwargs).result()


def load_for_serving(load: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``load(*args, **kwargs)`` run in :func:`compute_thread`, where the batches will run; then every object alive
    is moved out of the garbage collector's scans (``gc.freeze``; module docstring)."""
    loaded = in_compute_thread(load, *args, **kwargs)
    gc.collect()  # the load's own garbage goes now, not frozen for good
    gc.freeze()
    return loaded
