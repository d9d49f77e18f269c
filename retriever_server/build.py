"""Index builder: corpus → passage store → embeddings (memory-mapped, resumable) → faiss index.

An index directory holds everything the server needs, so ``serve --index DIR`` takes no other flag::

    DIR/meta.json         written last: marks a complete build (fingerprint, encoder settings, index type, and
                          the size of every part, which ``serve`` checks)
    DIR/corpus/           the passage store (records.jsonl + offsets.i64, see corpus_store)
    DIR/embeddings.npy    float32 [n, dim] passage embeddings (a .npy file, np.load(mmap_mode="r") reads it)
    DIR/index.faiss       the faiss index (inner product); with ``shards`` > 1 instead:
    DIR/shards/shard-000-of-004.faiss ...  one faiss index per contiguous row range (``meta.json`` records
                          each file's rows ``[start, stop)``, so a hit's global row is ``start`` + its local row)
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
- Every build records a fingerprint: the corpus (path, size, SHA-256 of its bytes), the model (path, size, SHA-256
  over its files; a hub id as given) and ``max_passages``. Building into a folder that holds a build (complete or
  partial) with another fingerprint or other embedding settings is refused unless ``overwrite``, which deletes
  exactly what a build writes. Contents, not names, identify a corpus or model: a renamed copy is the same one, and
  an unchanged path + size + mtime reuses the recorded hash instead of re-reading the file.
- ``serve`` (:func:`check_index_dir`) refuses a folder whose parts disagree: the passage store's source hash and
  passage count must be the ones ``meta.json`` recorded, and each file's size the one the build wrote (a swapped
  store, a truncated ``index.faiss``). A folder without ``meta.json`` is refused too, and ``meta.json`` is removed
  before a build changes anything a complete index depends on, so a failed build never leaves a folder ``serve``
  takes for a good index. A faiss type the corpus cannot train (IVF4096 on 5 passages) and a folder that is no
  model are refused before the corpus is encoded.
- ``index_type`` is a faiss factory string (``Flat``, ``HNSW64``, ``IVF4096,PQ64``, ...), always with the inner
  product metric (E5/BGE embeddings are normalized, so IP is cosine).
- ``shards`` = N splits the rows into N contiguous ranges of nearly equal size (shard i holds rows
  ``[i*n//N, (i+1)*n//N)``), each its own faiss index of ``index_type``, for serving an index larger than one
  process's memory (:mod:`retriever_server.sharded`). Only the index is split: ``embeddings.npy`` and the passage
  store stay whole (the store is read by offset, so it costs page cache, not resident memory, and only the
  ingress that renders hits reads it). A trained type (IVF, PQ) is trained once on a sample of all rows and
  that trained, empty index is copied for every shard, so all shards share one quantizer and their scores are
  comparable. Changing ``shards`` on a complete build rebuilds only the index from ``embeddings.npy`` (as does a
  change of ``index_type``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import resource
import shutil
import signal
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ._deps import require
from .corpus_store import META_FILE as STORE_META
from .corpus_store import RECORDS_FILE, CorpusStore, convert_corpus
from .encoders import Encoder, EncoderConfig, check_model_path
from .search import faiss_reason, import_faiss

logger = logging.getLogger(__name__)

META_FILE = "meta.json"
STATE_FILE = "build_state.json"
CHUNKS_FILE = "chunks.done"
EMBEDDINGS_FILE = "embeddings.npy"
INDEX_FILE = "index.faiss"
SHARDS_DIR = "shards"
CORPUS_DIR = "corpus"
META_VERSION = 2

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
    shards: int = 1
    """Split the index into this many faiss files over contiguous row ranges (1: one ``index.faiss``)."""
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
        ValueError: Bad settings (counts, paths, a faiss factory string the corpus cannot train), or ``out`` holds a
            build of another corpus / model / settings and ``overwrite`` is false; the message says how to fix it.
        FileNotFoundError, IsADirectoryError, NotADirectoryError: A missing path or a file / folder mix-up.
    """
    import numpy as np

    t0 = time.perf_counter()
    out = Path(config.out)
    _check_inputs(config, out)
    dim = encoder.dim if encoder is not None else model_dim(config.encoder.model)
    check_index_type(config.index_type, dim)
    if config.overwrite:
        remove_build(out)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    meta_path, state_path = out / META_FILE, out / STATE_FILE
    meta = _read_json(meta_path) if meta_path.is_file() else None
    state = _read_json(state_path) if state_path.is_file() else None
    # what this build would record; content hashes are reused from the folder's record while files are unchanged
    wanted = _wanted(config, (meta or state or {}).get("fingerprint"))

    if meta is not None:
        _check_same_build(meta, wanted, config, out, complete=True)
        if meta["index_type"] == config.index_type and meta.get("shards", 1) == config.shards:
            logger.info("%s already holds this index; nothing to do (pass overwrite to rebuild)", out)
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
        # Same embeddings, another index: check the new type can be trained before the complete index is touched.
        check_trainable(config.index_type, meta["dim"], min(config.train_size, meta["num_passages"]))
        check_shard_count(config.shards, meta["num_passages"])
        logger.info(
            "Rebuilding the index of %s as %s in %d shard(s) from its embeddings", out, config.index_type, config.shards
        )
        meta_path.unlink()  # from here until the new meta.json, serve refuses the folder

    if state is not None:
        _check_same_build(state, wanted, config, out, complete=False)
    store_meta = _read_json(out / CORPUS_DIR / STORE_META) if (out / CORPUS_DIR / STORE_META).is_file() else {}
    if (
        not wanted["corpus"].get("sha256")
        or store_meta.get("source_sha256") != wanted["corpus"]["sha256"]
        or store_meta.get("max_passages") != config.max_passages
    ):
        # no store yet, or one left by an attempt that failed before its first chunk: (re)convert
        try:
            convert_corpus(config.corpus, out / CORPUS_DIR, max_passages=config.max_passages, progress=config.progress)
        except BaseException:
            if created and not any(out.iterdir()):  # a refused corpus leaves no folder behind either
                out.rmdir()
            raise
        store_meta = _read_json(out / CORPUS_DIR / STORE_META)
        wanted["corpus"] = _corpus_identity(config.corpus, store_meta)
    store = CorpusStore.open(out / CORPUS_DIR)
    n = len(store)
    check_trainable(config.index_type, dim, min(config.train_size, n))
    check_shard_count(config.shards, n)
    own_encoder = encoder is None
    encoder = encoder or Encoder.load(config.encoder)
    dim = encoder.dim
    state = {
        "meta_version": META_VERSION,
        "fingerprint": wanted,
        "encoder": config.encoder.embedding_settings(),
        "num_passages": n,
        "dim": dim,
        "chunk_size": config.chunk_size,
        "index_type": config.index_type,
        "shards": config.shards,
        "corpus": wanted["corpus"]["path"],
        "max_passages": config.max_passages,
    }
    _write_json(state_path, state)
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

    shard_files = write_index_files(
        emb_path,
        out,
        n=n,
        dim=dim,
        index_type=config.index_type,
        shards=config.shards,
        train_size=config.train_size,
        chunk_size=config.chunk_size,
        header=header,
    )
    rss["index"] = peak_rss_bytes()
    meta = {
        **state,
        "build_id": run_id,
        "encoder": config.encoder.to_dict(),
        "metric": "inner_product",
        "files": _part_sizes(out, shard_files),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    _write_json(meta_path, meta)
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


# ---- inputs ----------------------------------------------------------------------------------------------------------

BUILD_ENTRIES = (META_FILE, STATE_FILE, CHUNKS_FILE, EMBEDDINGS_FILE, INDEX_FILE, SHARDS_DIR, CORPUS_DIR)
"""What a build writes into its directory (``remove_build`` deletes exactly these, plus their ``.tmp`` files)."""


def _check_inputs(config: BuildConfig, out: Path) -> None:
    """Refuse bad settings before anything is read, loaded or written."""
    counts = {
        "chunk_size": (config.chunk_size, "--chunk-size"),
        "train_size": (config.train_size, "--train-size"),
        "max_passages": (config.max_passages, "--max-passages"),
        "shards": (config.shards, "--shards"),
    }
    for name, (value, flag) in counts.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} is {value!r}; it must be a whole number of at least 1 ({flag}).")
    corpus = Path(config.corpus)
    if corpus.is_dir():
        raise IsADirectoryError(f"--corpus {corpus} is a folder; pass the Search-R1 JSON Lines corpus file.")
    if not corpus.is_file():
        raise FileNotFoundError(f"--corpus {corpus} does not exist; pass a Search-R1 JSON Lines corpus file.")
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(
            f"--out {out} is a file; an index is a folder. Choose a new folder name (it is created)."
        )
    if out.is_dir():
        foreign = sorted(p.name for p in out.iterdir() if p.name.removesuffix(".tmp") not in BUILD_ENTRIES)
        if foreign:
            raise ValueError(
                f"--out {out} holds files that are not an index build ({', '.join(foreign[:5])}"
                f"{', ...' if len(foreign) > 5 else ''}); choose an empty or new folder, so nothing of yours is "
                "mixed into (or deleted with) the index."
            )
    check_model_path(config.encoder.model)


