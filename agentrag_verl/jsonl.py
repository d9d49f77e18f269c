"""JSON Lines: reading input files with errors that name the file and the line, and the one append-only, crash-safe,
resumable store every offline job writes to (eval results, demonstrations, Search-P1 planner caches, ReasonRAG trees).

:class:`JsonlStore` keeps one record per key (e.g. ``"<dataset>/<id>"``) and guarantees:

- **Durable appends.** A record is one line written in one call, flushed and fsynced before :meth:`~JsonlStore.append`
  returns; a record counts as done once its whole line, newline included, is on disk.
- **Crash-safe resume.** A writer killed in the middle of a write leaves at most one partial last line (no newline).
  Opening the store cuts it off with a warning (that record is done again, once) and reads every complete line as
  done, so a rerun skips exactly the finished records: nothing is lost, nothing is done twice.
- **No duplicates.** Appending a key the file already holds raises; a file that repeats a key (edited by hand)
  keeps the first record and logs the repeat.
- **One writer.** An open store holds an exclusive lock (``flock``) on its file; a second writer (another process,
  or a second store on the same file) fails at once with :class:`JsonlLockedError` instead of interleaving lines.

:func:`read_records` reads a store's file without writing: it ignores a partial last line and never changes the file,
so it may run beside a writer. :func:`read_json_lines` reads an *input* file (FlashRAG QA files, corpora) strictly.

>>> import pathlib, tempfile
>>> path = pathlib.Path(tempfile.mkdtemp()) / "results.jsonl"
>>> with JsonlStore(path, key=lambda record: record["id"]) as store:
...     store.append({"id": "q1", "em": 1.0})
>>> _ = path.open("a").write('{"id": "q2", "em": 1')  # killed in the middle of a write
>>> with JsonlStore(path, key=lambda record: record["id"]) as store:
...     sorted(store.done), store.repaired_bytes
(['q1'], 20)
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from agentrag_verl.cli_common import input_file

__all__ = [
    "JsonLinesError",
    "JsonlLockedError",
    "JsonlStore",
    "decode_json_line",
    "read_json_lines",
    "read_records",
]

logger = logging.getLogger(__name__)

Key = Callable[[Mapping[str, Any]], str]
"""The key of a record, e.g. ``lambda r: f"{r['dataset']}/{r['id']}"``."""

_FIX_INPUT = "fix or delete the line"


class JsonLinesError(ValueError):
    """A line of a JSON Lines file that is not UTF-8 JSON (or, in a store, has no key); the message names the file
    and the line and says how to fix it."""


class JsonlLockedError(RuntimeError):
    """Another writer holds the store's file."""


