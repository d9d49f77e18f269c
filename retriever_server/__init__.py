"""Retrieval server for search agents: dense encoders + FAISS behind the Search-R1 ``/retrieve`` wire format.

A drop-in replacement for Search-R1's retrieval server, built for the per-trajectory load of async agent loops:
concurrent requests are merged into one encode + one search call (micro-batching), the corpus is memory-mapped,
index builds are resumable with bounded memory, and the same app runs under uvicorn or Ray Serve.

=======================  =====================================================================================
module                   what it holds
=======================  =====================================================================================
``encoders``             E5 / BGE / any HF encoder (pooling, prefixes, fp16 on GPU)
``corpus_store``         the corpus as memory-mapped records with O(1) lookup
``build``                resumable index builder (chunks → ``embeddings.npy`` → faiss index)
``search``               backends: faiss CPU, faiss GPU, exact torch matmul + top-k
``retriever``            encoder + backend + store, loaded from an index directory or Search-R1 files
``batching``             the asyncio micro-batcher and the batch runner
``protocol``             the wire format: validation and response rendering
``app``                  the FastAPI app (``create_app``) and ``ServerConfig``
``http_guard``           uvicorn's connections with limits on heads, bodies and slow clients
``fast_post``            ``/retrieve`` and ``/encode`` answered by those connections, without ASGI
``sharded``              sharded search: the shard layout, the merge, every shard searched in one process
``ray_app``              Ray Serve: one-replica and sharded (encoder + shard deployments) apps, ``build_app``
``cli``                  ``python -m retriever_server {build,serve,query}``
=======================  =====================================================================================

Importing this package imports no torch, faiss, transformers or ray.serve; names below resolve lazily.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "EncoderConfig": "encoders",
    "Encoder": "encoders",
    "CorpusStore": "corpus_store",
    "convert_corpus": "corpus_store",
    "BuildConfig": "build",
    "BuildReport": "build",
    "build_index": "build",
    "FaissBackend": "search",
    "TorchBackend": "search",
    "Retriever": "retriever",
    "LoadOptions": "retriever",
    "Job": "batching",
    "MicroBatcher": "batching",
    "run_jobs": "batching",
    "ServerConfig": "app",
    "create_app": "app",
    "IndexSource": "retriever",
    "load_source": "retriever",
    "RayServeConfig": "ray_app",
    "ShardedConfig": "ray_app",
    "build_app": "ray_app",
}

__all__ = sorted(_EXPORTS)


# The same lazy-export block as agentrag_verl._lazy, kept here on purpose: the retriever is a service deployable on
# its own, so retriever_server imports nothing from agentrag_verl.
def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
