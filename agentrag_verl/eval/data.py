"""Evaluation questions in the FlashRAG layout (``{"id", "question", "golden_answers", ...}`` per JSONL line).

A dataset is named by a spec:

- ``path/to/test.jsonl``: one file; the dataset name is its folder's name (FlashRAG_datasets keeps
  ``<dataset>/<split>.jsonl``), or the file stem when the folder name says nothing (``.``);
- ``name=path/to/file.jsonl``: an explicit name;
- ``path/to/dir``: every ``<dir>/<dataset>/<split>.jsonl`` (FlashRAG_datasets root) or, if the folder itself holds
  ``<split>.jsonl``, that one file.

Files are read by :func:`agentrag_verl.data.flashrag.read_questions` (the one reader of question files; errors name
the file and the line) as :class:`~agentrag_verl.data.flashrag.Question` records. Ids must be unique within a dataset
because resuming keys results by :attr:`Question.key <agentrag_verl.data.flashrag.Question.key>`
(``<dataset>/<id>``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from agentrag_verl.data.flashrag import Question, read_questions

__all__ = ["resolve_specs", "load_datasets", "DEFAULT_SPLIT", "MINI_WIKI_DIR"]

DEFAULT_SPLIT = "test"

MINI_WIKI_DIR = Path(__file__).resolve().parents[2] / "examples" / "mini_wiki"
"""The embedded default (repository checkout): ``corpus.jsonl`` and ``<dataset>/{train,test}.jsonl``."""


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
) -> dict[str, list[Question]]:
    """``{dataset: questions}`` for the specs, in spec order; ``limit`` keeps the first N questions of each.

    Raises:
        FileNotFoundError, ValueError: A spec names no file (:func:`resolve_specs`), or a file is malformed or repeats
            an id (:class:`~agentrag_verl.data.flashrag.DataSourceError`, naming the file and the line).
    """
    return {
        name: read_questions(path, dataset=name, split=split, flag="--data")[:limit]
        for name, path in resolve_specs(list(specs), split)
    }