def decode_json_line(raw: bytes, path: str | os.PathLike[str], lineno: int, fix: str = _FIX_INPUT) -> Any:
    """The JSON value on one line (bytes; a UTF-8 byte-order mark is allowed on line 1).

    Args:
        raw: The line's bytes.
        path: The file, for the message.
        lineno: The line number (1-based), for the message.
        fix: How to fix a bad line (ends the message), e.g. "fix or delete the line".

    Raises:
        JsonLinesError: Not UTF-8, or not JSON.

    >>> decode_json_line(b'{"id": 1}\\n', "qa.jsonl", 1)
    {'id': 1}
    >>> decode_json_line(b'{"id": 1', "qa.jsonl", 2)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    agentrag_verl.jsonl.JsonLinesError: qa.jsonl, line 2: not valid JSON (Expecting ',' delimiter at column 9); ...
    """
    if lineno == 1:
        raw = raw.removeprefix(b"\xef\xbb\xbf")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise JsonLinesError(
            f"{path}, line {lineno}: not UTF-8 (byte {raw[e.start]:#04x} at column {e.start + 1}); save the file as "
            f"UTF-8 (e.g. iconv -f latin1 -t utf-8) or {fix}"
        ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise JsonLinesError(
            f"{path}, line {lineno}: not valid JSON ({e.msg} at column {e.colno}); each line must be one complete "
            f"JSON object: {fix}"
        ) from None


def read_json_lines(path: str | os.PathLike[str], flag: str) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for each non-blank line of an input JSON Lines file.

    Args:
        path: The file.
        flag: The command-line flag or name of the file, for the messages.

    Raises:
        FileNotFoundError, IsADirectoryError: ``path`` is missing or a folder (naming ``flag``).
        JsonLinesError: A line is not UTF-8 JSON (naming the file and line).
    """
    p = input_file(path, flag)
    with open(p, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if raw.strip():
                yield lineno, decode_json_line(raw, p, lineno)


def _complete_lines(f: Any) -> Iterator[tuple[int, int, bytes | None]]:
    """``(line number, start offset, line)`` of each line of a binary file; ``line`` is None for a partial last line
    (no newline)."""
    offset = 0
    for lineno, raw in enumerate(f, start=1):
        yield lineno, offset, raw if raw.endswith(b"\n") else None
        offset += len(raw)


def _parse(raw: bytes, path: Path, lineno: int, key: Key, redo: str) -> tuple[str, dict[str, Any]]:
    fix = f"delete that line ({redo}) and rerun"
    record = decode_json_line(raw, path, lineno, fix)
    try:
        return str(key(record)), record
    except (KeyError, TypeError, IndexError) as e:
        raise JsonLinesError(
            f"{path}, line {lineno}: not a record of this file (no key: {type(e).__name__}: {e}); {fix}"
        ) from None


def read_records(
    path: str | os.PathLike[str], key: Key, *, redo: str = "that record is then written again"
) -> dict[str, dict[str, Any]]:
    """The records of a store's file by key, read without writing (see the module docstring).

    A missing file has no records; a partial last line (a writer mid-write, or killed) is ignored and left as it is;
    a repeated key keeps the first record.

    Args:
        path: The file.
        key: The key of a record.
        redo: What deleting a corrupt line means, for the message (e.g. "its question is then evaluated again").

    Raises:
        JsonLinesError: A complete line is not UTF-8 JSON or has no key.
    """
    p = Path(path)
    records: dict[str, dict[str, Any]] = {}
    if not p.exists():
        return records
    with open(p, "rb") as f:
        for lineno, _, raw in _complete_lines(f):
            if raw is None or not raw.strip():
                continue
            k, record = _parse(raw, p, lineno, key, redo)
            if k in records:
                logger.warning("%s, line %d repeats %s; keeping the first record", p, lineno, k)
                continue
            records[k] = record
    return records


class JsonlStore:
    """An append-only JSONL file of one record per key, crash-safe and resumable (see the module docstring).

    Use it as a context manager, or call :meth:`close`.

    Args:
        path: The file (created with its folders).
        key: The key of a record.
        redo: What deleting a corrupt line means, for the message (e.g. "its question is then evaluated again").
        keep_records: Keep every record in :attr:`records`; False keeps only the keys (:attr:`done`), for files of
            large records that the job does not read back.

    Attributes:
        path: The file.
        done: The keys on disk.
        records: ``{key: record}`` on disk (empty when ``keep_records`` is False).
        repaired_bytes: Bytes of the partial last line cut off on open (0 when the file was whole).

    Raises:
        JsonlLockedError: Another writer has the file open.
        JsonLinesError: A complete line is not UTF-8 JSON or has no key (nothing is changed then).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        key: Key,
        *,
        redo: str = "that record is then written again",
        keep_records: bool = True,
    ) -> None:
        self.path = Path(path)
        self.key = key
        self.done: set[str] = set()
        self.records: dict[str, dict[str, Any]] = {}
        self.repaired_bytes = 0
        self._keep = keep_records
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: Any = open(self.path, "ab")  # noqa: SIM115 - closed in close()
        try:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.close()
            self._file = None
            raise JsonlLockedError(
                f"{self.path} is being written by another job (it holds the file's lock); wait for it to finish, or "
                "write to another file (another --out)"
            ) from None
        try:
            self._load(redo)
        except BaseException:
            self.close()
            raise

    def _load(self, redo: str) -> None:
        torn_at = None
        with open(self.path, "rb") as f:
            for lineno, offset, raw in _complete_lines(f):
                if raw is None:
                    torn_at = offset
                    break
                if not raw.strip():
                    continue
                k, record = _parse(raw, self.path, lineno, self.key, redo)
                if k in self.done:
                    logger.warning("%s, line %d repeats %s; keeping the first record", self.path, lineno, k)
                    continue
                self.done.add(k)
                if self._keep:
                    self.records[k] = record
        if torn_at is not None:
            self.repaired_bytes = self.path.stat().st_size - torn_at
            logger.warning(
                "%s: cutting off a partial last line (%d bytes) left by an interrupted write; that record is done "
                "again",
                self.path,
                self.repaired_bytes,
            )
            self._file.truncate(torn_at)

    def __contains__(self, key: object) -> bool:
        return key in self.done

    def __len__(self) -> int:
        return len(self.done)

    def append(self, record: dict[str, Any]) -> None:
        """Write one record durably (one line, flushed and fsynced).

        Raises:
            ValueError: The file already holds a record with this key, or the store is closed.
        """
        if self._file is None:
            raise ValueError(f"{self.path}: the store is closed; open a new JsonlStore to append")
        k = str(self.key(record))
        if k in self.done:
            raise ValueError(f"{self.path} already holds a record for {k!r}; a key is written once")
        self._file.write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
        self._file.flush()
        os.fsync(self._file.fileno())
        self.done.add(k)
        if self._keep:
            self.records[k] = record

    def close(self) -> None:
        """Release the lock and close the file (idempotent)."""
        if self._file is not None:
            try:
                fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            finally:
                self._file.close()
                self._file = None

    def __enter__(self) -> JsonlStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
