"""Our retriever server against the Search-R1 reference server, side by side in one run.

The reference is Search-R1's ``search_r1/search/retrieval_server.py`` from the user's own checkout (``--reference
PATH``); nothing of it is copied here. It is started as a subprocess with its own command line (``--index_path``,
``--corpus_path``, ``--topk``, ``--retriever_name``, ``--retriever_model``) through a small launcher (this file with
``--launch-reference``) that lets it run on a machine without CUDA: ``Module.cuda`` / ``Tensor.cuda`` and
``Module.half`` become no-ops (the script hard-codes CUDA and fp16; fp32 on CPU is what our server runs there too),
and ``uvicorn.run`` gets 127.0.0.1 and a free port instead of its fixed ``0.0.0.0:8000``. Everything else (its
synchronous endpoint in FastAPI's thread pool, its encoder, faiss at its default settings, its corpus via
``datasets``) runs as written.

Both servers load the same faiss Flat index file and the same corpus ``.jsonl``, with the same encoder (MiniLM,
mean pooling, L2 norm, max length 256). By default the index is the synthetic one of ``retriever_load.py``
(``--passages`` generated passages with random unit vectors; throughput does not depend on what the vectors mean)
so a run needs no index build; ``--index DIR`` measures an index directory made by ``python -m retriever_server
build`` (its ``corpus.jsonl`` beside it, or ``--corpus``).

One run measures, for the loads 1, 8, 64 and 256 closed-loop clients x 1 query and 1 client x 64 queries, both
servers in alternation (reference, ours, reference, ours ... so a change of background load hits both): queries/s
and p50 / p99 request latency, the median of ``--repeats`` runs each. Load generator and windows are those of
``retriever_load.py`` (keep-alive HTTP/1.1 clients on uvloop; the warm-up lasts until every client had an answer
and the window until it holds ``--rounds`` answers per client, so a slow server under 256 clients is measured in its
steady state). Also measured: the in-process bound (one encode + search call of 64 queries in this process, no
HTTP), right before each of our 64-client runs, and whether both servers return the same ranked top-3 for 256
queries. The bound is counted as the servers are: back-to-back calls on batches drawn as the clients draw theirs,
for as long as one of our windows, and queries over their total time (its median call is printed beside it).

Printed checks (the targets): at every load ours has at least the reference's q/s and at most its p50; at 64 clients
ours reaches >= 10x the reference and >= 0.9x the in-process bound. A failed check is printed as FAIL with its
figures; the exit code is 0 either way (``--strict`` makes it 1).

``--bf16`` runs our encoder in bfloat16, in the server and in the bound; the reference stays float32, so that run
compares two precisions (the top-3 line counts the rankings bf16 kept) and is reported apart from the float32 table.

Usage::

    git -C Search-R1 show HEAD:search_r1/search/retrieval_server.py > /tmp/searchr1_retrieval_server.py  # or a path
    python benchmarks/retriever_vs_reference.py --reference /tmp/searchr1_retrieval_server.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from retriever_load import (
    ROOT,
    ForeignCpu,
    InProcessBound,
    add_index_options,
    drive,
    free_port,
    make_queries,
    median_run,
    minilm,
    print_machine,
    row_line,
    run_loop,
    start_server,
    timed_synthetic_index,
)

from retriever_server.threads import keep_heap, quiet_openmp

LAUNCH = "--launch-reference"


def launch_reference(argv: list[str]) -> None:
    """Run the reference script as ``__main__`` on CPU, on 127.0.0.1:PORT (see the module docstring).

    ``argv``: ``SCRIPT PORT [reference arguments...]``.
    """
    import runpy

    import torch
    import uvicorn

    script, port, *reference_args = argv
    torch.nn.Module.cuda = lambda self, *args, **kwargs: self
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    torch.nn.Module.half = lambda self: self
    run = uvicorn.run

    def run_here(app, **kwargs):
        return run(app, **{**kwargs, "host": "127.0.0.1", "port": int(port)})

    uvicorn.run = run_here
    sys.argv = [script, *reference_args]
    runpy.run_path(script, run_name="__main__")


def start_reference(script: Path, port: int, index_file: Path, corpus: Path, model: str, log: Path, env: dict):
    """Start the reference server and wait until ``/retrieve`` answers (it has no ``/health``; without
    ``return_scores: true`` it fails with 500, so every request here sends it, as Search-R1's own client does)."""
    import httpx

    cmd = [sys.executable, __file__, LAUNCH, str(script), str(port)]
    cmd += ["--index_path", str(index_file), "--corpus_path", str(corpus), "--topk", "3"]
    cmd += ["--retriever_name", "minilm", "--retriever_model", model]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the reference server exited with {proc.returncode}:\n{tail}")
        try:
            r = httpx.post(
                f"http://127.0.0.1:{port}/retrieve",
                json={"queries": ["warm up"], "topk": 3, "return_scores": True},
                timeout=5,
            )
            if r.status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError("the reference server did not answer within 300 s")


def top3(port: int, queries: list[str]) -> list[list[tuple[str, float]]]:
    import httpx

    r = httpx.post(
        f"http://127.0.0.1:{port}/retrieve", json={"queries": queries, "topk": 3, "return_scores": True}, timeout=600
    )
    r.raise_for_status()
    return [[(str(h["document"]["id"]), float(h["score"])) for h in hits] for hits in r.json()["result"]]


def measure(port: int, pid: int, clients: int, per_request: int, queries: list[str], args) -> dict:
    with ForeignCpu(pid) as foreign:
        stats = run_loop(drive(port, clients, per_request, queries, args.seconds, args.warmup, args.rounds))
    return {**stats, "other_load_cores": round(foreign.cores, 2)}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == LAUNCH:
        launch_reference(sys.argv[2:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", required=True, help="Search-R1's search_r1/search/retrieval_server.py")
    parser.add_argument("--index", help="an index directory (default: a synthetic Flat index, see docstring)")
    parser.add_argument("--corpus", help="the corpus .jsonl the --index was built from (default DIR/corpus.jsonl)")
    add_index_options(parser, model_help="encoder")
    parser.add_argument("--seconds", type=float, default=4.0, help="shortest measured window per run (default 4)")
    parser.add_argument("--warmup", type=float, default=1.0, help="shortest warm-up per run (default 1)")
    parser.add_argument("--rounds", type=int, default=2, help="answers per client in each window, at least (2)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per row and server; median reported (3)")
    parser.add_argument("--server-args", default="", help="extra `serve` flags for our server")
    parser.add_argument(
        "--loads", default="1x1,8x1,64x1,256x1,1x64", help="CxQ list: C clients x Q queries per request (default all)"
    )
    parser.add_argument(
        "--reference-openmp",
        action="store_true",
        help="give the reference our server's OpenMP setting too (default: the environment as it was)",
    )
    parser.add_argument(
        "--bf16",
        action="store_true",
        help="our encoder in bfloat16, in the server and the bound (the reference stays float32; the top-3 check "
        "then counts how many rankings bf16 kept)",
    )
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a check fails")
    args = parser.parse_args()
    loads = [tuple(int(n) for n in item.split("x")) for item in args.loads.split(",")]
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    # The in-process bound runs with the OpenMP and heap settings our server gives itself (retriever_server.threads):
    # the faster ones. The reference runs in the environment as it was, as its users run it.
    reference_env = dict(os.environ)
    openmp = quiet_openmp()
    heap = keep_heap()
    if args.reference_openmp:
        reference_env.update(openmp)
    reference = Path(args.reference).resolve()
    if not reference.is_file():
        parser.error(f"--reference {reference} is not a file; pass Search-R1's search_r1/search/retrieval_server.py")

    info = print_machine()
    print(
        f"OpenMP: ours and the bound {openmp or 'as set by the user'}, the reference "
        f"{openmp if args.reference_openmp else 'as the environment was'}",
        flush=True,
    )
    print(f"heap: ours and the bound {heap or 'as set by the user'}, the reference glibc's default", flush=True)
    print(f"encoder: ours and the bound {'bfloat16' if args.bf16 else 'float32'}, the reference float32", flush=True)
    queries = make_queries(512)
    with tempfile.TemporaryDirectory(prefix="retriever-vs-reference-") as tmp:
        if args.model is None:
            args.model = minilm()
        if args.index:
            index_dir = Path(args.index)
            corpus = Path(args.corpus) if args.corpus else index_dir / "corpus.jsonl"
        else:
            index_dir = timed_synthetic_index(Path(tmp) / "index", args.passages, args.model)
            corpus = index_dir / "corpus.jsonl"
        if not corpus.is_file():
            parser.error(f"no corpus {corpus}; pass --corpus (the .jsonl the index was built from)")

        bound = InProcessBound(index_dir, queries, bf16=args.bf16)
        bound_times: list[float] = []
        ours_port, ref_port = free_port(), free_port()
        ours = start_server(index_dir, ours_port, args.server_args.split() + (["--bf16"] if args.bf16 else []))
        log = Path(tmp) / "reference.log"
        try:
            ref = start_reference(
                reference, ref_port, index_dir / "index.faiss", corpus, args.model, log, reference_env
            )
        except Exception:
            ours.terminate()
            raise
        rows: dict[str, dict] = {}
        pairs: list[dict] = []
        try:
            check_queries = make_queries(256, seed=7)
            got_ref, got_ours = top3(ref_port, check_queries), top3(ours_port, check_queries)
            same = sum([d for d, _ in a] == [d for d, _ in b] for a, b in zip(got_ref, got_ours, strict=True))
            score_diff = max(
                abs(sa - sb)
                for a, b in zip(got_ref, got_ours, strict=True)
                for (_, sa), (_, sb) in zip(a, b, strict=False)
            )
            print(f"top-3: identical ranked ids for {same}/256 queries, largest score difference {score_diff:.2e}")
            for clients, per_request in loads:
                runs: dict[str, list[dict]] = {"reference": [], "ours": []}
                for _ in range(args.repeats):
                    runs["reference"].append(measure(ref_port, ref.pid, clients, per_request, queries, args))
                    if (clients, per_request) == (64, 1):
                        c_qps, times = bound.throughput(args.seconds)
                        bound_times += times
                    runs["ours"].append(measure(ours_port, ours.pid, clients, per_request, queries, args))
                    if (clients, per_request) == (64, 1):
                        pairs.append({"bound_qps": round(c_qps, 1), "ours_qps": round(runs["ours"][-1]["qps"], 1)})
                for name, server_runs in runs.items():
                    st = rows[f"{name}|{clients}|{per_request}"] = median_run(server_runs)
                    line = row_line(f"{name:9s}", clients, per_request, st, st["other_load_cores"], window=True)
                    print(line, flush=True)
            import httpx

            health = httpx.get(f"http://127.0.0.1:{ours_port}/health", timeout=30).json()
        finally:
            for proc in (ref, ours):
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()

    if not bound_times:  # no 64-client load in --loads
        bound_times = bound.throughput(args.seconds)[1]
    bound_qps = 64 * len(bound_times) / sum(bound_times)
    bound_median_qps = 64 / statistics.median(bound_times)
    print()
    print("| load | reference q/s | reference p50 / p99 ms | ours q/s | ours p50 / p99 ms | q/s ratio | other load |")
    print("|---|---|---|---|---|---|---|")
    checks: list[tuple[str, bool, str]] = []
    for clients, per_request in loads:
        r, o = rows[f"reference|{clients}|{per_request}"], rows[f"ours|{clients}|{per_request}"]
        ratio = o["qps"] / r["qps"]
        load = f"{clients} client{'s' if clients > 1 else ''} x {per_request} quer{'ies' if per_request > 1 else 'y'}"
        print(
            f"| {load} | {r['qps']:.1f} | {r['p50_ms']:.1f} / {r['p99_ms']:.1f} | {o['qps']:.1f} | "
            f"{o['p50_ms']:.1f} / {o['p99_ms']:.1f} | {ratio:.2f}x | "
            f"{max(r['other_load_cores'], o['other_load_cores']):.2f} |"
        )
        checks.append((f"{load}: ours q/s >= reference", ratio >= 1.0, f"{o['qps']:.1f} vs {r['qps']:.1f}"))
        checks.append(
            (
                f"{load}: ours p50 <= reference p50",
                o["p50_ms"] <= r["p50_ms"],
                f"{o['p50_ms']:.1f} vs {r['p50_ms']:.1f} ms",
            )
        )
    print(
        f"| in-process bound (64 queries, one call) | - | - | {bound_qps:.1f} | {1000 * 64 / bound_median_qps:.1f} | "
        "- | - |"
    )
    print(
        f"(the bound: {len(bound_times)} back-to-back calls in windows as long as ours, queries over their total time; "
        f"from the median call: {bound_median_qps:.1f} q/s)"
    )
    if "ours|64|1" in rows:
        r64, o64 = rows["reference|64|1"], rows["ours|64|1"]
        paired = statistics.median(p["ours_qps"] / p["bound_qps"] for p in pairs)
        checks.append(
            ("64 clients: ours >= 10x reference", o64["qps"] >= 10 * r64["qps"], f"{o64['qps'] / r64['qps']:.1f}x")
        )
        checks.append(
            (
                "64 clients: ours >= 0.9x in-process bound",
                o64["qps"] >= 0.9 * bound_qps,
                f"{o64['qps'] / bound_qps:.2f}x ({o64['qps']:.1f} / {bound_qps:.1f}); paired rounds: median "
                f"{paired:.2f}x; against the median call: {o64['qps'] / bound_median_qps:.2f}x",
            )
        )
    checks.append(("top-3 identical on 256 queries", same == 256, f"{same}/256"))
    print()
    for name, ok, detail in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}")
    served = health.get("served", {})
    print(
        f"\nours, /health at the end: {served.get('batches')} batches for {served.get('requests')} requests, "
        f"mean {served.get('mean_batch_queries')} queries, largest {served.get('largest_batch_queries')}"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "machine": info,
                    "rows": rows,
                    "bound_qps": bound_qps,
                    "bound_median_call_qps": bound_median_qps,
                    "pairs": pairs,
                    "top3_identical": same,
                    "top3_score_max_diff": score_diff,
                    "checks": [{"check": n, "pass": ok, "detail": d} for n, ok, d in checks],
                    "health": health,
                },
                indent=2,
            )
            + "\n"
        )
    return 1 if args.strict and not all(ok for _, ok, _ in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
