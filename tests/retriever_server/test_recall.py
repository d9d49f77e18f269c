"""Recall@k against exact search (``retriever_server.recall``) and its CLI: ``build --recall-queries``, ``recall``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agentrag_verl.testing import write_corpus
from retriever_server.recall import exact_topk, measure_recall, read_queries, recall_at_k
from retriever_server.search import FaissBackend
from tests import cli_errors

from .conftest import synthetic_corpus

faiss = pytest.importorskip("faiss")


def unit_rows(n: int, d: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_exact_topk_is_the_full_sort_in_any_block_size():
    emb, q = unit_rows(1000, 16, 0), unit_rows(7, 16, 1)
    full = q @ emb.T
    want = np.argsort(-full, axis=1, kind="stable")[:, :5]
    for block in (1000, 64, 3):
        scores, rows = exact_topk(emb, q, 5, block_rows=block)
        np.testing.assert_array_equal(rows, want)
        np.testing.assert_allclose(scores, np.take_along_axis(full, want, 1), rtol=1e-6)


def test_exact_topk_orders_ties_by_row_and_caps_k():
    emb = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 0.0]], np.float32)
    scores, rows = exact_topk(emb, np.array([[1.0, 0.0]], np.float32), 10, block_rows=2)
    assert rows.tolist() == [[0, 2, 3, 1]] and scores.tolist() == [[1.0, 1.0, 1.0, 0.0]]


def test_recall_at_k_counts_overlap_per_query():
    exact = np.array([[1, 2, 3], [4, 5, 6]])
    found = np.array([[3, 2, 9], [-1, -1, 4]])  # 2 of 3, then 1 of 3 (padding never counts)
    assert recall_at_k(found, exact) == pytest.approx(3 / 6)
    assert recall_at_k(exact, exact) == 1.0


def test_ivf_recall_rises_with_nprobe_to_exact():
    emb, q = unit_rows(4000, 32, 2), unit_rows(200, 32, 3)
    index = faiss.index_factory(32, "IVF32,Flat", faiss.METRIC_INNER_PRODUCT)
    index.train(emb)
    index.add(emb)
    backend = FaissBackend(index)
    recalls = []
    for nprobe in (1, 4, 32):
        faiss.ParameterSpace().set_index_parameters(index, f"nprobe={nprobe}")
        recalls.append(measure_recall(backend, emb, q, 3).recall_at_k)
    assert recalls[0] < recalls[1] < recalls[2] == 1.0  # all 32 lists probed = exact search
    assert recalls[0] < 0.6  # random vectors are the hard case for a coarse quantizer

    flat = faiss.IndexFlatIP(32)
    flat.add(emb)
    report = measure_recall(FaissBackend(flat), emb, q, 3, index_bytes=123)
    assert (report.recall_at_k, report.queries, report.k, report.index_bytes) == (1.0, 200, 3, 123)
    with pytest.raises(ValueError, match="at least one query"):
        measure_recall(FaissBackend(flat), emb, q[:0], 3)


def test_read_queries_jsonl_text_sample_and_errors(tmp_path):
    jsonl = tmp_path / "dev.jsonl"
    jsonl.write_text("\n".join(json.dumps({"id": i, "question": f"q{i}"}) for i in range(10)) + "\n")
    assert read_queries(jsonl) == [f"q{i}" for i in range(10)]
    sample = read_queries(jsonl, 4, seed=1)
    assert len(sample) == 4 == len(set(sample)) and sample == read_queries(jsonl, 4, seed=1)
    text = tmp_path / "q.txt"
    text.write_text("who wrote it\n\n  where is it \n")
    assert read_queries(text) == ["who wrote it", "where is it"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "ok"}\n{"answer": "x"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: no question text.*question, query, contents, text"):
        read_queries(bad)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="holds no question"):
        read_queries(empty)


def test_build_reports_recall_and_recall_tries_search_params(tmp_path, tiny_bert_dir, capsys):
    from retriever_server.cli import main

    corpus = write_corpus(synthetic_corpus(400, seed=3), tmp_path / "c.jsonl")
    questions = tmp_path / "dev.txt"
    questions.write_text("\n".join(p.text for p in synthetic_corpus(60, seed=4)) + "\n")
    out = tmp_path / "ivf"
    argv = ["build", "--corpus", str(corpus), "--model", tiny_bert_dir, "--out", str(out), "--no-progress"]
    assert main([*argv, "--index-type", "IVF8,Flat", "--recall-queries", str(questions), "--recall-k", "5"]) == 0
    recall = json.loads(capsys.readouterr().out)["recall"]
    assert recall["k"] == 5 and recall["queries"] == 60 and 0 < recall["recall_at_k"] < 1.0
    assert recall["index_bytes"] == (out / "index.faiss").stat().st_size

    tried = ["--recall-k", "5", "--search-params", "nprobe=8"]
    assert main(["recall", "--index", str(out), "--queries", str(questions), *tried]) == 0
    exhaustive = json.loads(capsys.readouterr().out)["recall"]
    assert exhaustive["recall_at_k"] == 1.0 and exhaustive["search_params"] == "nprobe=8"

    # a bad questions file fails before anything is built
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": 3}\n')
    cli_errors.one_line_error(
        main, [*argv[:-2], str(tmp_path / "never"), "--recall-queries", str(bad)], capsys, "no question text"
    )
    assert not (tmp_path / "never").exists()
