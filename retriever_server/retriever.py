"""The retriever: encoder + search backend + passage store, loaded from an index directory or Search-R1 files.

:class:`Retriever` is synchronous and not thread-safe; the HTTP app calls it from one worker thread through the
micro-batcher (:mod:`retriever_server.batching`). :class:`IndexSource` names what to load (an index directory, or
Search-R1's index file + corpus) and :func:`load_source` loads it, for ``serve`` on uvicorn and the Ray Serve replicas
alike.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .build import CORPUS_DIR, EMBEDDINGS_FILE, INDEX_FILE, check_index_dir
from .cli_common import input_file
from .corpus_store import CorpusStore, convert_corpus, store_is_current
from .encoders import Encoder, EncoderConfig, TextKind, with_overrides
from .search import FaissBackend, SearchBackend, TorchBackend, resolve_backend
from .sharded import ShardedBackend, plan_shards

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)


@dataclass
class LoadOptions:
    """How to load an index for serving (all optional; the index's ``meta.json`` supplies the rest)."""

    backend: str = "auto"
    """``auto``, ``faiss`` (CPU), ``faiss-gpu`` or ``torch`` (exact GPU search without faiss-gpu)."""
    device: str | None = None
    """Encoder device: ``auto``/``cpu``/``cuda[:N]`` (default: the index's setting, i.e. ``auto``)."""
    fp16: bool | None = None
    """Encoder and torch-backend fp16; ``None``: on CUDA only."""
    bf16: bool | None = None
    """Encoder in bfloat16 (:attr:`~retriever_server.encoders.EncoderConfig.bf16`); ``None``: the index's setting."""
    model: str | None = None
    """Encoder path override, e.g. when the model directory moved since the build."""
    encoder_batch_size: int | None = None
    """Texts per encoder forward pass."""
    num_threads: int | None = None
    """``torch.set_num_threads`` for CPU encoding."""
    search_params: str | None = None
    """faiss ``ParameterSpace`` string, e.g. ``nprobe=64`` (IVF) or ``efSearch=128`` (HNSW)."""
    corpus_store: str | None = None
    """Search-R1 files only: where to keep the converted corpus (default ``<corpus_path>.store``)."""

    def encoder_config(self, index_config: EncoderConfig) -> EncoderConfig:
        """An index's encoder settings with these options' overrides (those that are set)."""
        return with_overrides(
            index_config,
            model=self.model,
            device=self.device,
            fp16=self.fp16,
            bf16=self.bf16,
            batch_size=self.encoder_batch_size,
            num_threads=self.num_threads,
        )


@dataclass
class Retriever:
    """Dense retrieval over a passage store.

    Attributes:
        encoder: The query encoder.
        backend: The search backend over the passage embeddings.
        store: The passages, by row.
        info: Descriptive fields reported by ``GET /health`` (model, index type, ...).
    """

    encoder: Encoder
    backend: SearchBackend
    store: CorpusStore
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.backend.ntotal != len(self.store):
            raise ValueError(
                f"The index has {self.backend.ntotal} vectors but the corpus has {len(self.store)} passages; they "
                "must come from the same corpus (same lines, same order). Rebuild the index or fix --corpus_path."
            )
        if self.backend.dim != self.encoder.dim:
            raise ValueError(
                f"The index holds {self.backend.dim}-d vectors but encoder {self.encoder.config.model} produces "
                f"{self.encoder.dim}-d embeddings; use the model the index was built with (--model / "
                "--retriever_model)."
            )

    @classmethod
    def from_index_dir(cls, index_dir: str | os.PathLike[str], options: LoadOptions | None = None) -> Retriever:
        """Load an index directory written by :func:`retriever_server.build.build_index`.

        Raises:
            FileNotFoundError: ``index_dir`` holds no complete build (the message says how to make one).
            ValueError: Its parts come from different builds or are damaged (:func:`~retriever_server.build.
                check_index_dir`).
        """
        options = options or LoadOptions()
        root = Path(index_dir)
        meta = check_index_dir(root)
        enc_config = options.encoder_config(EncoderConfig(**meta["encoder"]))
        backend_name = resolve_backend(
            options.backend, index_type=meta["index_type"], has_embeddings=(root / EMBEDDINGS_FILE).is_file()
        )
        if meta.get("shards", 1) > 1 and backend_name != "torch":  # every shard here, searched in turn and merged
            backend = ShardedBackend.load(
                plan_shards(root), gpu=backend_name == "faiss-gpu", search_params=options.search_params
            )
        else:
            backend = _load_backend(backend_name, root / INDEX_FILE, root, options)
        store = CorpusStore.open(root / CORPUS_DIR)
        encoder = Encoder.load(enc_config)
        info = {"index": str(root), "index_type": meta["index_type"]}
        if meta.get("shards", 1) > 1:
            info["shards"] = meta["shards"]
        return cls(encoder, backend, store, info)

    @classmethod
    def from_searchr1_files(
        cls,
        index_path: str | os.PathLike[str],
        corpus_path: str | os.PathLike[str],
        encoder_config: EncoderConfig,
        options: LoadOptions | None = None,
    ) -> Retriever:
        """Serve Search-R1's own artifacts: a faiss index file (``e5_Flat.index``) + its ``wiki-18.jsonl``.

        The corpus is converted once into a store beside it (``<corpus_path>.store``, or ``options.corpus_store``)
        and reused while the corpus file is unchanged.
        """
        options = options or LoadOptions()
        # the index first: a file that is not a faiss index fails before the corpus is converted
        index_type = _faiss_index_kind(index_path)
        backend_name = resolve_backend(options.backend, index_type=index_type, has_embeddings=index_type == "Flat")
        backend = _load_backend(backend_name, Path(index_path), Path(index_path), options)
        store_dir = Path(options.corpus_store or f"{corpus_path}.store")
        if not store_is_current(store_dir, corpus_path):
            logger.info("Converting %s into the passage store %s (once)", corpus_path, store_dir)
            convert_corpus(corpus_path, store_dir, progress=True)
        encoder = Encoder.load(
            with_overrides(encoder_config, device=options.device, fp16=options.fp16, bf16=options.bf16)
        )
        info = {"index": str(index_path), "index_type": index_type}
        return cls(encoder, backend, CorpusStore.open(store_dir), info)

    def encode_queries(
        self, queries: list[str], kind: TextKind = "query", token_ids: list[list[int]] | None = None
    ) -> np.ndarray:
        """Embeddings float32 ``[len(queries), dim]`` (``token_ids``: the queries already tokenized, see
        :meth:`~retriever_server.encoders.Encoder.encode`)."""
        return self.encoder.encode(queries, kind, token_ids=token_ids)

    def search(self, embeddings: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, rows)`` float32 / int64 ``[n, k]``; rows are ``-1`` where fewer than ``k`` passages exist."""
        return self.backend.search(embeddings, k)

    def retrieve(self, queries: list[str], topk: int = 3) -> list[list[dict[str, Any]]]:
        """Retrieve ``topk`` passages per query: ``[[{"document": {...}, "score": float}, ...], ...]``.

        The same objects ``POST /retrieve`` returns with ``return_scores=true``; for humans and tests.
        """
        scores, rows = self.search(self.encode_queries(queries), topk)
        return [
            [
                {"document": self.store.document(int(r)), "score": float(s)}
                for s, r in zip(srow, rrow, strict=True)
                if r >= 0
            ]
            for srow, rrow in zip(scores, rows, strict=True)
        ]

    def describe(self) -> dict[str, Any]:
        """Fields for ``GET /health``."""
        return {
            **health_fields(self.info, self.store, self.encoder),
            "backend": self.backend.name,
            "search_device": self.backend.device,
        }


def health_fields(info: dict[str, Any], store: Any, encoder: Any) -> dict[str, Any]:
    """The ``GET /health`` fields every retriever reports: its info, the index size and the encoder's settings."""
    return {
        **info,
        "index_size": len(store),
        "dim": encoder.dim,
        "model": encoder.config.model,
        "pooling": encoder.config.pooling,
        "device": encoder.device,
        "encoder_dtype": encoder.dtype_name,
    }


@dataclass
class IndexSource:
    """Where a server loads its retriever from: an index directory, or Search-R1's index file + corpus."""

    index: str
    """Index directory (ours) or a faiss index file (Search-R1 ``--index_path``)."""
    corpus_path: str | None = None
    """Search-R1 corpus ``.jsonl`` (only with an index file)."""
    retriever_name: str | None = None
    """Encoder preset for an index file: ``e5``, ``bge``, ``mean``, ``cls`` (default: from the model name)."""
    retriever_model: str | None = None
    """Encoder model for an index file (Search-R1 ``--retriever_model``)."""


def check_source(source: IndexSource) -> None:
    """Refuse an :class:`IndexSource` that cannot load, from what is on disk alone (nothing is read or loaded): a
    missing path, a folder without a complete index (:func:`~retriever_server.build.check_index_dir`), an index file
    without ``corpus_path`` / ``retriever_model``, a missing corpus.

    Raises:
        FileNotFoundError, IsADirectoryError, ValueError: The message says what to pass.
    """
    if Path(source.index).is_dir():
        check_index_dir(source.index)
        return
    if not Path(source.index).exists():
        raise FileNotFoundError(
            f"--index {source.index} does not exist; pass an index folder made by `python -m retriever_server build`, "
            "or a faiss index file with --corpus_path and --retriever_model."
        )
    if not source.corpus_path or not source.retriever_model:
        raise ValueError(
            f"{source.index} is a file, so it is read as a faiss index (Search-R1 layout) and needs --corpus_path "
            "(the corpus .jsonl it was built from) and --retriever_model (the encoder); or pass an index directory "
            "made by `python -m retriever_server build`."
        )
    input_file(source.corpus_path, "--corpus_path")


def load_source(source: IndexSource, options: LoadOptions) -> Retriever:
    """Load a :class:`Retriever` from an :class:`IndexSource` (checked first by :func:`check_source`).

    Raises:
        ValueError: An index file without ``corpus_path`` / ``retriever_model``.
    """
    check_source(source)
    if Path(source.index).is_dir():
        return Retriever.from_index_dir(source.index, options)
    encoder = EncoderConfig.from_preset(
        source.retriever_model,
        source.retriever_name,
        batch_size=options.encoder_batch_size,
        num_threads=options.num_threads,
    )
    return Retriever.from_searchr1_files(source.index, source.corpus_path, encoder, options)


def _load_backend(name: str, index_file: Path, index_root: Path, options: LoadOptions) -> SearchBackend:
    if name == "torch":
        return TorchBackend.from_files(index_root, fp16=options.fp16)
    return FaissBackend.load(index_file, gpu=name == "faiss-gpu", search_params=options.search_params)


def _faiss_index_kind(path: str | os.PathLike[str]) -> str:
    """``"Flat"`` for exact flat indexes, else the faiss class name (reads only the file's first bytes)."""
    with open(path, "rb") as f:
        fourcc = f.read(4)
    return "Flat" if fourcc in (b"IxFI", b"IxF2", b"IxFl") else fourcc.decode("ascii", "replace")
