"""``agentrag_verl.jsonl``: the resumable store loses and repeats nothing across a kill -9, cuts a torn last line,
refuses a second writer and corrupt lines; the reader leaves a file being written alone. Real files throughout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agentrag_verl.jsonl import JsonLinesError, JsonlLockedError, JsonlStore, read_json_lines, read_records

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
"""Child processes import this checkout's package."""


def by_id(record):
    return record["id"]


def ids_on_disk(path: Path) -> list[str]:
    """The ids of every line, in file order (each line must be complete JSON)."""
    return [json.loads(line)["id"] for line in path.read_text(encoding="utf-8").splitlines()]


def test_torn_last_line_is_cut_and_the_record_done_again(tmp_path):
    path = tmp_path / "out" / "results.jsonl"  # the folder is created
    with JsonlStore(path, by_id) as store:
        store.append({"id": "a", "text": "é"})  # non-ASCII stays readable (ensure_ascii=False)
        store.append({"id": "b"})
    whole = path.read_bytes()
    with open(path, "ab") as f:
        f.write(b'{"id": "c", "te')  # a kill in the middle of the third write
    with JsonlStore(path, by_id) as store:
        assert store.done == {"a", "b"} and store.repaired_bytes == len(b'{"id": "c", "te')
        assert path.read_bytes() == whole  # cut back to the last complete line
        assert store.records["a"] == {"id": "a", "text": "é"}
        store.append({"id": "c"})
    assert ids_on_disk(path) == ["a", "b", "c"]
    assert "é" in path.read_text(encoding="utf-8")


WRITER = textwrap.dedent(
    """
    import sys
    from agentrag_verl.jsonl import JsonlStore

    store = JsonlStore(sys.argv[1], key=lambda r: r["id"])
    for i in range(int(sys.argv[2])):
        key = f"q{i}"
        if key not in store:
            store.append({"id": key, "pad": "x" * 4096})
            print(key, flush=True)  # acknowledged: append returned, so the line is on disk
    """
)


def test_kill_9_mid_run_then_resume_loses_and_repeats_nothing(tmp_path):
    path = tmp_path / "results.jsonl"
    endless = 10**9  # the writer never finishes on its own: it is killed in the middle of its run
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(endless)], stdout=subprocess.PIPE, text=True, env=ENV
    )
    acknowledged = []
    deadline = time.monotonic() + 60
    while len(acknowledged) < 20 and time.monotonic() < deadline:  # let some records finish, then kill
        line = child.stdout.readline()
        if not line:
            break
        acknowledged.append(line.strip())
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()
    assert len(acknowledged) == 20, "the writer did not start"
    # The killed writer held the lock; the kernel released it with the process, so a rerun opens the file.
    with JsonlStore(path, by_id) as store:
        assert set(acknowledged) <= store.done  # nothing acknowledged was lost
        done = len(store.done)
    # The rerun (same program, now with an end) writes only what is missing.
    total = done + 30
    subprocess.run([sys.executable, "-c", WRITER, str(path), str(total)], check=True, env=ENV, capture_output=True)
    ids = ids_on_disk(path)
    assert sorted(ids) == sorted(f"q{i}" for i in range(total))  # every record once: none lost, none repeated
    assert ids[: len(acknowledged)] == acknowledged  # earlier records kept in place


def test_one_writer_at_a_time(tmp_path):
    path = tmp_path / "plans.jsonl"
    with JsonlStore(path, by_id):
        with pytest.raises(JsonlLockedError, match="another job"):
            JsonlStore(path, by_id)
        code = f"from agentrag_verl.jsonl import JsonlStore; JsonlStore({str(path)!r}, key=lambda r: r['id'])"
        other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV)
        assert other.returncode != 0 and "JsonlLockedError" in other.stderr  # another process too
        assert read_records(path, by_id) == {}  # readers are never locked out
    with JsonlStore(path, by_id) as store:  # closed: free again
        store.append({"id": "a"})


def test_a_key_is_written_once(tmp_path):
    path = tmp_path / "r.jsonl"
    with JsonlStore(path, by_id) as store:
        store.append({"id": "a", "v": 1})
        with pytest.raises(ValueError, match="already holds a record for 'a'"):
            store.append({"id": "a", "v": 2})
    assert ids_on_disk(path) == ["a"]
    path.write_text('{"id": "a", "v": 1}\n{"id": "a", "v": 2}\n')  # a file repeated by hand: the first wins
    with JsonlStore(path, by_id) as store:
        assert store.records == {"a": {"id": "a", "v": 1}}
    assert read_records(path, by_id) == {"a": {"id": "a", "v": 1}}


def test_corrupt_lines_are_named_and_nothing_is_changed(tmp_path):
    path = tmp_path / "trees.jsonl"
    text = '{"id": "a"}\nnot json\n{"id": "b"}\n{"id": "c", "tr'
    path.write_text(text)
    with pytest.raises(JsonLinesError, match=r"trees.jsonl, line 2: not valid JSON .*delete that line \(redo it\)"):
        JsonlStore(path, by_id, redo="redo it")
    assert path.read_text() == text  # the torn tail is not cut either: the file is left for the user to fix
    path.write_text('{"id": "a"}\n{"uid": "b"}\n')
    with pytest.raises(JsonLinesError, match=r"line 2: not a record of this file \(no key: KeyError"):
        JsonlStore(path, by_id)
    path.write_bytes(b'{"id": "a"}\n{"id": "caf\xe9"}\n')
    with pytest.raises(JsonLinesError, match=r"line 2: not UTF-8 \(byte 0xe9 at column 12\)"):
        read_records(path, by_id)


def test_reader_skips_a_line_being_written_and_leaves_the_file(tmp_path):
    path = tmp_path / "r.jsonl"
    assert read_records(path, by_id) == {}  # no file yet: nothing done
    path.write_text('{"id": "a"}\n\n{"id": "b"}\n{"id": "c", "par')
    assert list(read_records(path, by_id)) == ["a", "b"]  # blank lines skipped
    assert path.read_text().endswith('"par')


def test_keys_only_store(tmp_path):
    path = tmp_path / "trees.jsonl"
    with JsonlStore(path, by_id, keep_records=False) as store:
        store.append({"id": "a", "tree": {"big": True}})
        assert "a" in store and len(store) == 1 and store.records == {}
    with JsonlStore(path, by_id, keep_records=False) as store:
        assert store.done == {"a"} and store.records == {}
    store.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        store.append({"id": "b"})


def test_read_json_lines_input_files(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": "1"}\n\n{"id": "2"}\n')  # a byte-order mark on line 1 is fine
    assert list(read_json_lines(path, "--data")) == [(1, {"id": "1"}), (3, {"id": "2"})]
    with pytest.raises(FileNotFoundError, match="--data .*gone.jsonl does not exist"):
        list(read_json_lines(tmp_path / "gone.jsonl", "--data"))
    path.write_text('{"id": "1"}\n{"id": \n')
    with pytest.raises(JsonLinesError, match=r"qa.jsonl, line 2: not valid JSON .* fix or delete the line"):
        list(read_json_lines(path, "--data"))
