"""Fixtures for testing search-agent components without a GPU, a hub download or a real LLM.

Importable by users writing their own reward managers and agent loops; ``tests/conftest.py`` wraps them as
pytest fixtures. Names resolve lazily, so ``import agentrag_verl.testing`` imports no torch or Ray.

- :func:`build_tiny_tokenizer`, :func:`build_tiny_qwen2` — a BPE tokenizer with a Qwen-style chat template
  and a random tiny Qwen2 LM, built locally.
- :class:`FakeOpenAIServer`, :class:`Fault` — an OpenAI-compatible chat/completions server on 127.0.0.1 with
  scripted replies and fault injection.
- :func:`local_ray` — a throwaway local Ray cluster.
- :class:`FakeRetriever` — a scripted Search-R1 retriever on 127.0.0.1 with failure modes (down, slow, 4xx, garbage).
- :func:`fixture_index`, :class:`RetrieverServer` — the real retriever server over the fixture corpus (MiniLM) on
  127.0.0.1.
- :func:`load_corpus`, :func:`load_qa`, :func:`write_corpus`, :func:`write_qa` — a small original corpus and
  QA set in FlashRAG layout.
"""

from __future__ import annotations

from agentrag_verl._lazy import lazy_exports

_EXPORTS = {
    "build_tiny_tokenizer": "tiny_models",
    "build_tiny_qwen2": "tiny_models",
    "FakeOpenAIServer": "openai_server",
    "Fault": "openai_server",
    "local_ray": "ray_cluster",
    "Passage": "corpus",
    "load_corpus": "corpus",
    "load_qa": "corpus",
    "write_corpus": "corpus",
    "write_qa": "corpus",
    "CORPUS_PATH": "corpus",
    "FakeRetriever": "fake_retriever",
    "fixture_index": "retriever",
    "RetrieverServer": "retriever",
    "QA_PATH": "corpus",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