def remove_build(out: Path) -> None:
    """Delete what a build wrote in ``out`` (and nothing else)."""
    for name in BUILD_ENTRIES:
        for path in (out / name, out / f"{name}.tmp"):
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()


def model_dim(model: str) -> int:
    """The embedding width of ``model`` from its config alone (no weights are loaded)."""
    transformers = require("transformers", "Reading a model's config")
    try:
        config = transformers.AutoConfig.from_pretrained(model)
    except (OSError, ValueError) as e:
        raise ValueError(
            f"--model {model} cannot be loaded as a Hugging Face model ({str(e).strip().splitlines()[0]}); pass a "
            "model folder with config.json and weights, or a hub id available offline."
        ) from None
    dim = getattr(config, "hidden_size", None)
    if not isinstance(dim, int):
        raise ValueError(f"--model {model}: its config has no hidden_size, so it is not a text encoder.")
    return dim


# ---- fingerprints ----------------------------------------------------------------------------------------------------


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def corpus_fingerprint(path: str | os.PathLike[str], known: dict[str, Any] | None = None) -> dict[str, Any]:
    """``{"path", "size", "mtime_ns", "sha256"}`` of a corpus file.

    The content hash is what identifies the corpus; it is reused from ``known`` (a fingerprint recorded earlier)
    when path, size and modification time are unchanged, so re-running a build does not re-read the corpus.
    """
    src = Path(path).resolve()
    stat = src.stat()
    here = {"path": str(src), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    if known and all(known.get(k) == v for k, v in here.items()) and known.get("sha256"):
        return {**here, "sha256": known["sha256"]}
    return {**here, "sha256": file_sha256(src)}


def _corpus_identity(path: str | os.PathLike[str], store_meta: dict[str, Any]) -> dict[str, Any]:
    """The fingerprint of the corpus a store was just converted from (its hash was computed on the way)."""
    src = Path(path).resolve()
    stat = src.stat()
    return {"path": str(src), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": store_meta["source_sha256"]}


def model_fingerprint(model: str, known: dict[str, Any] | None = None) -> dict[str, Any]:
    """``{"path", "size", "sha256"}`` over the files of a local model folder, or ``{"id"}`` for a hub id.

    Reused from ``known`` while the folder's total size and newest modification time are unchanged.
    """
    root = Path(model)
    if not root.is_dir():
        return {"id": model}
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.relative_to(root).parts[0].startswith("."))
    stats = [p.stat() for p in files]
    here = {
        "path": str(root.resolve()),
        "size": sum(st.st_size for st in stats),
        "mtime_ns": max((st.st_mtime_ns for st in stats), default=0),
    }
    if known and all(known.get(k) == v for k, v in here.items()) and known.get("sha256"):
        return {**here, "sha256": known["sha256"]}
    digest = hashlib.sha256()
    for p in files:
        digest.update(str(p.relative_to(root)).encode() + b"\0")
        digest.update(file_sha256(p).encode())
    return {**here, "sha256": digest.hexdigest()}


def _wanted(config: BuildConfig, known: dict[str, Any] | None) -> dict[str, Any]:
    """The fingerprint the requested build would have (content hashes reused from ``known`` where unchanged)."""
    known = known or {}
    corpus = {"path": str(Path(config.corpus).resolve())}
    if known.get("corpus"):
        corpus = corpus_fingerprint(config.corpus, known["corpus"])
    return {
        "corpus": corpus,
        "model": model_fingerprint(config.encoder.model, known.get("model")),
        "max_passages": config.max_passages,
    }


def _same_thing(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two corpus / model fingerprints name the same content (a moved or renamed copy is the same)."""
    if "sha256" in a or "sha256" in b:
        return a.get("sha256") == b.get("sha256")
    return a == b


def _check_same_build(saved: dict[str, Any], wanted: dict[str, Any], config: BuildConfig, out: Path, *, complete: bool):
    """Refuse to resume or reuse ``out`` unless it holds a build of the same corpus, model and embedding settings."""
    kind = "a complete index" if complete else "a partial build"
    fix = "choose another --out, or pass --overwrite to delete it and build anew."
    recorded = saved.get("fingerprint")
    if recorded is None:
        raise ValueError(
            f"{out} holds {kind} made before builds recorded their corpus and model, so whether it matches cannot be "
            f"checked; {fix}"
        )
    diffs = []
    if not _same_thing(recorded["corpus"], wanted["corpus"]):
        diffs.append(
            f"corpus {recorded['corpus'].get('path')} (sha256 {recorded['corpus'].get('sha256', '?')[:12]}) "
            f"vs requested {wanted['corpus']['path']} (sha256 {wanted['corpus'].get('sha256', '?')[:12]})"
        )
    if not _same_thing(recorded["model"], wanted["model"]):
        diffs.append(
            f"model {recorded['model'].get('path', recorded['model'].get('id'))} vs requested {config.encoder.model}"
        )
    if recorded.get("max_passages") != config.max_passages:
        diffs.append(f"max_passages {recorded.get('max_passages')} vs requested {config.max_passages}")
    settings = {k: v for k, v in config.encoder.embedding_settings().items() if k != "model"}
    saved_settings = {k: saved.get("encoder", {}).get(k) for k in settings}
    if saved_settings != settings:
        diffs.append(f"encoder settings {saved_settings} vs requested {settings}")
    if not complete and saved.get("chunk_size") != config.chunk_size:
        diffs.append(f"chunk_size {saved.get('chunk_size')} vs requested {config.chunk_size}")
    if diffs:
        raise ValueError(
            f"{out} holds {kind} of another build ({'; '.join(diffs)}). Re-run with the same settings to "
            f"{'reuse' if complete else 'resume'} it, or {fix}"
        )


# ---- consistency of a finished index ---------------------------------------------------------------------------------


def _part_sizes(out: Path, shard_files: list[dict[str, Any]]) -> dict[str, Any]:
    """What ``meta.json`` records of each part, so that ``serve`` can tell parts of different builds apart."""
    store = _read_json(out / CORPUS_DIR / STORE_META)
    parts: dict[str, Any] = {
        "corpus": {
            "dir": CORPUS_DIR,
            "num_passages": store["num_passages"],
            "source_sha256": store["source_sha256"],
            "records_bytes": (out / CORPUS_DIR / RECORDS_FILE).stat().st_size,
        },
    }
    if len(shard_files) == 1:
        parts["index"] = {"name": INDEX_FILE, "bytes": shard_files[0]["bytes"]}
    else:
        parts["shards"] = shard_files
    if (out / EMBEDDINGS_FILE).is_file():
        parts["embeddings"] = {"name": EMBEDDINGS_FILE, "bytes": (out / EMBEDDINGS_FILE).stat().st_size}
    return parts


def check_index_dir(index_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Read ``meta.json`` and check that the folder's parts are the ones that build wrote; return the meta.

    Raises:
        FileNotFoundError: No complete build (no ``meta.json``).
        ValueError: A damaged ``meta.json``, or parts that disagree with it (another build's corpus store, a
            truncated or replaced ``index.faiss`` / ``embeddings.npy``); the message names the part.
    """
    root = Path(index_dir)
    meta_path = root / META_FILE
    if not meta_path.is_file():
        entries = [p.name for p in root.iterdir()] if root.is_dir() else []
        if any(name.removesuffix(".tmp") in BUILD_ENTRIES for name in entries):
            hint = " (a build was started there: re-run the same build command to finish it)"
        elif root.is_dir():
            hint = " (the folder is empty)" if not entries else " (nothing in it comes from a build)"
        else:
            hint = ""
        raise FileNotFoundError(
            f"{root} holds no complete index (no {META_FILE}){hint}. Build one with `python -m retriever_server "
            "build --corpus C.jsonl --model M --out DIR`, or pass a faiss index file with --corpus_path."
        )
    meta = _read_json(meta_path)
    rebuild = f"Rebuild it: python -m retriever_server build ... --out {root} --overwrite."
    files = meta.get("files", {})
    if not isinstance(files.get("index"), dict) and not isinstance(files.get("shards"), list):
        logger.warning(
            "%s was built before indexes recorded their parts; its corpus, embeddings and index cannot be checked "
            "against each other. Rebuild it with --overwrite to record them.",
            root,
        )
        return meta
    store_path = root / CORPUS_DIR / STORE_META
    store = _read_json(store_path) if store_path.is_file() else {}
    corpus = files["corpus"]
    if store.get("source_sha256") != corpus["source_sha256"] or store.get("num_passages") != corpus["num_passages"]:
        raise ValueError(
            f"{root}: the passage store ({CORPUS_DIR}/) is not the one this index was built with (store: "
            f"{store.get('num_passages')} passages of sha256 {str(store.get('source_sha256'))[:12]}; index: "
            f"{corpus['num_passages']} of sha256 {corpus['source_sha256'][:12]}), so hits would return the wrong "
            f"text. {rebuild}"
        )
    checks = [(CORPUS_DIR + "/" + RECORDS_FILE, corpus["records_bytes"])]
    checks += [(part["name"], part["bytes"]) for key, part in files.items() if key in ("index", "embeddings")]
    if "shards" in files:
        _check_shard_records(root, meta, rebuild)
        checks += [(part["name"], part["bytes"]) for part in files["shards"]]
    for name, size in checks:
        path = root / name
        actual = path.stat().st_size if path.is_file() else None
        if actual != size:
            state = "is missing" if actual is None else f"has {actual} bytes"
            raise ValueError(
                f"{root}: {name} {state} but the build wrote {size}; the file is truncated or comes from another "
                f"build. {rebuild}"
            )
    return meta


def _check_shard_records(root: Path, meta: dict[str, Any], rebuild: str) -> None:
    """The recorded shards must cover rows ``[0, num_passages)`` in order, one file per range, ``shards`` of them."""
    records = meta["files"]["shards"]
    n = meta.get("num_passages")
    ranges = [list(r.get("rows", ())) for r in records]
    edges = [r[0] for r in ranges if len(r) == 2] + [n]
    names = [r.get("name") for r in records]
    covered = all(len(r) == 2 and r[0] < r[1] for r in ranges) and ranges and ranges[0][0] == 0
    covered = covered and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False)) and ranges[-1][1] == n
    if meta.get("shards") != len(records) or not covered or len(set(names)) != len(names):
        raise ValueError(
            f"{root}/{META_FILE} records {len(records)} shard file(s) with rows {ranges} for {n} passages and "
            f"shards={meta.get('shards')}; they must be {meta.get('shards')} contiguous ranges covering every row "
            f"once (from 0 to {edges[-1]}). The folder is damaged. {rebuild}"
        )


