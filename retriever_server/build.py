"""Index builder: corpus → passage store → embeddings (memory-mapped, resumable) → faiss index.

An index directory holds everything the server needs, so ``serve --index DIR`` takes no other flag::

    DIR/meta.json         written last: marks a complete build (encoder settings, sizes, index type)
    DIR/corpus/           the passage store (records.jsonl + offsets.i64, see corpus_store)
    DIR/embeddings.npy    float32 [n, dim] passage embeddings (a .npy file, np.load(mmap_mode="r") reads it)
    DIR/index.faiss       the faiss index (inner product)
    DIR/build_state.json  settings of the build, checked when resuming
    DIR/chunks.done       one JSON line per finished chunk: {"chunk": i, "rows": [start, stop], "run": id}

Decisions:

- Passages are encoded in chunks of ``chunk_size`` rows. Each chunk's rows are written through a memory map of just
  that chunk's region, flushed (``msync``), unmapped, and then the chunk is appended to ``chunks.done`` (fsync).
  A killed build therefore loses at most the chunk in progress; re-running the same command keeps every finished
  chunk and encodes only the rest. Resuming with different embedding settings is refused (pass ``overwrite``).
- Peak memory: encoding holds the model plus one chunk (after each chunk the chunk's corpus pages are dropped from
  the mapping and freed heap blocks are returned to the OS); the model is released before the index phase, which
  reads ``chunk_size`` rows at a time with plain reads (no mapping of the whole file), so the only large
  allocation is the index itself — for ``Flat`` exactly the embedding size, for IVF/PQ much less. Training
  (IVF/PQ) samples ``train_size`` rows. ``benchmarks/index_build_mem.py`` measures it.
  Search-R1's builder instead keeps every embedding in a Python list, concatenates, then copies into the index
  (about 3x the embedding size, the ">120 GB for Wikipedia").
- ``index_type`` is a faiss factory string (``Flat``, ``HNSW64``, ``IVF4096,PQ64``, ...), always with the inner
  product metric (E5/BGE embeddings are normalized, so IP is cosine).
"""

from __future__ import annotations

import json
import logging
import os
import resource
import signal
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .corpus_store import CorpusStore, convert_corpus
from .encoders import Encoder, EncoderConfig

logger = logging.getLogger(__name__)

META_FILE = "meta.json"
STATE_FILE = "build_state.json"
CHUNKS_FILE = "chunks.done"
EMBEDDINGS_FILE = "embeddings.npy"
INDEX_FILE = "index.faiss"
CORPUS_DIR = "corpus"
META_VERSION = 1

KILL_AFTER_CHUNKS_ENV = "RETRIEVER_SERVER_TEST_KILL_AFTER_CHUNKS"
"""Fault injection for tests: after this many chunks of the current run are done, write half of the next chunk
and SIGKILL the process (as an operator's kill or an OOM kill would), leaving a partial chunk on disk."""


@dataclass
class BuildConfig:
    """What to build. ``python -m retriever_server build`` maps its flags onto this."""

    corpus: str
    """Search-R1 JSON Lines corpus (``{"id", "contents"}`` per line)."""
    out: str
    """Output index directory (created)."""
    encoder: EncoderConfig
    """Encoder settings (model, pooling, prefixes, ...); stored in ``meta.json`` for the server."""
    index_type: str = "Flat"
    """faiss factory string: ``Flat`` (exact), ``HNSW64``, ``IVF4096,Flat``, ``IVF4096,PQ64``, ..."""
    chunk_size: int = 4096
    """Passages per resumable chunk (what a kill can lose at most)."""
    max_passages: int | None = None
    """Index only the first this many passages (``None``: all)."""
    train_size: int = 262144
    """Rows sampled to train IVF/PQ indexes (ignored for Flat/HNSW)."""
    overwrite: bool = False
    """Discard an existing (partial or complete) build in ``out`` instead of resuming it."""
    progress: bool = True
    """Show tqdm progress bars."""

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> BuildConfig:
        """Build from a plain / OmegaConf mapping whose ``encoder`` entry is an :class:`EncoderConfig` mapping."""
        data = dict(config)
        data["encoder"] = EncoderConfig.from_config(data["encoder"])
        return cls(**data)


