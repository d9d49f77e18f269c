"""``python -m retriever_server {build,serve,query}``.

::

    python -m retriever_server build --corpus wiki-18.jsonl --model intfloat/e5-base-v2 --out e5_index \\
        [--index-type Flat|HNSW64|IVF4096,PQ64] [--batch-size 256] [--chunk-size 4096] [--max-passages N] \\
        [--shards N]
    python -m retriever_server serve --index e5_index [--host 127.0.0.1 --port 8000 --topk 3]
    python -m retriever_server serve --index e5_index --ray --replicas 2 --gpus-per-replica 1
    python -m retriever_server serve --index e5_index_4shards --ray [--shards 4] --gpus-per-replica 1
    python -m retriever_server query --index e5_index "who wrote the salt clock" [--topk 3]
    python -m retriever_server query --url http://127.0.0.1:8000 "who wrote the salt clock"
    python -m retriever_server recall --index e5_index --queries dev.jsonl [--recall-k 3] [--search-params nprobe=64]

``build --recall-queries dev.jsonl`` reports the same recall@k (against exact search) right after a build.

Search-R1's flags are accepted as aliases, so its launch line works unchanged::

    python -m retriever_server serve --index_path e5_Flat.index --corpus_path wiki-18.jsonl --topk 3 \\
        --retriever_name e5 --retriever_model intfloat/e5-base-v2 --faiss_gpu

(with a faiss index *file* the corpus is converted once into ``<corpus_path>.store``). The server binds
``127.0.0.1`` unless ``--host`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from .cli_common import (
    OneLineParser,
    add_debug_flag,
    non_negative_float,
    positive_float,
    positive_int,
    run_main,
    tcp_port,
    thread_count,
)
from .encoders import PRESETS
from .search import BACKENDS

logger = logging.getLogger(__name__)


def _add_encoder_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("encoder (defaults come from the preset; see retriever_server.encoders)")
    g.add_argument(
        "--retriever-name",
        "--retriever_name",
        "--preset",
        dest="retriever_name",
        help=f"encoder preset: {', '.join(PRESETS)} (default: inferred from the model name, else 'mean')",
    )
    g.add_argument("--pooling", choices=["mean", "cls", "pooler"], help="override the preset's pooling")
    g.add_argument("--query-prefix", help="override the text prepended to queries")
    g.add_argument("--passage-prefix", help="override the text prepended to passages")
    g.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=None, help="L2-normalize")
    g.add_argument("--max-length", type=positive_int, help="tokens per text (default 256)")


def _add_runtime_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("runtime")
    g.add_argument("--device", help="encoder device: auto (default), cpu, cuda, cuda:N")
    g.add_argument("--fp16", action=argparse.BooleanOptionalAction, default=None, help="fp16 (default: on CUDA)")
    g.add_argument(
        "--bf16",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="encoder in bfloat16: about 2x on CPUs with AVX512-BF16 or AMX, embeddings change slightly (default: off, "
        "or the index's setting)",
    )
    g.add_argument("--num-threads", type=thread_count, help="torch CPU threads, at most the cores (default: all cores)")
    g.add_argument("--log-level", default="INFO", help="logging level (default INFO)")


def _add_load_options(p: argparse.ArgumentParser, *, required: bool) -> None:
    g = p.add_argument_group("index")
    g.add_argument(
        "--index",
        "--index_path",
        "--index-path",
        dest="index",
        required=required,
        help="index directory from `build`, or a faiss index file (Search-R1's e5_Flat.index) with --corpus_path",
    )
    g.add_argument("--corpus-path", "--corpus_path", dest="corpus_path", help="corpus .jsonl for a faiss index file")
    g.add_argument(
        "--retriever-model",
        "--retriever_model",
        "--model",
        dest="retriever_model",
        help="encoder for a faiss index file; with an index directory, overrides the stored model path",
    )
    g.add_argument("--backend", choices=BACKENDS, default="auto", help="search backend (default auto)")
    g.add_argument("--faiss-gpu", "--faiss_gpu", dest="faiss_gpu", action="store_true", help="= --backend faiss-gpu")
    g.add_argument("--search-params", help="faiss ParameterSpace string, e.g. nprobe=64 or efSearch=128")
    g.add_argument("--encoder-batch-size", type=positive_int, help="texts per encoder forward pass (default 128)")
    g.add_argument("--corpus-store", help="where to keep the converted corpus (default <corpus_path>.store)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (subcommands ``build``, ``serve``, ``query``, ``recall``)."""
    parser = OneLineParser(
        prog="python -m retriever_server",
        description="Dense retrieval server (E5/BGE + FAISS) with the Search-R1 /retrieve wire format.",
    )
    add_debug_flag(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    b = sub.add_parser("build", help="encode a corpus and build an index directory (resumable)")
    b.add_argument("--corpus", "--corpus_path", dest="corpus", required=True, help="Search-R1 corpus .jsonl")
    b.add_argument("--model", "--retriever_model", dest="model", required=True, help="HF encoder path or hub id")
    b.add_argument("--out", required=True, help="output index directory")
    b.add_argument(
        "--index-type", default="Flat", help="faiss factory string: Flat (default), HNSW64, IVF4096,PQ64 ..."
    )
    b.add_argument("--batch-size", type=positive_int, default=128, help="texts per encoder forward pass (default 128)")
    b.add_argument("--chunk-size", type=positive_int, default=4096, help="passages per resumable chunk (default 4096)")
    b.add_argument("--max-passages", type=positive_int, help="index only the first N passages")
    b.add_argument(
        "--train-size", type=positive_int, default=262144, help="rows sampled to train IVF/PQ (default 262144)"
    )
    b.add_argument(
        "--shards",
        type=positive_int,
        default=1,
        help="split the index into N faiss files over contiguous row ranges, for sharded serving (default 1)",
    )
    b.add_argument("--overwrite", action="store_true", help="discard an existing build in --out instead of resuming")
    b.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    g = b.add_argument_group("recall report (optional; see retriever_server.recall)")
    g.add_argument(
        "--recall-queries", help="held-out questions (.jsonl with a question field, or one per line): report recall"
    )
    _add_recall_options(g)
    _add_encoder_options(b)
    _add_runtime_options(b)
    b.set_defaults(func=_cmd_build)

    s = sub.add_parser("serve", help="serve an index over HTTP (uvicorn, or Ray Serve with --ray)")
    _add_load_options(s, required=True)
    s.add_argument("--retriever-name", "--retriever_name", dest="retriever_name", help="encoder preset (index file)")
    g = s.add_argument_group("http")
    g.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1; 0.0.0.0 = all)")
    g.add_argument("--port", type=tcp_port, default=8000, help="port (default 8000)")
    g.add_argument("--topk", type=positive_int, default=3, help="hits per query when a request sends none (default 3)")
    g.add_argument("--max-topk", type=positive_int, default=100, help="largest topk a request may ask (default 100)")
    g.add_argument("--max-queries", type=positive_int, default=8192, help="most queries per request (default 8192)")
    g.add_argument(
        "--max-query-chars", type=positive_int, default=4096, help="longest query in characters (default 4096)"
    )
    g.add_argument(
        "--max-body-bytes", type=positive_int, default=32 << 20, help="largest request body (default 32 MiB)"
    )
    g.add_argument(
        "--max-hits",
        type=positive_int,
        default=32768,
        help="most queries x topk per /retrieve request; more is answered 422 (default 32768: 2560 queries at topk "
        "12, about 25 MB of answer with wiki-18's passages)",
    )
    g.add_argument(
        "--max-request-tokens",
        type=positive_int,
        default=131072,
        help="most encoder tokens per request, each query counted up to the encoder's max length with its prefix and "
        "special tokens; more is answered 422 (default 131072: 8192 queries of 16 tokens)",
    )
    g.add_argument(
        "--max-batch-size",
        type=positive_int,
        default=128,
        help="most queries per micro-batch; larger requests are split and interleaved (default 128)",
    )
    g.add_argument(
        "--max-batch-tokens",
        type=positive_int,
        default=2048,
        help="most encoder tokens per micro-batch, so a request never waits behind more than one such batch "
        "(default 2048: 128 queries of 16 tokens, or 8 of 256)",
    )
    g.add_argument("--no-batching", dest="batching", action="store_false", help="run every request alone")
    g.add_argument(
        "--no-fast-post",
        dest="fast_post",
        action="store_false",
        help="answer POST /retrieve and /encode through the ASGI app instead of on the connection (about 1.5x the "
        "server CPU per request); the fast path also turns itself off, with a WARNING, on a uvicorn it was not "
        "tested with (default: on)",
    )
    g.add_argument("--access-log", action="store_true", help="uvicorn access log (off by default: it costs CPU)")
    g.add_argument(
        "--max-header-bytes", type=positive_int, default=16 << 10, help="largest request head (default 16 KiB)"
    )
    g.add_argument("--max-headers", type=positive_int, default=100, help="most request headers (default 100)")
    g.add_argument(
        "--header-timeout", type=positive_float, default=10.0, help="seconds to send a request head (default 10)"
    )
    g.add_argument("--body-timeout", type=positive_float, default=30.0, help="seconds between body reads (default 30)")
    g.add_argument(
        "--body-deadline",
        type=positive_float,
        default=60.0,
        help="seconds for a whole request body after its head, however paced; then the connection is closed "
        "(default 60: 32 MiB at 0.55 MB/s)",
    )
    g.add_argument(
        "--max-connections",
        type=positive_int,
        default=4096,
        help="most open connections; one more is answered 503 and closed, with a WARNING in the log; the open-file "
        "limit is raised to fit where the hard limit allows, else this is lowered to fit (default 4096)",
    )
    g.add_argument("--keep-alive-timeout", type=positive_float, default=5.0, help="idle kept-alive seconds (default 5)")
    g.add_argument("--docs", action="store_true", help="serve /docs, /redoc and /openapi.json (off by default)")
    g.add_argument("--health-paths", action="store_true", help="show index/model paths in /health (default: names)")
    r = s.add_argument_group("ray serve")
    r.add_argument("--ray", action="store_true", help="deploy with Ray Serve instead of a single uvicorn process")
    r.add_argument("--replicas", type=positive_int, default=1, help="Ray Serve replicas (default 1)")
    r.add_argument("--gpus-per-replica", type=non_negative_float, default=0.0, help="GPUs per replica (default 0)")
    r.add_argument("--cpus-per-replica", type=non_negative_float, default=1.0, help="CPUs per replica (default 1)")
    r.add_argument("--max-ongoing-requests", type=positive_int, default=256, help="per replica (default 256)")
    r.add_argument(
        "--shards",
        type=positive_int,
        help="sharded app: one search deployment per shard (default: the index folder's shard count)",
    )
    r.add_argument("--cpus-per-shard", type=non_negative_float, default=1.0, help="CPUs per shard replica (default 1)")
    r.add_argument("--gpus-per-shard", type=non_negative_float, default=0.0, help="GPUs per shard replica (default 0)")
    r.add_argument("--shard-replicas", type=positive_int, default=1, help="replicas per shard (default 1)")
    r.add_argument(
        "--shard-retry-s",
        type=non_negative_float,
        default=20.0,
        help="retry a restarting shard this long, then answer 503 (default 20)",
    )
    r.add_argument("--ray-address", help="existing Ray cluster address (default: RAY_ADDRESS or a local instance)")
    _add_runtime_options(s)
    s.set_defaults(func=_cmd_serve)

    q = sub.add_parser("query", help="print ranked titles and scores for questions")
    q.add_argument("questions", nargs="+", help="one or more questions")
    q.add_argument("--url", help="ask a running server (e.g. http://127.0.0.1:8000) instead of loading --index")
    q.add_argument("--topk", type=positive_int, default=3, help="hits per question (default 3)")
    q.add_argument("--json", action="store_true", help="print the raw /retrieve JSON")
    _add_load_options(q, required=False)
    q.add_argument("--retriever-name", "--retriever_name", dest="retriever_name", help="encoder preset (index file)")
    _add_runtime_options(q)
    q.set_defaults(func=_cmd_query)

    c = sub.add_parser("recall", help="recall@k of an index against exact search, with its size and q/s")
    c.add_argument("--index", required=True, help="index directory from `build` (needs its embeddings.npy)")
    c.add_argument(
        "--queries", dest="recall_queries", required=True, help="held-out questions (.jsonl or one per line)"
    )
    _add_recall_options(c)
    c.add_argument("--search-params", help="faiss ParameterSpace string to try, e.g. nprobe=64 or efSearch=128")
    c.add_argument("--device", help="encoder device: auto (default), cpu, cuda, cuda:N")
    c.add_argument("--num-threads", type=thread_count, help="torch CPU threads, at most the cores (default: all cores)")
    c.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")
    c.set_defaults(func=_cmd_recall)
    return parser


