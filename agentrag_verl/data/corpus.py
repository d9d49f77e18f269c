"""The tiny original corpus and QA set (the local CPU mode's default data), the validated corpus loader, and the
QA set as row dicts (read by :func:`agentrag_verl.data.flashrag.read_questions`).

The files under ``agentrag_verl/data/tiny`` were written for this project (not taken from Wikipedia or any
dataset). They follow the layouts Search-R1 and FlashRAG use:

- ``corpus.jsonl``: one ``{"id": "0", "contents": "\\"Title\\"\\ntext"}`` object per line, i.e. the title in
  double quotes on the first line of ``contents`` and the passage text after the newline.
- ``qa.jsonl``: one ``{"id": "test_0", "question": ..., "golden_answers": [...], "metadata": {...}}`` object per
  line; ``metadata`` holds ``type`` (``"single-hop"``, ``"multi-hop"`` or ``"common-knowledge"``) and
  ``supporting_ids`` (corpus ids of the passages that support the answer).

Most passages describe invented entities (the town of Åsvik on the river Velda, the island of Caldra, the
compound quillerite, ...), so questions about them can only be answered from the corpus; multi-hop questions
chain two or three passages. The rest state common knowledge in our own words. Some titles are near-duplicates
on purpose (distractors) and some names are non-ASCII to exercise unicode handling.

Example::

    from agentrag_verl.data.corpus import load_corpus, load_qa, write_corpus, write_qa

    corpus_file = write_corpus(load_corpus(), tmp_dir / "corpus.jsonl")  # a path a retriever can index
    qa_file = write_qa(load_qa(), tmp_dir / "qa.jsonl")
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "CORPUS_PATH",
    "QA_PATH",
    "Passage",
    "parse_contents",
    "load_corpus",
    "load_qa",
    "write_corpus",
    "write_qa",
]

_DATA_DIR = Path(__file__).resolve().parent / "tiny"
CORPUS_PATH = _DATA_DIR / "corpus.jsonl"
QA_PATH = _DATA_DIR / "qa.jsonl"

# What one line looks like, quoted in error messages.
_EXAMPLES = {"corpus": '{"id": "0", "contents": "\\"Title\\"\\ntext"}'}


def parse_contents(contents: str) -> tuple[str, str]:
    """Split a Search-R1 / FlashRAG ``contents`` string into title and text.

    The expected form is ``"Title"`` (with the double quotes) on the first line, then a newline, then the text.
    A string whose first line is not wrapped in double quotes has no title: the whole string is the text.

    Args:
        contents: The ``contents`` field of a corpus line.

    Returns:
        ``(title, text)``; ``title`` is ``""`` when there is no quoted title line, and ``text`` is ``""`` when the
        string is only a quoted title.

    Example:
        >>> parse_contents('"Paris"\\nParis is the capital of France.')
        ('Paris', 'Paris is the capital of France.')
        >>> parse_contents("no title here")
        ('', 'no title here')
    """
    first, _, rest = contents.partition("\n")
    if len(first) >= 2 and first.startswith('"') and first.endswith('"'):
        return first[1:-1], rest
    return "", contents


@dataclass(frozen=True)
class Passage:
    """One corpus passage.

    Attributes:
        id: The passage id, as a string (Search-R1 and FlashRAG corpora use string ids).
        title: The title without quotes; ``""`` for a passage without a title. Must not contain a newline.
        text: The passage text.
    """

    id: str
    title: str
    text: str

    def __post_init__(self) -> None:
        if "\n" in self.title:
            raise ValueError(
                f"Passage {self.id!r}: the title {self.title!r} contains a newline, which cannot be stored in the "
                '"Title"\\ntext contents layout (the first newline ends the title). Remove the newline.'
            )

    @property
    def contents(self) -> str:
        """The ``contents`` string of the corpus layout: ``'"Title"\\ntext'``, or just the text without a title."""
        if not self.title:
            return self.text
        return f'"{self.title}"\n{self.text}'

    @classmethod
    def from_contents(cls, id: str, contents: str) -> Passage:
        """Build a passage from an id and a ``contents`` string (see :func:`parse_contents`)."""
        title, text = parse_contents(contents)
        return cls(id=id, title=title, text=text)


def _iter_json_lines(path: str | os.PathLike[str], kind: str) -> Iterable[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line of a JSON Lines file.

    Raises:
        ValueError: A line is not UTF-8, not valid JSON or not a JSON object; the message names the file and line.
        FileNotFoundError, IsADirectoryError: ``path`` is missing or a folder.
    """
    from agentrag_verl.jsonl import read_json_lines

    for lineno, obj in read_json_lines(path, f"{kind} file"):
        if not isinstance(obj, dict):
            raise ValueError(
                f"{path}, line {lineno}: expected a JSON object, got {type(obj).__name__}. Each line of a "
                f"{kind} file must be an object such as {_EXAMPLES[kind]}."
            )
        yield lineno, obj


