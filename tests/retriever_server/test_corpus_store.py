"""The passage store: lossless conversion, O(1) lookup, clear errors for malformed corpora."""

from __future__ import annotations

import json

import pytest

from agentrag_verl.testing import load_corpus
from retriever_server.corpus_store import CorpusStore, convert_corpus, store_is_current


def test_roundtrip_of_the_fixture_corpus(corpus_file, tmp_path):
    store = CorpusStore.open(convert_corpus(corpus_file, tmp_path / "store"))
    passages = load_corpus(corpus_file)
    assert len(store) == len(passages) == 68
    for i, p in enumerate(passages):
        assert store.document(i) == {"id": p.id, "contents": p.contents}
        assert json.loads(store.raw(i)) == store.document(i)  # raw bytes are one valid JSON object
    assert "Åsvik" in store.document(0)["contents"]  # non-ASCII kept as is
    assert store.contents(66, 100) == [p.contents for p in passages[66:]]
    assert store_is_current(tmp_path / "store", corpus_file)
    with pytest.raises(IndexError):
        store.raw(68)


def test_extra_fields_blank_lines_surrogates_and_max_passages(tmp_path):
    src = tmp_path / "c.jsonl"
    lines = [
        json.dumps({"id": "7", "contents": '"T"\nbody', "title": "T", "url": "u"}),
        "",
        json.dumps({"id": "8", "contents": "lone \ud800 surrogate"}),  # json.dumps escapes it as \ud800
        json.dumps({"id": "9", "contents": "last"}),
    ]
    src.write_text("\n".join(lines) + "\n")
    store = CorpusStore.open(convert_corpus(src, tmp_path / "s"))
    assert len(store) == 3
    assert store.document(0) == {"id": "7", "contents": '"T"\nbody', "title": "T", "url": "u"}
    assert store.document(1)["contents"] == "lone \ud800 surrogate"
    store.raw(1).decode("utf-8")  # still valid UTF-8 on disk
    assert len(CorpusStore.open(convert_corpus(src, tmp_path / "s2", max_passages=2))) == 2


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "line 2: not valid JSON"),
        ('["a list"]', 'line 2: expected an object with a string "contents"'),
        ('{"id": "1", "text": "no contents"}', 'line 2: expected an object with a string "contents"'),
        ('{"contents": "no id"}', 'line 2: the passage has no "id" field'),
        ('{"id": 1, "contents": "number id"}', 'line 2: the passage has "id": 1, not a non-empty string'),
        ('{"id": "", "contents": "empty id"}', 'line 2: the passage has "id": "", not a non-empty string'),
        ('{"id": null, "contents": "null id"}', 'line 2: the passage has "id": null'),
        ('{"id": "0", "contents": "repeated id"}', "line 2: id '0' is already used on line 1"),
    ],
)
def test_malformed_lines_name_the_line(tmp_path, line, message):
    src = tmp_path / "bad.jsonl"
    src.write_text('{"id": "0", "contents": "ok"}\n' + line + "\n")
    with pytest.raises(ValueError, match=message):
        convert_corpus(src, tmp_path / "s")


def test_missing_and_empty_corpus(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        convert_corpus(tmp_path / "nope.jsonl", tmp_path / "s")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="no passages"):
        convert_corpus(tmp_path / "empty.jsonl", tmp_path / "s")
    with pytest.raises(FileNotFoundError, match="not a corpus store"):
        CorpusStore.open(tmp_path)


def test_non_utf8_corpus_names_file_and_line(tmp_path):
    src = tmp_path / "latin1.jsonl"
    src.write_bytes(b'{"id": "0", "contents": "ok"}\n{"id": "1", "contents": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=r"latin1.jsonl, line 2: not UTF-8 \(byte 0xe9 at column 29\)"):
        convert_corpus(src, tmp_path / "s")
    assert not (tmp_path / "s" / "records.jsonl").exists()  # nothing a rerun could take for a converted store


def test_duplicate_ids_far_apart_are_found(tmp_path):
    src = tmp_path / "dup.jsonl"
    lines = [json.dumps({"id": str(i), "contents": f"passage {i}"}) for i in range(2000)]
    lines.append(json.dumps({"id": "1234", "contents": "again"}))
    src.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match="line 2001: id '1234' is already used on line 1235"):
        convert_corpus(src, tmp_path / "s")
    # max_passages stops before the repeat: the first 2000 lines are a valid corpus
    assert len(CorpusStore.open(convert_corpus(src, tmp_path / "s", max_passages=2000))) == 2000
