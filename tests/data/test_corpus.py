"""Tests for the packaged test corpus / QA set and their loader (agentrag_verl.data.corpus)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from agentrag_verl.data.corpus import (
    CORPUS_PATH,
    QA_PATH,
    Passage,
    load_corpus,
    load_qa,
    parse_contents,
    write_corpus,
    write_qa,
)

QA_TYPES = {"single-hop", "multi-hop", "common-knowledge"}


@pytest.fixture(scope="module")
def corpus() -> list[Passage]:
    return load_corpus()


@pytest.fixture(scope="module")
def qa() -> list[dict]:
    return load_qa()


@pytest.fixture(scope="module")
def by_id(corpus: list[Passage]) -> dict[str, Passage]:
    return {p.id: p for p in corpus}


def test_packaged_files_exist_and_load(corpus: list[Passage], qa: list[dict]) -> None:
    assert CORPUS_PATH.is_file() and QA_PATH.is_file()
    assert 60 <= len(corpus) <= 80
    assert 24 <= len(qa) <= 30
    assert load_corpus(str(CORPUS_PATH)) == corpus  # str paths work too


def test_ids_unique(corpus: list[Passage], qa: list[dict]) -> None:
    assert len({p.id for p in corpus}) == len(corpus)
    assert len({row["id"] for row in qa}) == len(qa)
    assert all(isinstance(p.id, str) for p in corpus)


def test_corpus_lines_follow_the_layout() -> None:
    for line in CORPUS_PATH.read_text(encoding="utf-8").splitlines():
        obj = json.loads(line)
        assert set(obj) == {"id", "contents"}
        title, text = parse_contents(obj["contents"])
        assert obj["contents"] == f'"{title}"\n{text}'


def test_every_passage_has_title_and_short_text(corpus: list[Passage]) -> None:
    for p in corpus:
        assert p.title.strip() and p.text.strip(), p.id
        assert "\n" not in p.text, p.id
        assert len(p.text.split()) <= 60, p.id
        assert parse_contents(p.contents) == (p.title, p.text)


def test_corpus_has_distractors_and_unicode(corpus: list[Passage]) -> None:
    titles = [p.title for p in corpus]
    assert any(not t.isascii() for t in titles)
    # Near-duplicate titles: several titles share their first word.
    first_words = Counter(t.split()[0].strip(",") for t in titles)
    assert sum(n > 1 for n in first_words.values()) >= 3


def test_qa_rows_well_formed(qa: list[dict], by_id: dict[str, Passage]) -> None:
    counts = Counter(row["metadata"]["type"] for row in qa)
    assert set(counts) == QA_TYPES
    assert any(len(row["golden_answers"]) > 1 for row in qa)  # some aliases
    assert {"yes", "no"} <= {a for row in qa for a in row["golden_answers"]}
    for row in qa:
        assert row["id"].startswith("test_")
        sup = row["metadata"]["supporting_ids"]
        assert sup and all(s in by_id for s in sup), row["id"]


def test_golden_answers_supported(qa: list[dict], by_id: dict[str, Passage]) -> None:
    for row in qa:
        answers = row["golden_answers"]
        if answers in (["yes"], ["no"]):
            continue  # yes/no answers are judged, not quoted
        support = [by_id[s].contents.casefold() for s in row["metadata"]["supporting_ids"]]
        for answer in answers:
            assert any(answer.casefold() in c for c in support), (row["id"], answer)


def test_multi_hop_questions_need_two_passages(qa: list[dict], by_id: dict[str, Passage]) -> None:
    multi = [row for row in qa if row["metadata"]["type"] == "multi-hop"]
    assert multi
    for row in multi:
        sup = row["metadata"]["supporting_ids"]
        assert len(set(sup)) >= 2 and all(s in by_id for s in sup), row["id"]


def test_round_trip(tmp_path, corpus: list[Passage], qa: list[dict]) -> None:
    corpus_file = write_corpus(corpus, tmp_path / "sub" / "corpus.jsonl")
    qa_file = write_qa(qa, tmp_path / "sub" / "qa.jsonl")
    assert corpus_file.is_file() and qa_file.is_file()
    assert load_corpus(corpus_file) == corpus
    assert load_qa(qa_file) == qa
    # Byte-identical to the packaged files.
    assert corpus_file.read_bytes() == CORPUS_PATH.read_bytes()
    assert qa_file.read_bytes() == QA_PATH.read_bytes()


def test_unicode_survives_round_trip(tmp_path, corpus: list[Passage]) -> None:
    names = ["Åsvik", "Mérida-Lune", "Zoë Lindqvist", "Piet Sandström", "São Paulo"]
    by_title = {p.title: p for p in corpus}
    assert all(n in by_title for n in names)
    path = write_corpus([by_title[n] for n in names], tmp_path / "u.jsonl")
    assert "Åsvik" in path.read_text(encoding="utf-8")  # written as is, not \u-escaped
    assert [p.title for p in load_corpus(path)] == names
    rows = [{"id": "u", "question": "Où est Åsvik?", "golden_answers": ["Åsvik", "Asvik"]}]
    assert load_qa(write_qa(rows, tmp_path / "u_qa.jsonl")) == rows


def test_parse_contents_without_title() -> None:
    assert parse_contents("plain text, no title") == ("", "plain text, no title")
    assert parse_contents('"Title only"') == ("Title only", "")
    assert parse_contents('"T"\nline one\nline two') == ("T", "line one\nline two")
    assert parse_contents('"') == ("", '"')
    p = Passage.from_contents("7", "no title")
    assert (p.title, p.text, p.contents) == ("", "no title", "no title")
    assert Passage("1", "Åsvik", "x").contents == '"Åsvik"\nx'
    with pytest.raises(ValueError, match="newline"):
        Passage("1", "bad\ntitle", "x")


def test_blank_lines_and_int_ids(tmp_path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": 3, "contents": "\\"A\\"\\nb"}\n\n', encoding="utf-8")
    assert load_corpus(path) == [Passage("3", "A", "b")]


@pytest.mark.parametrize(
    ("loader", "bad_line", "match"),
    [
        (load_corpus, "{not json", "not valid JSON"),
        (load_corpus, '["a list"]', "expected a JSON object"),
        (load_corpus, '{"contents": "\\"T\\"\\nx"}', '"id"'),
        (load_corpus, '{"id": "9", "contents": 5}', '"contents"'),
        (load_corpus, '{"id": "0", "contents": "\\"T\\"\\nx"}', "already used on line 1"),
        (load_qa, "{not json", "not valid JSON"),
        (load_qa, '{"id": "q", "golden_answers": ["a"]}', '"question"'),
        (load_qa, '{"id": "q", "question": "?", "golden_answers": "a"}', '"golden_answers"'),
        (load_qa, '{"id": "q", "question": "?", "golden_answers": []}', '"golden_answers"'),
        (load_qa, '{"id": "q", "question": "?", "golden_answers": ["a"], "metadata": 1}', '"metadata"'),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, loader, bad_line: str, match: str) -> None:
    good = (
        '{"id": "0", "contents": "\\"T\\"\\nx"}'
        if loader is load_corpus
        else '{"id": "q0", "question": "?", "golden_answers": ["a"]}'
    )
    path = tmp_path / "bad.jsonl"
    path.write_text(f"{good}\n\n{bad_line}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=match) as info:
        loader(path)
    assert f"{path}, line 3" in str(info.value)


def test_conftest_mini_corpus_fixture(mini_corpus):
    """The shared fixture writes both files in FlashRAG layout where other tests can point servers at them."""
    corpus_path, qa_path = mini_corpus
    assert [p.id for p in load_corpus(corpus_path)] == [p.id for p in load_corpus()]
    assert {"id", "question", "golden_answers"} <= set(load_qa(qa_path)[0])