def _bad(path: str | os.PathLike[str], lineno: int, kind: str, what: str) -> ValueError:
    return ValueError(f"{path}, line {lineno}: {what}. Each line of a {kind} file must look like {_EXAMPLES[kind]}.")


def load_corpus(path: str | os.PathLike[str] = CORPUS_PATH) -> list[Passage]:
    """Load a corpus in the Search-R1 / FlashRAG JSON Lines layout.

    Blank lines are skipped. Integer ids (some FlashRAG corpora use them) are converted to strings.

    Args:
        path: The ``.jsonl`` file; defaults to the packaged test corpus.

    Returns:
        The passages, in file order.

    Raises:
        ValueError: A line is malformed (not a JSON object, missing or mistyped ``id`` / ``contents``) or repeats
            an id; the message names the file and the line number.
    """
    passages: list[Passage] = []
    seen: dict[str, int] = {}
    for lineno, obj in _iter_json_lines(path, "corpus"):
        pid = obj.get("id")
        if isinstance(pid, int) and not isinstance(pid, bool):
            pid = str(pid)
        if not isinstance(pid, str) or not pid:
            raise _bad(path, lineno, "corpus", f'"id" must be a non-empty string, got {pid!r}')
        contents = obj.get("contents")
        if not isinstance(contents, str):
            raise _bad(path, lineno, "corpus", f'"contents" must be a string, got {type(contents).__name__}')
        if pid in seen:
            raise ValueError(
                f"{path}, line {lineno}: id {pid!r} was already used on line {seen[pid]}. Passage ids must be "
                "unique because retrievers return passages by id; renumber one of the two lines."
            )
        seen[pid] = lineno
        passages.append(Passage.from_contents(pid, contents))
    return passages


def load_qa(path: str | os.PathLike[str] = QA_PATH) -> list[dict[str, Any]]:
    """A QA set in the FlashRAG JSON Lines layout as row dicts (the packaged test QA set by default).

    The rows are read and validated by :func:`agentrag_verl.data.flashrag.read_questions` (the one reader of
    question files): ``id``, ``question``, ``golden_answers``, then the other keys (``metadata``, ...) as they are.

    Args:
        path: The ``.jsonl`` file; defaults to the packaged test QA set.

    Returns:
        The rows as dicts (:meth:`~agentrag_verl.data.flashrag.Question.as_row`), in file order.

    Raises:
        ValueError: A line is malformed (:class:`~agentrag_verl.data.flashrag.DataSourceError`); the message names
            the file and the line number.
    """
    from agentrag_verl.data.flashrag import read_questions

    p = Path(path)
    return [q.as_row() for q in read_questions(p, dataset=p.parent.name, split=p.stem)]


def _write_lines(objs: Iterable[Mapping[str, Any]], path: str | os.PathLike[str]) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8", newline="\n") as f:
        for obj in objs:
            f.write(json.dumps(obj, ensure_ascii=False) + "\n")
    return out


def write_corpus(passages: Iterable[Passage], path: str | os.PathLike[str]) -> Path:
    """Write passages as a Search-R1 / FlashRAG corpus file (UTF-8, one JSON object per line).

    Parent directories are created. Non-ASCII characters are written as is, not ``\\u`` escaped.

    Args:
        passages: The passages, e.g. from :func:`load_corpus`.
        path: Destination ``.jsonl`` file; overwritten if it exists.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    return _write_lines(({"id": p.id, "contents": p.contents} for p in passages), path)


def write_qa(rows: Iterable[Mapping[str, Any]], path: str | os.PathLike[str]) -> Path:
    """Write QA ``rows`` (e.g. from :func:`load_qa`) as a FlashRAG JSON Lines file at ``path``, the way
    :func:`write_corpus` writes passages (parents created, an existing file overwritten, non-ASCII as is).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    return _write_lines((dict(r) for r in rows), path)
