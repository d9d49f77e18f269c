"""The mini-wiki training questions: disjoint from the test sets, well-formed, and what the generator writes.

The test sets must measure searching and reading, not recall of trained facts, so no training question may be
answered by a passage that supports a test question (see examples/mini_wiki/README.md). Stdlib + the project's
answer normalizer only; about a second.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agentrag_verl.metrics import normalize_answer

DATA = Path(__file__).resolve().parents[2] / "examples" / "mini_wiki"
SPLITS = ("single_hop", "multi_hop", "common")
N_ORIGINAL = 204  # passages "0".."203": the ones the test sets are written against


def read(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def mentions(text: str, phrase: str) -> bool:
    """``phrase`` occurs in ``text`` as whole words, case-insensitively."""
    return re.search(r"(?<!\w)" + re.escape(phrase) + r"(?!\w)", text, re.IGNORECASE) is not None


def text_of(contents: str) -> str:
    return contents.partition("\n")[2]


def title_of(contents: str) -> str:
    return re.sub(r" \(.*\)$", "", contents.partition("\n")[0].strip('"'))


@pytest.fixture(scope="module")
def corpus() -> dict[str, str]:
    return {r["id"]: r["contents"] for r in read(DATA / "corpus.jsonl")}


@pytest.fixture(scope="module")
def test_rows() -> dict[str, list[dict]]:
    return {s: read(DATA / s / "test.jsonl") for s in SPLITS}


@pytest.fixture(scope="module")
def train_rows() -> dict[str, list[dict]]:
    return {s: read(DATA / s / "train.jsonl") for s in SPLITS}


@pytest.fixture(scope="module")
def test_ids(test_rows) -> set[str]:
    return {i for rows in test_rows.values() for r in rows for i in r["metadata"]["supporting_ids"]}


@pytest.fixture(scope="module")
def test_text(corpus, test_ids) -> str:
    return "\n".join(corpus[i] for i in sorted(test_ids, key=int))


def corpus_questions(train_rows) -> list[dict]:
    return train_rows["single_hop"] + train_rows["multi_hop"]


# (a) disjointness ------------------------------------------------------------------------------------------------


def test_no_training_question_uses_a_test_supporting_passage(train_rows, test_ids):
    for split in SPLITS:
        for r in train_rows[split]:
            assert not set(r["metadata"]["supporting_ids"]) & test_ids, (split, r["id"])


def test_corpus_questions_are_about_the_new_passages_only(train_rows, corpus):
    for r in corpus_questions(train_rows):
        assert all(N_ORIGINAL <= int(i) < len(corpus) for i in r["metadata"]["supporting_ids"]), r["id"]


def test_no_training_gold_answer_occurs_in_a_test_supporting_passage(train_rows, test_text):
    for r in corpus_questions(train_rows):
        for gold in r["golden_answers"]:
            assert not mentions(test_text, gold), (r["id"], gold)


def test_no_new_entity_name_occurs_in_the_original_passages(corpus, test_text):
    original = "\n".join(corpus[str(i)] for i in range(N_ORIGINAL))
    for i in range(N_ORIGINAL, len(corpus)):
        name = title_of(corpus[str(i)])
        assert not mentions(test_text, name), name
        assert not mentions(original, name), name


def test_common_knowledge_golds_are_disjoint(train_rows, test_rows):
    test_golds = {normalize_answer(g) for r in test_rows["common"] for g in r["golden_answers"]}
    for r in train_rows["common"]:
        clash = {normalize_answer(g) for g in r["golden_answers"]} & test_golds
        assert not clash, (r["id"], clash)


def test_question_texts_are_unique_across_all_files(train_rows, test_rows):
    questions = [r["question"] for rows in (*train_rows.values(), *test_rows.values()) for r in rows]
    assert len(questions) == len(set(questions))
    ids = [r["id"] for rows in (*train_rows.values(), *test_rows.values()) for r in rows]
    assert len(ids) == len(set(ids))


# (b) schema the scripted teacher relies on -----------------------------------------------------------------------


def test_hops_are_grounded_and_chained(train_rows, corpus):
    for split, typ in (("single_hop", "single-hop"), ("multi_hop", "multi-hop")):
        for i, r in enumerate(train_rows[split]):
            md = r["metadata"]
            assert r["id"] == f"{split}_train_{i}" and md["type"] == typ
            hops = md["hops"]
            assert len(hops) == 1 if split == "single_hop" else len(hops) >= 2, r["id"]
            assert md["supporting_ids"] == [h["doc_id"] for h in hops], r["id"]
            assert hops[-1]["answer"] == r["golden_answers"][0], r["id"]
            for h in hops:
                assert set(h) == {"query", "answer", "fact", "doc_id"}, r["id"]
                assert h["answer"] in text_of(corpus[h["doc_id"]]), (r["id"], h)
                assert h["answer"] in h["fact"] and h["fact"].endswith("."), (r["id"], h)
                assert h["query"].endswith("?"), (r["id"], h)
            for prev, nxt in zip(hops, hops[1:], strict=False):
                assert prev["answer"] in nxt["query"], (r["id"], nxt)  # each query names the previous answer


def test_common_rows(train_rows, corpus):
    for i, r in enumerate(train_rows["common"]):
        md = r["metadata"]
        assert r["id"] == f"common_train_{i}" and md["type"] == "common-knowledge"
        assert r["golden_answers"][0] in md["fact"], r["id"]
        for pid in md["supporting_ids"]:
            assert int(pid) < N_ORIGINAL and any(mentions(corpus[pid], g) for g in r["golden_answers"]), r["id"]


# (c) sizes -------------------------------------------------------------------------------------------------------


def test_counts(train_rows, corpus):
    n = {s: len(rows) for s, rows in train_rows.items()}
    assert n["single_hop"] >= 120 and n["multi_hop"] >= 100 and n["common"] >= 100
    assert sum(n.values()) >= 320
    assert 120 <= len(corpus) - N_ORIGINAL <= 180
    assert list(corpus) == [str(i) for i in range(len(corpus))]


# (d) + (e) the committed files are the generator's output (it also pins passages 0-203 by hash) --------------------


def test_generator_check_passes():
    result = subprocess.run(
        [sys.executable, str(DATA / "make_train.py"), "--check"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