def _add_recall_options(g) -> None:
    g.add_argument("--recall-k", type=positive_int, default=3, help="hits compared per query (default 3)")
    g.add_argument(
        "--recall-sample", type=positive_int, default=1000, help="questions drawn at most (seeded, default 1000)"
    )


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _cmd_build(args: argparse.Namespace) -> int:
    from .build import BuildConfig, build_index
    from .encoders import EncoderConfig

    _setup_logging(args.log_level)
    encoder = EncoderConfig.from_preset(
        args.model,
        args.retriever_name,
        **_pick(args, "pooling", "query_prefix", "passage_prefix", "normalize", "max_length", "batch_size"),
        **_pick(args, "device", "fp16", "bf16", "num_threads"),
    )
    config = BuildConfig(
        corpus=args.corpus,
        out=args.out,
        encoder=encoder,
        **_pick(args, "index_type", "chunk_size", "max_passages", "train_size", "shards", "overwrite", "progress"),
    )
    # a bad questions file fails here, not after the build
    queries = _recall_queries(args) if args.recall_queries else None
    report = build_index(config).to_dict()
    if queries:
        report["recall"] = _recall(args.out, queries, args, search_params=None)
    print(json.dumps(report, indent=2))
    return 0


def _pick(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    """``{name: args.name}``: the options that a config field takes under the same name."""
    return {name: getattr(args, name) for name in names}


def _recall_queries(args: argparse.Namespace) -> list[str]:
    from .recall import read_queries

    return read_queries(args.recall_queries, args.recall_sample)


def _recall(index: str, queries: list[str], args: argparse.Namespace, *, search_params: str | None) -> dict[str, Any]:
    from .recall import recall_of_index_dir
    from .retriever import LoadOptions

    options = LoadOptions(device=args.device, num_threads=args.num_threads)
    return recall_of_index_dir(index, queries, args.recall_k, search_params=search_params, options=options).to_dict()


def _cmd_recall(args: argparse.Namespace) -> int:
    _setup_logging(args.log_level)
    recall = _recall(args.index, _recall_queries(args), args, search_params=args.search_params)
    print(json.dumps({"index": args.index, "recall": recall}, indent=2))
    return 0


def _load_args(args: argparse.Namespace):
    from .retriever import IndexSource, LoadOptions

    source = IndexSource(args.index, args.corpus_path, args.retriever_name, args.retriever_model)
    options = LoadOptions(
        backend="faiss-gpu" if args.faiss_gpu else args.backend,
        model=args.retriever_model,
        **_pick(args, "device", "fp16", "bf16", "encoder_batch_size", "num_threads", "search_params", "corpus_store"),
    )
    return source, options


def _cmd_serve(args: argparse.Namespace) -> int:
    from .threads import serving_process

    serving_process()  # before torch and faiss load (see retriever_server.threads); Ray replicas call it themselves
    from .app import ServerConfig

    _setup_logging(args.log_level)
    source, options = _load_args(args)
    server = ServerConfig(
        # the options named otherwise than their fields
        default_topk=args.topk,
        max_queries_per_request=args.max_queries,
        max_hits_per_request=args.max_hits,
        header_timeout_s=args.header_timeout,
        body_timeout_s=args.body_timeout,
        body_deadline_s=args.body_deadline,
        keep_alive_timeout_s=args.keep_alive_timeout,
        **_pick(args, "host", "port", "max_topk", "max_query_chars", "max_body_bytes", "max_request_tokens"),
        **_pick(args, "batching", "max_batch_size", "max_batch_tokens", "max_header_bytes", "max_headers"),
        **_pick(args, "max_connections", "docs", "health_paths", "fast_post"),
    )
    if args.ray:
        from .ray_app import RayServeConfig, ShardedConfig, serve_forever

        ray_config = RayServeConfig(
            **_pick(args, "replicas", "gpus_per_replica", "cpus_per_replica", "max_ongoing_requests")
        )
        sharded = ShardedConfig(
            **_pick(args, "shards", "cpus_per_shard", "gpus_per_shard", "shard_replicas", "shard_retry_s")
        )
        serve_forever(source, options, server, ray_config, ray_address=args.ray_address, sharded=sharded)
        return 0
    if args.shards is not None:
        print(
            "--shards places shard deployments on Ray Serve; add --ray (a sharded folder serves without it).",
            file=sys.stderr,
        )
        return 2
    from ._deps import require
    from .app import create_app
    from .http_guard import listening_socket, uvicorn_config
    from .retriever import check_source, load_source
    from .threads import load_for_serving

    uvicorn = require("uvicorn", "Serving over HTTP")
    check_source(source)  # a wrong --index, then a busy port, fail before minutes of loading
    with listening_socket(server.host, server.port) as sock:
        retriever = load_for_serving(load_source, source, options)
        app = create_app(retriever, server)
        config = uvicorn_config(app, server, log_level=args.log_level, access_log=args.access_log)
        logger.info("Serving %d passages on http://%s:%d", len(retriever.store), server.host, server.port)
        http_server = uvicorn.Server(config)
        http_server.run(sockets=[sock])
    return 0 if http_server.started else 1


def _cmd_query(args: argparse.Namespace) -> int:
    _setup_logging("WARNING" if args.log_level == "INFO" else args.log_level)
    if args.url:
        import httpx

        url = args.url.rstrip("/") + "/retrieve"
        try:
            response = httpx.post(
                url, json={"queries": args.questions, "topk": args.topk, "return_scores": True}, timeout=60.0
            )
        except (httpx.HTTPError, httpx.InvalidURL) as e:
            raise ConnectionError(
                f"cannot reach {url} ({type(e).__name__}: {e}); is the server running there? (--url)"
            ) from None
        if response.status_code != 200:
            print(f"error {response.status_code}: {' '.join(response.text.split())[:500]}", file=sys.stderr)
            return 1
        result = response.json()["result"]
    elif args.index:
        from .retriever import load_source

        source, options = _load_args(args)
        result = load_source(source, options).retrieve(args.questions, args.topk)
    else:
        print("query needs --index DIR (load the index here) or --url URL (ask a running server).", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"result": result}, ensure_ascii=False, indent=2))
        return 0
    for question, hits in zip(args.questions, result, strict=True):
        print(f"Q: {question}")
        for rank, hit in enumerate(hits, start=1):
            title, text = _title_text(hit["document"])
            print(f"  {rank}. {hit['score']:.4f}  {title or '(no title)'}  [id {hit['document'].get('id')}]")
            print(f"     {text[:120]}{'...' if len(text) > 120 else ''}")
    return 0


def _title_text(document: dict[str, Any]) -> tuple[str, str]:
    contents = str(document.get("contents", ""))
    first, _, rest = contents.partition("\n")
    if len(first) >= 2 and first.startswith('"') and first.endswith('"'):
        return first[1:-1], rest
    return str(document.get("title", "")), contents


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m retriever_server``; returns the exit code (errors: one line, see
    :mod:`retriever_server.cli_common`)."""
    return run_main(build_parser(), argv)
