"""Index builds: layout, exact embeddings, settings checks, other index types, and kill-and-resume."""

from __future__ import annotations

import hashlib
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


# ---- fingerprints: an index never mixes corpora ---------------------------------------------------------------------


def _build(corpus, out, model, *, index_type="Flat", overwrite=False, chunk_size=64):
    config = BuildConfig(
        str(corpus),
        str(out),
        _tiny_config(model),
        index_type,
        chunk_size=chunk_size,
        overwrite=overwrite,
        progress=False,
    )
    return build_index(config)


def test_rebuild_with_another_corpus_refuses_and_overwrite_gives_a_clean_index(tmp_path, synthetic_file, tiny_bert_dir):
    from retriever_server.retriever import Retriever

    out = tmp_path / "idx"
    _build(synthetic_file, out, tiny_bert_dir)
    other = write_corpus(synthetic_corpus(40, seed=7), tmp_path / "other.jsonl")
    for index_type in ("Flat", "HNSW16"):  # same type ("nothing to do" before) and another type (rewrote meta.json)
        with pytest.raises(ValueError, match=r"another build \(corpus .*--overwrite"):
            _build(other, out, tiny_bert_dir, index_type=index_type)
    assert json.loads((out / "meta.json").read_text())["num_passages"] == 300  # untouched: still the first corpus

    report = _build(other, out, tiny_bert_dir, overwrite=True)
    assert (report.num_passages, report.chunks_reused, report.chunks_encoded) == (40, 0, 1)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["fingerprint"]["corpus"]["sha256"] == hashlib.sha256(other.read_bytes()).hexdigest()
    assert [json.loads(line)["chunk"] for line in (out / "chunks.done").read_text().splitlines()] == [0]
    retriever = Retriever.from_index_dir(out)
    assert [d["id"] for d in CorpusStore.open(out / "corpus")] == [str(i) for i in range(40)]
    assert len(retriever.store) == retriever.backend.ntotal == 40


def test_a_partial_build_of_another_corpus_is_not_resumed(tmp_path, tiny_bert_dir):
    out = tmp_path / "partial"
    first = write_corpus(synthetic_corpus(60), tmp_path / "first.jsonl")
    _build(first, out, tiny_bert_dir)
    (out / "meta.json").unlink()  # what a build killed before its end leaves (test_build_resumes_after_kill)
    other = write_corpus(synthetic_corpus(60, seed=3), tmp_path / "same_size_other_text.jsonl")
    with pytest.raises(ValueError, match="holds a partial build of another build"):
        _build(other, out, tiny_bert_dir)


def test_a_moved_copy_of_the_corpus_is_the_same_corpus(tmp_path, synthetic_file, tiny_bert_dir):
    out = tmp_path / "idx"
    _build(synthetic_file, out, tiny_bert_dir)
    copy = tmp_path / "elsewhere" / "renamed.jsonl"
    copy.parent.mkdir()
    copy.write_bytes(synthetic_file.read_bytes())
    assert _build(copy, out, tiny_bert_dir).already_complete


def test_serve_refuses_an_index_whose_parts_disagree(tmp_path, tiny_bert_dir):
    import shutil

    from retriever_server.retriever import Retriever
    from retriever_server.search import FaissBackend

    a, b = tmp_path / "a", tmp_path / "b"
    _build(write_corpus(synthetic_corpus(60), tmp_path / "a.jsonl"), a, tiny_bert_dir)
    _build(write_corpus(synthetic_corpus(60, seed=5), tmp_path / "b.jsonl"), b, tiny_bert_dir)
    # b's passage store under a's index: same passage count, other text
    mixed = tmp_path / "mixed"
    shutil.copytree(a, mixed)
    shutil.rmtree(mixed / "corpus")
    shutil.copytree(b / "corpus", mixed / "corpus")
    with pytest.raises(ValueError, match=r"the passage store \(corpus/\) is not the one this index was built with"):
        Retriever.from_index_dir(mixed)
    # b's faiss file (another build, same size) would pass a size check: the store check above catches the corpus;
    # a truncated index.faiss is caught by its recorded size, and by faiss itself when read alone
    truncated = tmp_path / "truncated"
    shutil.copytree(a, truncated)
    data = (truncated / "index.faiss").read_bytes()
    (truncated / "index.faiss").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="index.faiss has .* bytes but the build wrote"):
        Retriever.from_index_dir(truncated)
    with pytest.raises(ValueError, match="faiss cannot read .*truncated, damaged or not a faiss index"):
        FaissBackend.load(truncated / "index.faiss")


def test_untrainable_index_type_fails_before_encoding_and_leaves_nothing_servable(tmp_path, tiny_bert_dir):
    from retriever_server.retriever import Retriever

    five = write_corpus(synthetic_corpus(5), tmp_path / "five.jsonl")
    out = tmp_path / "ivf"
    with pytest.raises(ValueError, match=r"'IVF4096,Flat' needs at least 4096 training vectors .*--index-type Flat"):
        _build(five, out, tiny_bert_dir, index_type="IVF4096,Flat")
    assert not (out / "chunks.done").exists() and not (out / "meta.json").exists()
    with pytest.raises(FileNotFoundError, match="holds no complete index"):
        Retriever.from_index_dir(out)
    assert _build(five, out, tiny_bert_dir).num_passages == 5  # the corrected rerun goes through
    # asking for the untrainable type on the finished index keeps the Flat index servable
    with pytest.raises(ValueError, match="needs at least 4096 training vectors"):
        _build(five, out, tiny_bert_dir, index_type="IVF4096,Flat")
    assert len(Retriever.from_index_dir(out).retrieve(["river"], 2)[0]) == 2
