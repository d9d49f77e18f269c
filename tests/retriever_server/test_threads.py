"""Process settings for serving: the OpenMP setting and the heap thresholds (set where the user chose nothing, never
over the user's choice), and the one compute thread that loads the model and runs its batches."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from retriever_server.threads import HEAP, OPENMP_ENV, compute_thread, in_compute_thread, keep_heap, quiet_openmp


def test_sets_the_spin_count_where_the_user_chose_nothing():
    env = {"PATH": "/bin"}
    assert quiet_openmp(env) == OPENMP_ENV == {"GOMP_SPINCOUNT": "10000"}
    assert env == {"PATH": "/bin", "GOMP_SPINCOUNT": "10000"}


@pytest.mark.parametrize("chosen", [{"GOMP_SPINCOUNT": "300000"}, {"OMP_WAIT_POLICY": "active"}])
def test_leaves_the_users_choice_alone(chosen):
    env = dict(chosen)
    assert quiet_openmp(env) == {}
    assert env == chosen


def test_serve_sets_it_before_torch_and_faiss_load():
    # The serve command must set the variable before the libraries (which read it once, at load) are imported.
    # It fixes the heap thresholds there too.
    code = (
        "import sys; from retriever_server import cli, threads\n"
        "kept = []\n"
        "threads.keep_heap = lambda: kept.append(threads.HEAP)\n"
        "def probe(args):\n"
        "    import os; print(os.environ.get('GOMP_SPINCOUNT'), 'torch' in sys.modules, 'faiss' in sys.modules)\n"
        "    print(kept == [threads.HEAP])\n"
        "    raise SystemExit(0)\n"
        "cli._load_args = probe\n"
        "cli.main(['serve', '--index', 'nowhere'])\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["10000", "False", "False", "True"], out.stderr[-2000:]


def test_a_late_call_warns_that_it_reaches_child_processes_only(monkeypatch, caplog):
    for name in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY"):  # set, then delete: monkeypatch restores the original state
        monkeypatch.setenv(name, "x")
        monkeypatch.delenv(name)
    monkeypatch.setitem(sys.modules, "torch", sys.modules.get("torch") or object())
    with caplog.at_level("WARNING", logger="retriever_server.threads"):
        assert quiet_openmp() == OPENMP_ENV
    assert os.environ["GOMP_SPINCOUNT"] == "10000"
    assert "child processes only" in caplog.text


def test_the_compute_thread_is_one_thread_for_the_whole_process():
    import threading

    assert compute_thread() is compute_thread()
    names = {in_compute_thread(lambda: threading.current_thread().name) for _ in range(3)}
    assert names == {"retriever-compute_0"}
    with pytest.raises(ZeroDivisionError):  # the caller gets the exception
        in_compute_thread(lambda: 1 / 0)


def test_serve_loads_the_index_in_the_thread_that_runs_its_batches(index_dir):
    # Loading runs torch's parallel regions; in another thread than the batches' it leaves OpenMP two teams
    # (retriever_server/threads.py). What the load made is then frozen out of the garbage collector's scans.
    code = (
        "import gc, threading; from retriever_server import app, cli, retriever\n"
        "loaded = []\n"
        "def probe(source, options):\n"
        "    print(threading.current_thread().name)\n"
        "    loaded.extend([i] for i in range(50000))\n"
        "    return loaded\n"
        "def create_app(retriever, server):\n"
        "    print(retriever is loaded, gc.get_freeze_count() > 50000)\n"
        "    raise SystemExit(0)\n"
        "retriever.load_source = probe\n"
        "app.create_app = create_app\n"
        f"cli.main(['serve', '--index', {str(index_dir)!r}])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["retriever-compute_0", "True", "True"], out.stderr[-2000:]


async def test_a_servers_batches_run_in_the_compute_thread(monkeypatch):
    import threading

    from retriever_server import app
    from retriever_server.batching import Job

    seen = []
    monkeypatch.setattr(app, "run_jobs", lambda retriever, jobs: seen.append(threading.current_thread().name) or jobs)
    batcher = app.make_batcher(object(), app.ServerConfig())
    assert await batcher.submit(Job(["a"])) is not None
    await batcher.close()
    assert seen == ["retriever-compute_0"]
    assert in_compute_thread(lambda: 2) == 2  # closing the batcher leaves the shared thread running


FAULTS_PER_BATCH = """
import json, resource, sys, threading
import numpy as np

def faults_per_batch(blocks, who=resource.RUSAGE_SELF):
    # A batch's activations: `blocks` blocks of 4 MB, written, then all freed. The fewest faults per batch past the
    # first, which grows the heap.
    counts = []
    for _ in range(6):
        f0 = resource.getrusage(who).ru_minflt
        batch = [np.ones(1 << 20, dtype=np.float32) for _ in range(blocks)]
        del batch
        counts.append(resource.getrusage(who).ru_minflt - f0)
    return min(counts[1:])
"""

HEAP_PROBE = """
from retriever_server.threads import keep_heap

before = faults_per_batch(10)
kept = keep_heap()
print(json.dumps({"before": before, "kept": kept, "after": faults_per_batch(10)}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
@pytest.mark.parametrize("tunables", [{}, {"GLIBC_TUNABLES": "glibc.pthread.rseq=0"}])  # not a malloc setting
def test_keep_heap_keeps_freed_memory_for_the_next_batch(tunables):
    # glibc's adaptive thresholds give 40 MB of freed blocks back to the system, so each batch faults its pages in
    # again (10,240 pages of 4 KB); with the fixed thresholds the next batch reuses them.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"} | tunables
    out = subprocess.run(
        [sys.executable, "-c", FAULTS_PER_BATCH + HEAP_PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    result = json.loads(out.stdout)
    assert result["kept"] == HEAP == {"M_MMAP_THRESHOLD": 32 << 20, "M_TRIM_THRESHOLD": 1 << 30, "M_ARENA_MAX": 1}
    assert result["before"] > 2000, result
    assert result["after"] < 200, result


THREAD_HEAP_PROBE = """
from retriever_server import threads

if sys.argv[1] == "thresholds-only":
    threads.HEAP = {k: v for k, v in threads.HEAP.items() if k != "M_ARENA_MAX"}
threads.keep_heap()
result = []
# A batch of 160 MB, run in a thread of its own (a server's compute thread).
worker = threading.Thread(target=lambda: result.append(faults_per_batch(40, resource.RUSAGE_THREAD)))
worker.start()
worker.join()
print(json.dumps(result[0]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_keep_heap_keeps_freed_memory_in_a_worker_thread_too():
    # A worker thread's secondary arena unmaps a heap of 64 MB as soon as it is wholly free, whatever the trim
    # threshold: a batch spanning several heaps faults its pages in again every time, unless all threads share one
    # arena.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}

    def faults(mode: str) -> int:
        out = subprocess.run(
            [sys.executable, "-c", FAULTS_PER_BATCH + THREAD_HEAP_PROBE, mode],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return json.loads(out.stdout)

    assert faults("thresholds-only") > 2000
    assert faults("kept") < 200


@pytest.mark.parametrize(
    "chosen",
    [
        {"MALLOC_TRIM_THRESHOLD_": "131072"},
        {"MALLOC_MMAP_THRESHOLD_": "131072"},
        {"MALLOC_ARENA_MAX": "4"},
        {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"},
    ],
)
def test_keep_heap_leaves_the_users_malloc_settings_alone(chosen):
    assert keep_heap(chosen) == {}