def shard_ranges(n: int, shards: int, align: int = 1) -> list[tuple[int, int]]:
    """Row ranges ``[start, stop)`` of ``shards`` contiguous, nearly equal shards of ``n`` rows.

    Shard starts are rounded to multiples of ``align`` where that leaves every shard non-empty (else they are not
    aligned). :func:`shard_alignment` explains why the build aligns them.

    >>> shard_ranges(10, 3)
    [(0, 3), (3, 6), (6, 10)]
    >>> shard_ranges(10000, 3, align=1024)
    [(0, 3072), (3072, 7168), (7168, 10000)]
    """
    check_shard_count(shards, n)
    edges = [i * n // shards for i in range(shards)] + [n]
    if align > 1:
        aligned = [round(i * n / shards / align) * align for i in range(shards)] + [n]
        if all(a < b for a, b in zip(aligned, aligned[1:], strict=False)):
            edges = aligned
    return list(zip(edges, edges[1:], strict=False))


def shard_alignment() -> int:
    """The row alignment of shard boundaries: faiss's BLAS database block (``distance_compute_blas_database_bs``,
    1024 rows by default).

    A Flat search of 4 or more queries scores the rows in blocks of that many rows, one BLAS matrix product per
    block, and BLAS may round a product of another shape differently in the last bit. A shard that starts on a
    block boundary is cut into the very blocks the whole index is, so its scores are bit-identical to the unsharded
    ones (measured: with 2 shards of 2,500 of 5,000 rows, 7,569 of 320,000 scores of 64 queries differed by one ulp;
    at 2,048 none did). One-to-three-query searches score row by row and match either way.
    """
    faiss = import_faiss("Building an index")
    return max(1, int(faiss.cvar.distance_compute_blas_database_bs))


def shard_file_name(number: int, shards: int) -> str:
    """Path of shard ``number`` (from 0) of ``shards`` inside an index directory.

    >>> shard_file_name(1, 4)
    'shards/shard-001-of-004.faiss'
    """
    return f"{SHARDS_DIR}/shard-{number:03d}-of-{shards:03d}.faiss"


def check_shard_count(shards: int, n: int) -> None:
    """Refuse a shard count below 1 or above the number of passages (every shard holds at least one row)."""
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ValueError(f"shards is {shards!r}; it must be a whole number of at least 1 (--shards).")
    if shards > n:
        raise ValueError(
            f"--shards {shards} is more than the {n} passages of this corpus; every shard needs at least one passage. "
            f"Choose --shards {n} or fewer (shards pay off for indexes larger than one process's memory)."
        )


def shard_layout(meta: dict[str, Any]) -> list[dict[str, Any]]:
    """The index files of a complete build: ``[{"name", "rows": [start, stop]}, ...]`` (one entry when unsharded)."""
    shards = meta.get("files", {}).get("shards")
    if isinstance(shards, list):
        return [{"name": s["name"], "rows": list(s["rows"])} for s in shards]
    return [{"name": INDEX_FILE, "rows": [0, int(meta["num_passages"])]}]


# ---- faiss -----------------------------------------------------------------------------------------------------------


def check_index_type(index_type: str, dim: int) -> None:
    """Refuse a faiss factory string faiss cannot build for ``dim``-d vectors (before anything is encoded)."""
    faiss = import_faiss("Building an index")
    try:
        faiss.index_factory(dim, index_type, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as e:
        raise ValueError(
            f"faiss cannot build index type {index_type!r} for {dim}-d vectors ({faiss_reason(e)}). Use a faiss "
            "factory string such as 'Flat', 'HNSW64', 'IVF4096,Flat' or 'IVF4096,PQ64' (--index-type)."
        ) from None


def check_trainable(index_type: str, dim: int, train_rows: int) -> None:
    """Refuse an index type whose training needs more rows than the corpus has (IVF4096 on 5 passages).

    k-means in faiss needs at least as many training vectors as centroids: ``nlist`` for an IVF coarse quantizer,
    ``2**nbits`` per product-quantizer sub-space.
    """
    faiss = import_faiss("Building an index")
    index = faiss.index_factory(dim, index_type, faiss.METRIC_INNER_PRODUCT)
    if index.is_trained:
        return
    needs = []
    try:
        ivf = faiss.extract_index_ivf(index)
        needs.append((ivf.nlist, f"{ivf.nlist} IVF lists"))
    except RuntimeError:
        pass  # not an IVF index
    pq = getattr(faiss.downcast_index(index), "pq", None)
    if pq is None and needs:
        pq = getattr(faiss.downcast_index(faiss.extract_index_ivf(index)), "pq", None)
    if pq is not None:
        needs.append((pq.ksub, f"{pq.ksub} centroids per PQ sub-quantizer"))
    for rows, what in needs:
        if train_rows < rows:
            suggestion = "Flat" if train_rows < 1000 else f"IVF{max(1, train_rows // 39)},Flat"
            raise ValueError(
                f"index type {index_type!r} needs at least {rows} training vectors ({what}) but the corpus gives "
                f"{train_rows}; choose a smaller index for this corpus, e.g. --index-type {suggestion}."
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


def write_index_files(
    emb_path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    n: int,
    dim: int,
    index_type: str = "Flat",
    shards: int = 1,
    train_size: int = 262144,
    chunk_size: int = 4096,
    header: int | None = None,
) -> list[dict[str, Any]]:
    """Write the faiss index file(s) of ``out`` from the ``[n, dim]`` float32 ``.npy`` file ``emb_path``.

    ``shards`` = 1 writes ``out/index.faiss``; more write ``out/shards/shard-XXX-of-YYY.faiss``, one per row range of
    :func:`shard_ranges`, one at a time (peak memory: one shard's index plus ``chunk_size`` rows). Index files of
    another shard count left in ``out`` are removed once the new ones are written. The build's index phase and
    ``benchmarks/retriever_shards.py`` both write through here.

    Returns:
        One record per file: ``{"name": path relative to out, "rows": [start, stop], "bytes": size}``.

    Raises:
        ValueError: A factory string faiss cannot build or train, or a bad shard count.
    """
    import numpy as np

    faiss = import_faiss("Building an index")
    emb_path, out = Path(emb_path), Path(out)
    if header is None:
        header = _npy_header_size(emb_path, n, dim)
    check_index_type(index_type, dim)
    ranges = shard_ranges(n, shards, shard_alignment())
    names = [INDEX_FILE] if shards == 1 else [shard_file_name(i, shards) for i in range(shards)]
    empty = faiss.index_factory(dim, index_type, faiss.METRIC_INNER_PRODUCT)
    records = []
    with open(emb_path, "rb") as f:
        if not empty.is_trained:
            take = min(train_size, n)
            rng = np.random.default_rng(0)
            rows = np.sort(rng.choice(n, size=take, replace=False))
            sample = np.empty((take, dim), dtype=np.float32)
            for j, r in enumerate(rows):
                sample[j] = _read_rows(f, header, dim, int(r), int(r) + 1)[0]
            logger.info("Training %s on %d sampled rows", index_type, take)
            try:
                empty.train(sample)
            except RuntimeError as e:
                raise ValueError(
                    f"faiss could not train {index_type!r} on {take} rows ({faiss_reason(e)}); choose an index "
                    "type this corpus can train (--index-type), e.g. Flat. The embeddings are kept: re-running with "
                    "another --index-type only rebuilds the index."
                ) from None
            del sample
        step = max(chunk_size, 1)
        for name, (lo, hi) in zip(names, ranges, strict=True):
            index = faiss.clone_index(empty) if shards > 1 else empty
            for start in range(lo, hi, step):
                index.add(_read_rows(f, header, dim, start, min(start + step, hi)))
            path = out / name
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            faiss.write_index(index, str(tmp))
            os.replace(tmp, path)
            records.append({"name": name, "rows": [lo, hi], "bytes": path.stat().st_size})
            logger.info("Wrote %s (%s, rows %d-%d)", path, index_type, lo, hi)
            del index
    # index files of another shard count are stale now
    if shards > 1 and (out / INDEX_FILE).exists():
        (out / INDEX_FILE).unlink()
    if (out / SHARDS_DIR).is_dir():
        for stale in (out / SHARDS_DIR).iterdir():
            if f"{SHARDS_DIR}/{stale.name}" not in names:
                stale.unlink()
        if shards == 1:
            (out / SHARDS_DIR).rmdir()
    return records


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(
            f"{path} is not valid JSON ({e}); the folder is damaged. Rebuild it with --overwrite (or delete it)."
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a JSON object; the folder is damaged. Rebuild it with --overwrite.")
    return data


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` atomically (a temporary file renamed into place)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)
