"""Index builds: layout, exact embeddings, settings checks, other index types, and kill-and-resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from agentrag_verl.testing import write_corpus
from retriever_server.build import KILL_AFTER_CHUNKS_ENV, BuildConfig, build_index
from retriever_server.corpus_store import CorpusStore
from retriever_server.encoders import EncoderConfig

from .conftest import synthetic_corpus


def test_index_dir_layout_and_embeddings(index_dir, minilm_encoder):
    meta = json.loads((index_dir / "meta.json").read_text())
    assert (meta["num_passages"], meta["dim"], meta["index_type"], meta["metric"]) == (68, 384, "Flat", "inner_product")
    assert meta["encoder"]["pooling"] == "mean"
    emb = np.load(index_dir / "embeddings.npy")
    store = CorpusStore.open(index_dir / "corpus")
    expected = minilm_encoder.encode(store.contents(0, 68), "passage")
    np.testing.assert_allclose(emb, expected, atol=1e-5)  # chunked + length-sorted == one call, up to fp32 rounding
    chunks = [json.loads(line)["chunk"] for line in (index_dir / "chunks.done").read_text().splitlines()]
    assert chunks == [0, 1, 2, 3, 4]  # 68 passages in chunks of 16


def test_complete_build_is_not_redone(index_dir, corpus_file, minilm_config):
    report = build_index(BuildConfig(str(corpus_file), str(index_dir), minilm_config, chunk_size=16, progress=False))
    assert report.already_complete and report.chunks_encoded == 0


def test_other_settings_are_refused(index_dir, corpus_file, minilm_config):
    other = EncoderConfig.from_preset(minilm_config.model, "e5")  # different prefixes => different embeddings
    with pytest.raises(ValueError, match="--overwrite"):
        build_index(BuildConfig(str(corpus_file), str(index_dir), other, progress=False))


@pytest.fixture(scope="module")
def synthetic_file(tmp_path_factory):
    # 300 passages in chunks of 64: 5 chunks, the last one partial (300 = 4 * 64 + 44).
    return write_corpus(synthetic_corpus(300), tmp_path_factory.mktemp("syn") / "corpus.jsonl")


def _tiny_config(tiny_bert_dir):
    return EncoderConfig.from_preset(tiny_bert_dir, "e5", batch_size=16, max_length=64)


@pytest.mark.parametrize("index_type", ["HNSW16", "IVF4,Flat"])
def test_approximate_index_types(tmp_path, synthetic_file, tiny_bert_dir, index_type):
    from retriever_server.retriever import Retriever

    flat = build_index(BuildConfig(str(synthetic_file), str(tmp_path), _tiny_config(tiny_bert_dir), progress=False))
    # Same directory, another index type: the embeddings are reused and only the index is rebuilt.
    other = build_index(
        BuildConfig(str(synthetic_file), str(tmp_path), _tiny_config(tiny_bert_dir), index_type, progress=False)
    )
    assert (flat.chunks_encoded, other.chunks_encoded, other.index_type) == (1, 0, index_type)
    r = Retriever.from_index_dir(tmp_path)
    hits = r.retrieve(["river island town"], 5)[0]
    assert len(hits) == 5 and hits[0]["score"] >= hits[-1]["score"]


def test_bad_index_type(tmp_path, synthetic_file, tiny_bert_dir):
    with pytest.raises(ValueError, match="factory string"):
        build_index(
            BuildConfig(str(synthetic_file), str(tmp_path), _tiny_config(tiny_bert_dir), "Nonsense", progress=False)
        )


def _build_cmd(corpus, model, out):
    return [
        sys.executable,
        "-m",
        "retriever_server",
        "build",
        "--corpus",
        str(corpus),
        "--model",
        model,
        "--out",
        str(out),
        "--retriever-name",
        "e5",
        "--batch-size",
        "16",
        "--max-length",
        "64",
        "--chunk-size",
        "64",
        "--no-progress",
    ]


def test_build_resumes_after_kill(tmp_path, synthetic_file, tiny_bert_dir):
    out = tmp_path / "resumed"
    env = {**os.environ, KILL_AFTER_CHUNKS_ENV: "2", "HF_HUB_OFFLINE": "1"}
    killed = subprocess.run(_build_cmd(synthetic_file, tiny_bert_dir, out), env=env, capture_output=True, text=True)
    # SIGKILL after 2 finished chunks, half-way through writing the third.
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not (out / "meta.json").exists() and not (out / "index.faiss").exists()
    first_run = [json.loads(line) for line in (out / "chunks.done").read_text().splitlines()]
    assert [c["chunk"] for c in first_run] == [0, 1]

    env.pop(KILL_AFTER_CHUNKS_ENV)
    resumed = subprocess.run(_build_cmd(synthetic_file, tiny_bert_dir, out), env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert (report["chunks_total"], report["chunks_reused"], report["chunks_encoded"]) == (5, 2, 3)
    log = [json.loads(line) for line in (out / "chunks.done").read_text().splitlines()]
    assert sorted(c["chunk"] for c in log) == [0, 1, 2, 3, 4]  # every chunk encoded exactly once over both runs
    assert log[:2] == first_run and len({c["run"] for c in log[2:]}) == 1 and log[2]["run"] != first_run[0]["run"]

    clean = tmp_path / "clean"
    build_index(
        BuildConfig(str(synthetic_file), str(clean), _tiny_config(tiny_bert_dir), chunk_size=64, progress=False)
    )
    np.testing.assert_allclose(np.load(out / "embeddings.npy"), np.load(clean / "embeddings.npy"), atol=1e-6)
    assert json.loads((out / "meta.json").read_text())["num_passages"] == 300
