"""Judge client throughput: one batched ``judge_many`` vs the HiPRAG authors' per-sample sequential judge loop.

Workload (issue 6): 512 trajectories x 3 steps = 1536 step judgements (HiPRAG under-search prompts, all distinct)
against a judge server with a fixed 100 ms latency. Scenarios, all in one run against the same server:

- ``ours, judge_many, cold cache``: ``JudgeClient.judge_many`` over all 1536 requests at ``max_concurrency=128``,
  empty memory + disk cache. Ideal: ``ceil(1536 / 128) * 100 ms = 1.2 s``.
- ``authors' pattern, JudgeClient, no cache``: 128 samples at a time (``asyncio.gather`` per chunk of 128, a
  barrier between chunks); inside a sample the steps are awaited one after another. Same client and transport
  as the row above, cache off: isolates the scheduling.
- ``authors' pattern, plain openai client``: the same loop through ``openai.AsyncOpenAI().chat.completions
  .create`` with its default transport, no retries, no cache: the authors' client.
- ``ours, warm memory cache`` / ``warm disk cache, new client``: the last cold run's requests again.
- ``1-5 steps``: 1-5 steps per trajectory (mean 3, same 1536 total), as HiPRAG trajectories vary: the per-chunk
  barrier of the authors' pattern waits for the longest sample of each chunk.

``JudgeClient`` has one transport (aiohttp through ``agentrag_verl.http``); until 0.1.0 it also offered the openai
client's request layer, which cost ~1 ms of client CPU per call and took 1.7-1.8x the ideal time here.

The judge server runs in a child process so its CPU does not compete with the client's event loop for the GIL.
``--server lean`` (default) is a minimal asyncio HTTP/1.1 server defined here; ``--server fake`` is the test
fixture ``FakeOpenAIServer`` (a thread per connection), which itself costs enough CPU per request to slow the
run on a small host.

Usage::

    python benchmarks/judge_bench.py                      # defaults of the issue
    python benchmarks/judge_bench.py --repeats 5 --server fake
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing as mp
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

REPLY = "<answer>True</answer>"
MODEL = "bench-judge"


# ------------------------------------------------------------------------------------------------ judge servers


async def _serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, latency_s: float) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            path = lines[0].split(" ")[1]
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if length:
                await reader.readexactly(length)
            if path.startswith("/v1/models"):
                payload: dict[str, Any] = {"object": "list", "data": [{"id": MODEL, "object": "model"}]}
            else:
                await asyncio.sleep(latency_s)
                payload = {
                    "id": "chatcmpl-bench",
                    "object": "chat.completion",
                    "created": 0,
                    "model": MODEL,
                    "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": REPLY}, "finish_reason": "stop"}
                    ],
                    "usage": {"prompt_tokens": 200, "completion_tokens": 3, "total_tokens": 203},
                }
            body = json.dumps(payload).encode()
            header = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            writer.write(header.encode() + body)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def _run_lean_server(queue: Any, latency_s: float) -> None:
    async def main() -> None:
        server = await asyncio.start_server(
            lambda r, w: _serve_connection(r, w, latency_s), "127.0.0.1", 0, backlog=4096
        )
        queue.put(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1")
        await server.serve_forever()

    asyncio.run(main())


def _run_fake_server(queue: Any, latency_s: float) -> None:
    import threading

    from agentrag_verl.testing.openai_server import FakeOpenAIServer

    def reply(_body: dict[str, Any]) -> str:
        time.sleep(latency_s)
        return REPLY

    server = FakeOpenAIServer(replies=reply, models=[MODEL]).start()
    queue.put(server.base_url)
    threading.Event().wait()


def start_server(kind: str, latency_s: float) -> tuple[mp.process.BaseProcess, str]:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    target = _run_lean_server if kind == "lean" else _run_fake_server
    process = ctx.Process(target=target, args=(queue, latency_s), daemon=True)
    process.start()
    return process, queue.get(timeout=60)


# ------------------------------------------------------------------------------------------------ workload


def step_counts(trajectories: int, mean_steps: int, variable: bool, seed: int = 0) -> list[int]:
    """Steps per trajectory: all ``mean_steps``, or uniform on 1..2*mean_steps-1 adjusted to the same total."""
    if not variable:
        return [mean_steps] * trajectories
    rng = random.Random(seed)
    high = 2 * mean_steps - 1
    counts = [rng.randint(1, high) for _ in range(trajectories)]
    target = trajectories * mean_steps
    while sum(counts) != target:
        i = rng.randrange(trajectories)
        if sum(counts) < target and counts[i] < high:
            counts[i] += 1
        elif sum(counts) > target and counts[i] > 1:
            counts[i] -= 1
    return counts


def build_requests(counts: list[int], tag: str) -> list[list[Any]]:
    from agentrag_verl.methods.hiprag.judge import under_search_request

    return [
        [
            under_search_request(
                f"[{tag}] Trajectory {t}, step {s}: the film was released in {1950 + s} by its director.",
                f"So the director of film {t} was active in {1950 + s}.",
            )
            for s in range(n)
        ]
        for t, n in enumerate(counts)
    ]


# ------------------------------------------------------------------------------------------------ patterns


async def ours(client: Any, samples: list[list[Any]]) -> list[Any]:
    """Every step of every trajectory in one batch."""
    return await client.judge_many([r for sample in samples for r in sample])


async def authors_pattern(judge_one: Callable[[Any], Awaitable[Any]], samples: list[list[Any]], chunk: int) -> None:
    """``chunk`` samples at a time; inside a sample, steps awaited one after another."""

    async def sample(requests: list[Any]) -> list[Any]:
        return [await judge_one(r) for r in requests]

    for start in range(0, len(samples), chunk):
        await asyncio.gather(*(sample(s) for s in samples[start : start + chunk]))


async def timed(make: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    """(wall seconds, client-process CPU seconds) of one awaited run."""
    cpu, wall = time.process_time(), time.perf_counter()
    await make()
    return time.perf_counter() - wall, time.process_time() - cpu


# ------------------------------------------------------------------------------------------------ main


async def run(args: argparse.Namespace, base_url: str) -> list[dict[str, Any]]:
    import openai

    from agentrag_verl.judges import JudgeClient

    n_total = args.trajectories * args.steps
    ideal = math.ceil(n_total / args.concurrency) * args.latency_ms / 1000
    rows: list[dict[str, Any]] = []

    def options(**overrides: Any) -> dict[str, Any]:
        return {
            "base_url": base_url,
            "model": MODEL,
            "api_key_env": None,
            "max_concurrency": args.concurrency,
            "timeout_s": 30.0,
            **overrides,
        }

    def row(name: str, walls: list[float], cpus: list[float], calls: float) -> dict[str, Any]:
        wall = statistics.median(walls)
        entry = {"scenario": name, "wall_s": wall, "x_ideal": wall / ideal, "speedup": None, "calls": calls}
        entry["cpu_s"] = statistics.median(cpus)
        rows.append(entry)
        return entry

    async def measure_ours(counts: list[int], tag: str) -> tuple[dict[str, Any], str]:
        walls, cpus, calls, cache_dir = [], [], 0.0, ""
        for repeat in range(args.repeats):
            cache_dir = tempfile.mkdtemp(prefix="judge_bench_")
            samples = build_requests(counts, f"{tag}-{repeat}")
            async with JudgeClient.from_config(options(cache_dir=cache_dir)) as client:
                wall, cpu = await timed(lambda c=client, s=samples: ours(c, s))
                walls.append(wall)
                cpus.append(cpu)
                calls = client.metrics()["judge/calls"]
        return row(f"{tag}: ours, judge_many, cold cache", walls, cpus, calls), cache_dir

    async def measure_authors(counts: list[int], tag: str) -> dict[str, Any]:
        walls, cpus, calls = [], [], 0.0
        for repeat in range(args.repeats):
            samples = build_requests(counts, f"{tag}-authors-{repeat}")
            async with JudgeClient.from_config(options(cache=False)) as client:
                wall, cpu = await timed(lambda c=client, s=samples: authors_pattern(c.judge, s, args.concurrency))
                walls.append(wall)
                cpus.append(cpu)
                calls = client.metrics()["judge/calls"]
        return row(f"{tag}: authors' pattern, JudgeClient, no cache", walls, cpus, calls)

    for variable in (False, True):
        counts = step_counts(args.trajectories, args.steps, variable)
        tag = f"{'1-5' if variable else str(args.steps)} steps"
        # warm-up (connections, imports) on requests outside the measured set
        async with JudgeClient.from_config(options(cache=False)) as client:
            await ours(client, build_requests(counts[: args.concurrency], f"warmup-{tag}"))
        ours_row, cache_dir = await measure_ours(counts, tag)
        authors_row = await measure_authors(counts, tag)
        ours_row["speedup"] = authors_row["wall_s"] / ours_row["wall_s"]
        if not variable:
            # warm cache: the last cold run's requests again, from memory, then from disk with a new client
            samples = build_requests(counts, f"{tag}-{args.repeats - 1}")
            async with JudgeClient.from_config(options(cache_dir=cache_dir)) as client:
                await ours(client, samples)  # loads the memory cache from disk
                wall, cpu = await timed(lambda c=client, s=samples: ours(c, s))
                warm = row(f"{tag}: ours, warm memory cache", [wall], [cpu], client.metrics()["judge/calls"])
                warm["speedup"] = authors_row["wall_s"] / wall
            async with JudgeClient.from_config(options(cache_dir=cache_dir)) as client:
                wall, cpu = await timed(lambda c=client, s=samples: ours(c, s))
                warm = row(f"{tag}: ours, warm disk cache, new client", [wall], [cpu], client.metrics()["judge/calls"])
                warm["speedup"] = authors_row["wall_s"] / wall

        if not variable:  # the authors' own client: chat.completions.create, default transport
            walls, cpus = [], []
            for repeat in range(args.repeats):
                samples = build_requests(counts, f"openai-{repeat}")
                plain = openai.AsyncOpenAI(base_url=base_url, api_key="EMPTY", max_retries=0, timeout=30.0)

                async def judge_one(request: Any, client: Any = plain) -> Any:
                    out = await client.chat.completions.create(model=MODEL, messages=request.messages, temperature=0.0)
                    return request.parser(out.choices[0].message.content)

                wall, cpu = await timed(lambda s=samples, j=judge_one: authors_pattern(j, s, args.concurrency))
                await plain.close()
                walls.append(wall)
                cpus.append(cpu)
            plain_row = row(f"{args.steps} steps: authors' pattern, plain openai client", walls, cpus, float(n_total))
            for entry in rows:
                if entry["scenario"].endswith("ours, judge_many, cold cache"):
                    entry["vs_plain"] = plain_row["wall_s"] / entry["wall_s"]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trajectories", type=int, default=512)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per scenario (the median is reported)")
    parser.add_argument("--server", choices=["lean", "fake"], default="lean")
    args = parser.parse_args()

    import openai

    process, base_url = start_server(args.server, args.latency_ms / 1000)
    try:
        rows = asyncio.run(run(args, base_url))
    finally:
        process.terminate()
        process.join(5)

    n_total = args.trajectories * args.steps
    ideal = math.ceil(n_total / args.concurrency) * args.latency_ms / 1000
    print(
        f"\njudge_bench: {args.trajectories} trajectories x {args.steps} steps = {n_total} requests, "
        f"{args.latency_ms:.0f} ms server latency ({args.server} server), concurrency {args.concurrency}"
    )
    print(
        f"host: {os.cpu_count()} CPUs, Python {platform.python_version()}, openai {openai.__version__}; "
        f"ideal ceil({n_total}/{args.concurrency}) x {args.latency_ms:.0f} ms = {ideal:.2f} s; "
        f"median of {args.repeats} runs\n"
    )
    header = (
        f"{'scenario':<62} {'wall s':>7} {'x ideal':>8} {'vs authors':>10} {'vs plain':>9} {'calls':>6} {'CPU s':>6}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        speedup = f"{r['speedup']:.2f}x" if r["speedup"] else ""
        vs_plain = f"{r['vs_plain']:.2f}x" if r.get("vs_plain") else ""
        print(
            f"{r['scenario']:<62} {r['wall_s']:>7.3f} {r['x_ideal']:>8.2f} {speedup:>10} {vs_plain:>9} "
            f"{r['calls']:>6.0f} {r['cpu_s']:>6.2f}"
        )
    print(
        "\nvs authors = wall time of the authors' pattern (same client, same step counts) / this row's;"
        "\nvs plain = wall time of the authors' pattern with a plain openai client / this row's; CPU s = client"
        " process CPU time.\nThe variable-steps rows have the same total (and ideal) as the fixed ones."
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