@dataclass
class BuildReport:
    """What a build did (the CLI prints it as JSON).

    Attributes:
        out: The index directory.
        num_passages: Passages indexed.
        dim: Embedding width.
        index_type: The faiss factory string.
        chunks_total: Chunks of ``chunk_size`` passages.
        chunks_reused: Chunks finished by an earlier (interrupted) run and kept.
        chunks_encoded: Chunks encoded by this run.
        embedding_bytes: Size of the embeddings, ``num_passages * dim * 4``.
        seconds: Wall time of this run.
        peak_rss_bytes: Peak RSS of this process up to the end of each phase: ``load`` (corpus store + encoder),
            ``encode``, ``index``.
        already_complete: The directory already held this index; nothing was done.
    """

    out: str
    num_passages: int
    dim: int
    index_type: str
    chunks_total: int
    chunks_reused: int
    chunks_encoded: int
    embedding_bytes: int
    seconds: float
    peak_rss_bytes: dict[str, int] = field(default_factory=dict)
    already_complete: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def release_free_memory() -> None:
    """Return freed heap memory to the OS (glibc ``malloc_trim``; a no-op elsewhere).

    torch's CPU tensors come from glibc malloc, which keeps freed blocks of the encoder's temporaries in its arenas;
    trimming after each chunk and before the index phase keeps RSS at what is live.
    """
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far (Linux reports ``ru_maxrss`` in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def build_index(config: BuildConfig, encoder: Encoder | None = None) -> BuildReport:
    """Build (or resume, or confirm) an index directory.

    Args:
        config: What to build.
        encoder: A loaded encoder to reuse (tests); loaded from ``config.encoder`` when ``None``.

    Returns:
        A :class:`BuildReport`.

    Raises:
        ValueError: ``out`` holds a build with different settings and ``overwrite`` is false, or a bad
            ``index_type``; the message says how to fix it.
    """
    import numpy as np

    t0 = time.perf_counter()
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    if config.overwrite:
        for name in (META_FILE, STATE_FILE, CHUNKS_FILE, EMBEDDINGS_FILE, INDEX_FILE):
            (out / name).unlink(missing_ok=True)
    if (out / META_FILE).is_file():
        meta = json.loads((out / META_FILE).read_text())
        _check_same_settings(meta, config, out, complete=True)
    if (out / META_FILE).is_file() and meta["index_type"] != config.index_type:
        # Same embeddings, another index: keep every chunk and rebuild only the index.
        logger.info("Rebuilding the index of %s as %s from its embeddings", out, config.index_type)
        (out / META_FILE).unlink()
    elif (out / META_FILE).is_file():
        logger.info("%s already holds a complete index; nothing to do (pass overwrite to rebuild)", out)
        return BuildReport(
            str(out),
            meta["num_passages"],
            meta["dim"],
            meta["index_type"],
            0,
            0,
            0,
            meta["num_passages"] * meta["dim"] * 4,
            time.perf_counter() - t0,
            already_complete=True,
        )

    state_path = out / STATE_FILE
    if state_path.is_file():
        _check_same_settings(json.loads(state_path.read_text()), config, out, complete=False)
    if config.overwrite or not (out / CORPUS_DIR / "store.json").is_file():
        convert_corpus(config.corpus, out / CORPUS_DIR, max_passages=config.max_passages, progress=config.progress)
    store = CorpusStore.open(out / CORPUS_DIR)
    n = len(store)
    own_encoder = encoder is None
    encoder = encoder or Encoder.load(config.encoder)
    dim = encoder.dim
    state = {
        "meta_version": META_VERSION,
        "encoder": config.encoder.embedding_settings(),
        "num_passages": n,
        "dim": dim,
        "chunk_size": config.chunk_size,
        "index_type": config.index_type,
        "corpus": str(Path(config.corpus).resolve()),
        "max_passages": config.max_passages,
    }
    state_path.write_text(json.dumps(state, indent=2) + "\n")
    rss = {"load": peak_rss_bytes()}

    emb_path = out / EMBEDDINGS_FILE
    if not emb_path.is_file():
        np.lib.format.open_memmap(emb_path, mode="w+", dtype=np.float32, shape=(n, dim)).flush()
    header = _npy_header_size(emb_path, n, dim)
    chunks_total = -(-n // config.chunk_size)
    done = _read_done_chunks(out / CHUNKS_FILE)
    todo = [c for c in range(chunks_total) if c not in done]
    logger.info("Embedding %d passages: %d/%d chunks already done", n, chunks_total - len(todo), chunks_total)
    kill_after = int(os.environ.get(KILL_AFTER_CHUNKS_ENV, "0") or 0)
    run_id = uuid.uuid4().hex[:12]
    bar = None
    if config.progress:
        from tqdm.auto import tqdm

        done_rows = sum(min(config.chunk_size, n - c * config.chunk_size) for c in done if c < chunks_total)
        bar = tqdm(total=n, initial=done_rows, unit="passage", desc="encode")
    with open(out / CHUNKS_FILE, "a") as log:
        for encoded, chunk in enumerate(todo):
            start, stop = chunk * config.chunk_size, min((chunk + 1) * config.chunk_size, n)
            emb = encoder.encode(store.contents(start, stop), kind="passage")
            if kill_after and encoded >= kill_after:
                _write_rows(emb_path, header, dim, start, emb[: len(emb) // 2])
                logger.warning("%s=%d: killing the build mid-chunk %d", KILL_AFTER_CHUNKS_ENV, kill_after, chunk)
                os.kill(os.getpid(), signal.SIGKILL)
            _write_rows(emb_path, header, dim, start, emb)
            log.write(json.dumps({"chunk": chunk, "rows": [start, stop], "run": run_id}) + "\n")
            log.flush()
            os.fsync(log.fileno())
            del emb
            store.release(start, stop)
            release_free_memory()
            if bar is not None:
                bar.update(stop - start)
    if bar is not None:
        bar.close()
    rss["encode"] = peak_rss_bytes()
    if own_encoder:  # the model is not needed to build the index
        del encoder
    release_free_memory()

    _build_faiss_index(emb_path, header, n, dim, config, out / INDEX_FILE)
    rss["index"] = peak_rss_bytes()
    meta = {
        **state,
        "encoder": config.encoder.to_dict(),
        "metric": "inner_product",
        "files": {"corpus": CORPUS_DIR, "embeddings": EMBEDDINGS_FILE, "index": INDEX_FILE},
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    tmp = out / (META_FILE + ".tmp")
    tmp.write_text(json.dumps(meta, indent=2) + "\n")
    os.replace(tmp, out / META_FILE)
    report = BuildReport(
        str(out),
        n,
        dim,
        config.index_type,
        chunks_total,
        chunks_total - len(todo),
        len(todo),
        n * dim * 4,
        time.perf_counter() - t0,
        rss,
    )
    logger.info("Built %s: %s", out, report)
    return report


def _check_same_settings(saved: dict[str, Any], config: BuildConfig, out: Path, *, complete: bool) -> None:
    wanted = {"encoder": config.encoder.embedding_settings(), "max_passages": config.max_passages}
    if not complete:
        wanted["chunk_size"] = config.chunk_size
    saved_encoder = {k: saved.get("encoder", {}).get(k) for k in wanted["encoder"]}
    diffs = [
        f"{key}: saved {saved_encoder if key == 'encoder' else saved.get(key)!r}, requested {value!r}"
        for key, value in wanted.items()
        if (saved_encoder if key == "encoder" else saved.get(key)) != value
    ]
    if diffs:
        kind = "a complete index" if complete else "a partial build"
        raise ValueError(
            f"{out} holds {kind} made with different settings ({'; '.join(diffs)}). Re-run with the same settings "
            "to resume, choose another --out, or pass --overwrite to discard it."
        )


def _npy_header_size(path: Path, n: int, dim: int) -> int:
    import numpy as np

    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        if shape != (n, dim) or fortran or dtype != np.float32:
            raise ValueError(
                f"{path} has shape {shape} / dtype {dtype}, expected ({n}, {dim}) float32; the corpus or model "
                "changed since the build started. Pass --overwrite to start over."
            )
        return f.tell()


def _write_rows(path: Path, header: int, dim: int, start: int, rows) -> None:
    """Write ``rows`` at row ``start`` through a memory map of just that region, then flush and unmap it."""
    import numpy as np

    if len(rows) == 0:
        return
    view = np.memmap(path, dtype=np.float32, mode="r+", offset=header + start * dim * 4, shape=rows.shape)
    view[:] = rows
    view.flush()
    del view


def _read_rows(f, header: int, dim: int, start: int, stop: int):
    import numpy as np

    f.seek(header + start * dim * 4)
    return np.frombuffer(f.read((stop - start) * dim * 4), dtype=np.float32).reshape(stop - start, dim)


def _read_done_chunks(path: Path) -> set[int]:
    done: set[int] = set()
    if not path.is_file():
        return done
    for line in path.read_text().splitlines():
        try:
            done.add(int(json.loads(line)["chunk"]))
        except (ValueError, KeyError, TypeError):
            continue  # a torn last line from a kill: that chunk is redone
    return done


def _build_faiss_index(emb_path: Path, header: int, n: int, dim: int, config: BuildConfig, index_path: Path) -> None:
    import numpy as np

    from .search import import_faiss

    faiss = import_faiss("Building an index")
    try:
        index = faiss.index_factory(dim, config.index_type, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as e:
        raise ValueError(
            f"faiss cannot build index type {config.index_type!r} ({str(e).strip().splitlines()[-1]}). Use a faiss "
            "factory string such as 'Flat', 'HNSW64', 'IVF4096,Flat' or 'IVF4096,PQ64' (--index-type)."
        ) from None
    with open(emb_path, "rb") as f:
        if not index.is_trained:
            take = min(config.train_size, n)
            rng = np.random.default_rng(0)
            rows = np.sort(rng.choice(n, size=take, replace=False))
            sample = np.empty((take, dim), dtype=np.float32)
            for j, r in enumerate(rows):
                sample[j] = _read_rows(f, header, dim, int(r), int(r) + 1)[0]
            logger.info("Training %s on %d sampled rows", config.index_type, take)
            index.train(sample)
            del sample
        step = max(config.chunk_size, 1)
        for start in range(0, n, step):
            index.add(_read_rows(f, header, dim, start, min(start + step, n)))
    tmp = index_path.with_suffix(".tmp")
    faiss.write_index(index, str(tmp))
    os.replace(tmp, index_path)
    logger.info("Wrote %s (%s, %d vectors)", index_path, config.index_type, index.ntotal)
