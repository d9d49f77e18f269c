"""Evaluation questions in the FlashRAG layout (``{"id", "question", "golden_answers", ...}`` per JSONL line).

A dataset is named by a spec:

- ``path/to/test.jsonl``: one file; the dataset name is its folder's name (FlashRAG_datasets keeps
  ``<dataset>/<split>.jsonl``), or the file stem when the folder name says nothing (``.``);
- ``name=path/to/file.jsonl``: an explicit name;
- ``path/to/dir``: every ``<dir>/<dataset>/<split>.jsonl`` (FlashRAG_datasets root) or, if the folder itself holds
  ``<split>.jsonl``, that one file.

Rows are validated by :func:`agentrag_verl.data.corpus.load_qa` (a plain JSONL loader with line-numbered
errors; it is not a fake). Ids must be unique within a dataset because resuming keys results by ``(dataset, id)``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["EvalQuestion", "load_dataset_file", "resolve_specs", "load_datasets", "DEFAULT_SPLIT", "MINI_WIKI_DIR"]

DEFAULT_SPLIT = "test"

MINI_WIKI_DIR = Path(__file__).resolve().parents[2] / "examples" / "mini_wiki"
"""The embedded default (repository checkout): ``corpus.jsonl`` and ``<dataset>/{train,test}.jsonl``."""


@dataclass(frozen=True)
class EvalQuestion:
    """One question to evaluate.

    Attributes:
        dataset: Dataset name (results are aggregated per dataset).
        id: The row's ``id`` (unique within the dataset).
        question: The question text.
        golden_answers: Gold answers (any of them counts).
        metadata: The row's other fields (``metadata``, ...), kept in the result record.
    """

    dataset: str
    id: str
    question: str
    golden_answers: tuple[str, ...]
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """Resume key ``"<dataset>/<id>"``."""
        return f"{self.dataset}/{self.id}"


def load_dataset_file(path: str | os.PathLike[str], dataset: str, limit: int | None = None) -> list[EvalQuestion]:
    """Load one FlashRAG JSONL file as ``dataset``.

    Raises:
        FileNotFoundError: The file does not exist.
        ValueError: A row is malformed, or an id repeats (the message names the file and both lines).
    """
    from agentrag_verl.data.corpus import load_qa

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(
            f"Evaluation file {p} not found. Pass FlashRAG-layout JSONL files (one "
            '{"id", "question", "golden_answers"} object per line), e.g. --data nq=data/nq/test.jsonl.'
        )
    rows = load_qa(p)
    seen: set[str] = set()
    out = []
    for row in rows:
        if row["id"] in seen:
            raise ValueError(
                f"{p}: id {row['id']!r} appears twice. Results are resumed by (dataset, id), so ids must be unique "
                "within a dataset; renumber the rows."
            )
        seen.add(row["id"])
        extra = {k: v for k, v in row.items() if k not in ("id", "question", "golden_answers")}
        out.append(EvalQuestion(dataset, row["id"], row["question"], tuple(row["golden_answers"]), extra))
    return out[:limit] if limit is not None else out


def _name_of(path: Path) -> str:
    parent = path.resolve().parent.name
    return parent if parent and parent not in (".", "") else path.stem


def resolve_specs(specs: Sequence[str], split: str = DEFAULT_SPLIT) -> list[tuple[str, Path]]:
    """Turn dataset specs (module docstring) into ``[(name, file)]``.

    Raises:
        FileNotFoundError: A path does not exist or a folder holds no ``<split>.jsonl``.
        ValueError: Two specs give the same dataset name.

    >>> resolve_specs([])
    []
    """
    out: list[tuple[str, Path]] = []
    for spec in specs:
        name, sep, raw = spec.partition("=")
        if not sep:
            name, raw = "", spec
        path = Path(raw).expanduser()
        if path.is_dir():
            own = path / f"{split}.jsonl"
            if own.is_file():
                out.append((name or path.resolve().name, own))
                continue
            found = sorted(d for d in path.iterdir() if (d / f"{split}.jsonl").is_file())
            if not found:
                raise FileNotFoundError(
                    f"{path} holds no {split}.jsonl and no <dataset>/{split}.jsonl (FlashRAG_datasets layout). "
                    "Point --data at a JSONL file or at such a folder, or choose another --split."
                )
            if name:
                raise ValueError(f"{spec!r}: a name= prefix needs a single file, but {path} holds several datasets.")
            out.extend((d.name, d / f"{split}.jsonl") for d in found)
        elif path.is_file():
            out.append((name or _name_of(path), path))
        else:
            raise FileNotFoundError(f"Dataset spec {spec!r}: {path} does not exist.")
    names = [n for n, _ in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"Dataset name(s) {dupes} given twice; name them explicitly with name=path.")
    return out


def load_datasets(
    specs: Iterable[str], split: str = DEFAULT_SPLIT, limit: int | None = None
) -> dict[str, list[EvalQuestion]]:
    """``{dataset: questions}`` for the specs, in spec order; ``limit`` keeps the first N questions of each."""
    return {name: load_dataset_file(path, name, limit) for name, path in resolve_specs(list(specs), split)}
