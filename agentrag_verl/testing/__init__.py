"""Fixtures for testing search-agent components without a GPU, a hub download or a real LLM.

Importable by users writing their own reward managers and agent loops; ``tests/conftest.py`` wraps them as
pytest fixtures. Names resolve lazily, so ``import agentrag_verl.testing`` imports no torch or Ray. No production
module imports this package; the tiny corpus and QA set (:mod:`agentrag_verl.data.corpus`) and the tiny model
builders (:mod:`agentrag_verl.local_cpu.tiny_model`) are production code that the local CPU mode uses, re-exported
here for tests.

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
    "build_tiny_tokenizer": "agentrag_verl.local_cpu.tiny_model",
    "build_tiny_qwen2": "agentrag_verl.local_cpu.tiny_model",
    "FakeOpenAIServer": "agentrag_verl.testing.openai_server",
    "Fault": "agentrag_verl.testing.openai_server",
    "local_ray": "agentrag_verl.testing.ray_cluster",
    "Passage": "agentrag_verl.data.corpus",
    "load_corpus": "agentrag_verl.data.corpus",
    "load_qa": "agentrag_verl.data.corpus",
    "write_corpus": "agentrag_verl.data.corpus",
    "write_qa": "agentrag_verl.data.corpus",
    "CORPUS_PATH": "agentrag_verl.data.corpus",
    "FakeRetriever": "agentrag_verl.testing.fake_retriever",
    "fixture_index": "agentrag_verl.testing.retriever",
    "RetrieverServer": "agentrag_verl.testing.retriever",
    "QA_PATH": "agentrag_verl.data.corpus",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
