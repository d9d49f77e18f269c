"""On-disk passage store: a Search-R1 corpus converted once into memory-mapped records with O(1) lookup.

A Search-R1 / FlashRAG corpus is a JSON Lines file, one ``{"id": "0", "contents": "\\"Title\\"\\ntext"}`` per
line (``wiki-18.jsonl``: ~21M lines, ~14 GB). Search-R1's server loads it with ``datasets`` and indexes that
table with a Python loop per request; we convert it once into two files:

- ``records.jsonl``: each passage as compact JSON (``ensure_ascii=False``, no spaces), one per line, so the
  store itself is a valid corpus file;
- ``offsets.i64``: little-endian int64 byte offsets ``[n + 1]``; record ``i`` is ``records[offsets[i]:offsets[i+1]-1]``.

Both are memory-mapped, so opening a store costs nothing and a hit costs one slice: the server splices a record's
bytes straight into the ``/retrieve`` response without parsing them. The OS page cache holds the hot passages.

Decisions:

- Every field of a corpus line is kept (``id``, ``contents`` and any others), as the ``datasets`` row Search-R1
  returns did; ``contents`` is what gets encoded. A line must be UTF-8 JSON with a string ``contents`` and a
  non-empty string ``id``; anything else is an error that names the file and line.
- Ids must be unique: agents, rewards and evaluations cite passages by id, so two passages with one id make a
  citation ambiguous. Uniqueness is checked with one 64-bit hash per id (8 bytes per passage, 168 MB for wiki-18's
  21M, instead of GBs for a set of strings); only ids whose hashes collide are compared as strings, in a second
  pass that also finds both line numbers for the message. Hits are still addressed by row number.
- The SHA-256 of the whole source file is computed during the same pass and stored in ``store.json``: it is the
  corpus's identity in an index's fingerprint (:mod:`retriever_server.build`), whatever the file is called.
- Conversion streams line by line (memory bounded by one line, the offsets buffer and the id hashes) into
  temporary files that are renamed when complete, so an interrupted conversion is simply redone. A refused corpus
  (a bad line, a repeated id) leaves neither the temporary files nor a folder the conversion created.
- Lone UTF-16 surrogates (``"\\ud800"`` escapes in the source) are written back as JSON escapes, keeping every
  record valid UTF-8 JSON.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import mmap
import os
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .cli_common import decode_json_line

logger = logging.getLogger(__name__)

RECORDS_FILE = "records.jsonl"
OFFSETS_FILE = "offsets.i64"
META_FILE = "store.json"
FORMAT_VERSION = 1
_EXAMPLE = '{"id": "0", "contents": "\\"Title\\"\\ntext"}'


def _offsets_writer_flush(f, buf: list[int]) -> None:
    import numpy as np

    if buf:
        f.write(np.asarray(buf, dtype="<i8").tobytes())
        buf.clear()


def convert_corpus(
    corpus_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    max_passages: int | None = None,
    progress: bool = False,
) -> Path:
    """Convert a Search-R1 JSON Lines corpus into a :class:`CorpusStore` directory.

    Args:
        corpus_path: The ``.jsonl`` corpus (``{"id", "contents", ...}`` per line; blank lines are skipped).
        out_dir: Destination directory; created; an existing store in it is replaced.
        max_passages: Keep only the first this many passages (``None``: all).
        progress: Show a tqdm bar (bytes read).

    Returns:
        ``out_dir`` as a :class:`~pathlib.Path`.

    Raises:
        FileNotFoundError: ``corpus_path`` does not exist.
        ValueError: A line is not UTF-8 JSON with a string ``contents`` and a unique non-empty string ``id``; the
            message names the file and line.
    """
    src = Path(corpus_path)
    if src.is_dir():
        raise IsADirectoryError(f"Corpus {src} is a folder; pass the Search-R1 JSON Lines corpus file (--corpus).")
    if not src.is_file():
        raise FileNotFoundError(f"Corpus file {src} does not exist; pass a Search-R1 JSON Lines corpus (--corpus).")
    out = Path(out_dir)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    tmp_records, tmp_offsets = out / (RECORDS_FILE + ".tmp"), out / (OFFSETS_FILE + ".tmp")
    try:
        n, digest = _convert(src, tmp_records, tmp_offsets, max_passages, progress)
    except BaseException:  # a refused line (or an interrupt) leaves nothing behind for the corrected rerun
        tmp_records.unlink(missing_ok=True)
        tmp_offsets.unlink(missing_ok=True)
        if created and not any(out.iterdir()):
            out.rmdir()
        raise
    os.replace(tmp_records, out / RECORDS_FILE)
    os.replace(tmp_offsets, out / OFFSETS_FILE)
    stat = src.stat()
    meta = {
        "format_version": FORMAT_VERSION,
        "num_passages": n,
        "source": str(src.resolve()),
        "source_size": stat.st_size,
        "source_mtime_ns": stat.st_mtime_ns,
        "source_sha256": digest,
        "max_passages": max_passages,
    }
    (out / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    logger.info("Converted %d passages from %s into %s", n, src, out)
    return out


def _convert(
    src: Path, tmp_records: Path, tmp_offsets: Path, max_passages: int | None, progress: bool
) -> tuple[int, str]:
    """Write the store's two files (as ``tmp_records`` / ``tmp_offsets``); the passage count and the source's
    SHA-256."""
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=src.stat().st_size, unit="B", unit_scale=True, desc="corpus -> store")
    n = 0
    pos = 0
    offsets_buf: list[int] = [0]
    digest = hashlib.sha256()
    id_hashes = array("q")
    with (
        open(src, "rb") as fin,
        open(tmp_records, "wb") as frec,
        open(tmp_offsets, "wb") as foff,
        contextlib.closing(bar) if bar is not None else contextlib.nullcontext(),
    ):
        for lineno, raw in enumerate(fin, start=1):
            digest.update(raw)
            if bar is not None:
                bar.update(len(raw))
            if max_passages is not None and n >= max_passages:
                for block in iter(lambda: fin.read(1 << 20), b""):  # the rest only counts for the source's hash
                    digest.update(block)
                break
            if not raw.strip():
                continue
            record = _parse_line(raw, src, lineno)
            id_hashes.append(hash(record["id"]))
            data = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "backslashreplace")
            frec.write(data + b"\n")
            pos += len(data) + 1
            offsets_buf.append(pos)
            n += 1
            if len(offsets_buf) >= 65536:
                _offsets_writer_flush(foff, offsets_buf)
        _offsets_writer_flush(foff, offsets_buf)
    if n == 0:
        raise ValueError(f"Corpus {src} has no passages; each line must look like {_EXAMPLE}.")
    _check_unique_ids(src, id_hashes, max_passages)
    return n, digest.hexdigest()


def _parse_line(raw: bytes, path: Path, lineno: int) -> dict[str, Any]:
    record = decode_json_line(raw, path, lineno)
    if not isinstance(record, dict) or not isinstance(record.get("contents"), str):
        got = type(record.get("contents")).__name__ if isinstance(record, dict) else type(record).__name__
        raise ValueError(
            f'{path}, line {lineno}: expected an object with a string "contents" field (got {got}). Each corpus '
            f"line must look like {_EXAMPLE}."
        )
    rid = record.get("id")
    if not isinstance(rid, str) or not rid:
        what = 'has no "id" field' if "id" not in record else f'has "id": {json.dumps(rid)}, not a non-empty string'
        raise ValueError(
            f"{path}, line {lineno}: the passage {what}. Every corpus line needs a unique, non-empty string id, as "
            f"in {_EXAMPLE}; fix the line (ids are what agents and rewards cite)."
        )
    return record


def _check_unique_ids(path: Path, id_hashes: array, max_passages: int | None) -> None:
    """Raise naming a repeated id and both its lines; a 64-bit hash collision alone is not a repeat."""
    import numpy as np

    hashes = np.frombuffer(id_hashes, dtype=np.int64)
    ordered = np.sort(hashes)
    suspects = set(ordered[1:][ordered[1:] == ordered[:-1]].tolist())
    if not suspects:
        return
    seen: dict[str, int] = {}
    n = 0
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if max_passages is not None and n >= max_passages:
                break
            if not raw.strip():
                continue
            n += 1
            rid = json.loads(raw)["id"]
            if hash(rid) not in suspects:
                continue
            if rid in seen:
                raise ValueError(
                    f"{path}, line {lineno}: id {rid!r} is already used on line {seen[rid]}. Passage ids must be "
                    "unique (agents and rewards cite passages by id); renumber one of them."
                )
            seen[rid] = lineno


def store_is_current(store_dir: str | os.PathLike[str], corpus_path: str | os.PathLike[str]) -> bool:
    """Whether ``store_dir`` holds a complete store converted from the current version of ``corpus_path``."""
    meta_path = Path(store_dir) / META_FILE
    if not meta_path.is_file() or not (Path(store_dir) / RECORDS_FILE).is_file():
        return False
    try:
        meta = json.loads(meta_path.read_text())
    except ValueError:
        return False
    stat = Path(corpus_path).stat()
    return (
        meta.get("format_version") == FORMAT_VERSION
        and meta.get("source_size") == stat.st_size
        and meta.get("source_mtime_ns") == stat.st_mtime_ns
        and meta.get("max_passages") is None
    )


class CorpusStore:
    """Read-only, memory-mapped passage records with O(1) access by row number.

    Example:
        >>> store = CorpusStore.open("index/corpus")  # doctest: +SKIP
        >>> store.document(0)["contents"]  # doctest: +SKIP
        '"Åsvik"\\nÅsvik (also spelled Asvik) is ...'
    """

    def __init__(self, directory: str | os.PathLike[str]):
        import numpy as np

        self.directory = Path(directory)
        records = self.directory / RECORDS_FILE
        offsets = self.directory / OFFSETS_FILE
        if not records.is_file() or not offsets.is_file():
            raise FileNotFoundError(
                f"{self.directory} is not a corpus store (missing {RECORDS_FILE} or {OFFSETS_FILE}); build one with "
                "`python -m retriever_server build` or retriever_server.corpus_store.convert_corpus()."
            )
        # A plain ndarray over the memory map: indexing np.memmap itself runs Python code for every lookup.
        self._offsets = np.asarray(np.memmap(offsets, dtype="<i8", mode="r"))
        self._file = open(records, "rb")  # noqa: SIM115 - kept open for the mmap's lifetime
        self._mmap = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        if len(self._offsets) < 2 or int(self._offsets[-1]) != len(self._mmap):
            raise ValueError(
                f"Corpus store {self.directory} is inconsistent (offsets do not cover {RECORDS_FILE}); delete the "
                "directory and convert the corpus again."
            )
        self._count = len(self._offsets) - 1

    @classmethod
    def open(cls, directory: str | os.PathLike[str]) -> CorpusStore:
        """Open a store directory written by :func:`convert_corpus`."""
        return cls(directory)

    def __len__(self) -> int:
        return self._count

    def raw(self, i: int) -> bytes:
        """Record ``i`` as UTF-8 JSON bytes (no trailing newline).

        Raises:
            IndexError: ``i`` is outside ``[0, len(self))``.
        """
        if not 0 <= i < self._count:
            raise IndexError(f"passage row {i} is outside the store (0..{self._count - 1})")
        offsets = self._offsets
        return self._mmap[int(offsets[i]) : int(offsets[i + 1]) - 1]

    def document(self, i: int) -> dict[str, Any]:
        """Record ``i`` as a dict (``id``, ``contents`` and any other fields of the corpus line)."""
        return json.loads(self.raw(i))

    def contents(self, start: int, stop: int) -> list[str]:
        """The ``contents`` strings of rows ``[start, stop)``, the texts an index build encodes."""
        return [self.document(i)["contents"] for i in range(start, min(stop, len(self)))]

    def release(self, start: int, stop: int) -> None:
        """Drop rows ``[start, stop)`` from this process's resident memory (``madvise(MADV_DONTNEED)``).

        The pages are clean file pages, so nothing is lost: a later read maps them in again. An index build calls
        this after each chunk so that streaming a 14 GB corpus does not leave 14 GB of it counted in its RSS.
        """
        stop = min(stop, len(self))
        if start >= stop or not hasattr(mmap, "MADV_DONTNEED"):
            return
        begin = int(self._offsets[start]) // mmap.PAGESIZE * mmap.PAGESIZE
        self._mmap.madvise(mmap.MADV_DONTNEED, begin, int(self._offsets[stop]) - begin)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(len(self)):
            yield self.document(i)

    def close(self) -> None:
        """Release the memory maps."""
        self._mmap.close()
        self._file.close()
