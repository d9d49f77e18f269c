"""Reading QA sets in the FlashRAG layout (``RUC-NLPIR/FlashRAG_datasets``), locally or from the hub.

A FlashRAG QA file is JSON Lines, one ``{"id": "train_0", "question": "...", "golden_answers": ["..."], ...}``
object per line; the hub dataset stores one config per benchmark (``nq``, ``hotpotqa``, ...) with the splits that
benchmark has. A local copy (``huggingface-cli download RUC-NLPIR/FlashRAG_datasets --repo-type dataset
--local-dir DIR``) has the same layout on disk: ``DIR/<dataset>/<split>.jsonl``.

Which split is the *test* split of a benchmark follows Search-R1's data scripts: ``test`` if the benchmark has one,
else ``dev``, else ``train`` (HotpotQA, 2Wiki and MuSiQue are evaluated on ``dev``; PopQA and Bamboogle have only
``test``).

>>> normalize_question("  who wrote hamlet ")
'who wrote hamlet?'
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrag_verl.jsonl import JsonLinesError, read_json_lines

__all__ = [
    "HF_REPO",
    "SEARCH_R1_TEST_SETS",
    "EVAL_SPLIT_ORDER",
    "DataSourceError",
    "QARow",
    "normalize_question",
    "read_qa_file",
    "local_split_path",
    "local_splits",
    "load_split",
    "eval_split",
]

HF_REPO = "RUC-NLPIR/FlashRAG_datasets"
"""Hugging Face dataset holding the FlashRAG benchmarks (one config per benchmark)."""

SEARCH_R1_TEST_SETS = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")
"""The seven test sets every paper reports, by FlashRAG config name, in Search-R1's order."""

EVAL_SPLIT_ORDER = ("test", "dev", "train")
"""Split used to evaluate a benchmark: the first one it has (Search-R1 ``qa_search_test_merge.py``)."""

_EXAMPLE = '{"id": "train_0", "question": "...", "golden_answers": ["..."]}'


class DataSourceError(RuntimeError):
    """A QA source cannot be read (missing file, offline hub, malformed row); the message says how to fix it."""


@dataclass(frozen=True)
class QARow:
    """One question of a QA set.

    Attributes:
        id: The row's ``id`` as in the file (a string; integer ids are converted).
        question: The question text as in the file.
        golden_answers: The gold answers (non-empty).
        dataset: The benchmark name (FlashRAG config name, or the name given for a custom file).
        split: The split the row comes from.
    """

    id: str
    question: str
    golden_answers: tuple[str, ...]
    dataset: str
    split: str


def normalize_question(question: str, add_question_mark: bool = True) -> str:
    """Strip the question and, like Search-R1's data scripts, end it with ``?`` unless it already does.

    >>> normalize_question("Capital of France", add_question_mark=False)
    'Capital of France'
    """
    question = question.strip()
    if add_question_mark and not question.endswith("?"):
        question += "?"
    return question


def _row(obj: Any, where: str, dataset: str, split: str) -> QARow:
    def bad(what: str) -> DataSourceError:
        return DataSourceError(f"{where}: {what}. Each FlashRAG QA row must look like {_EXAMPLE}; fix or drop the row.")

    if not isinstance(obj, dict):
        raise bad(f"expected a JSON object, got {type(obj).__name__}")
    missing = [k for k in ("id", "question", "golden_answers") if k not in obj]
    if missing:
        raise bad(f"missing field(s) {missing} (has {sorted(obj)})")
    rid = obj["id"]
    if isinstance(rid, int) and not isinstance(rid, bool):
        rid = str(rid)
    if not isinstance(rid, str) or not rid:
        raise bad(f'"id" must be a non-empty string, got {obj["id"]!r}')
    question = obj["question"]
    if not isinstance(question, str) or not question.strip():
        raise bad(f'"question" must be a non-empty string, got {question!r}')
    answers = obj["golden_answers"]
    if isinstance(answers, str):
        raise bad(f'"golden_answers" must be a list of strings; wrap the single answer in a list: [{answers!r}]')
    if not isinstance(answers, Sequence) or not answers:
        raise bad(f'"golden_answers" must be a non-empty list of strings, got {answers!r}')
    golds = tuple(str(a) for a in answers if a is not None and str(a).strip())
    if not golds:
        raise bad(f'"golden_answers" holds no non-empty answer: {answers!r}')
    return QARow(id=rid, question=question, golden_answers=golds, dataset=dataset, split=split)


def read_qa_file(path: str | os.PathLike[str], *, dataset: str, split: str) -> list[QARow]:
    """Read and validate a FlashRAG JSON Lines QA file.

    Args:
        path: The ``.jsonl`` file (blank lines are skipped).
        dataset: Benchmark name recorded on each row.
        split: Split name recorded on each row.

    Raises:
        DataSourceError: The file is missing, a line is not JSON, a field is missing or mistyped, or an id repeats;
            the message names the file and line.
    """
    p = Path(path)
    if p.is_dir():
        raise DataSourceError(
            f"QA file {p} is a folder; pass a FlashRAG .jsonl file (or the folder as --flashrag-dir)."
        )
    if not p.is_file():
        raise DataSourceError(
            f"QA file {p} does not exist. Pass an existing FlashRAG .jsonl file, or a --flashrag-dir holding "
            f"<dataset>/<split>.jsonl (e.g. huggingface-cli download {HF_REPO} --repo-type dataset --local-dir DIR)."
        )
    rows: list[QARow] = []
    seen: dict[str, int] = {}
    try:
        for lineno, obj in read_json_lines(p, "QA file"):
            where = f"{p}, line {lineno}"
            row = _row(obj, where, dataset, split)
            if row.id in seen:
                raise DataSourceError(
                    f"{where}: id {row.id!r} already used on line {seen[row.id]}; ids must be unique within a file "
                    "because rewards and planner caches look questions up by id. Renumber one of them."
                )
            seen[row.id] = lineno
            rows.append(row)
    except JsonLinesError as e:
        raise DataSourceError(str(e)) from None
    if not rows:
        raise DataSourceError(f"QA file {p} holds no rows; expected lines like {_EXAMPLE}.")
    return rows


def local_split_path(root: str | os.PathLike[str], dataset: str, split: str) -> Path:
    """``root/<dataset>/<split>.jsonl`` (the FlashRAG_datasets layout)."""
    return Path(root) / dataset / f"{split}.jsonl"


def local_splits(root: str | os.PathLike[str], dataset: str) -> list[str]:
    """Splits of ``dataset`` present under ``root`` (sorted)."""
    d = Path(root) / dataset
    return sorted(p.stem for p in d.glob("*.jsonl")) if d.is_dir() else []


def _hf_rows(dataset: str, split: str) -> Iterable[dict[str, Any]]:
    try:
        import datasets
    except ModuleNotFoundError as e:
        raise DataSourceError(
            "reading from the Hugging Face hub needs the `datasets` package (pip install datasets), or pass "
            "--flashrag-dir with a local copy"
        ) from e
    try:
        return datasets.load_dataset(HF_REPO, dataset, split=split)
    except Exception as e:  # offline, unknown config/split, hub errors
        raise DataSourceError(
            f"cannot load {HF_REPO} config {dataset!r} split {split!r} from the hub ({type(e).__name__}: {e}). "
            f"Offline? Download once (huggingface-cli download {HF_REPO} --repo-type dataset --local-dir DIR) and "
            "pass --flashrag-dir DIR."
        ) from e


def load_split(
    dataset: str, split: str, *, root: str | os.PathLike[str] | None = None, hub: bool = False
) -> list[QARow]:
    """All rows of one benchmark split, from ``root`` (local copy) or, with ``hub=True``, from the hub.

    Raises:
        DataSourceError: Neither source is given, the split is absent, or a row is malformed.
    """
    if root is not None:
        path = local_split_path(root, dataset, split)
        if not path.is_file():
            have = local_splits(root, dataset)
            raise DataSourceError(
                f"{path} not found: {dataset!r} has splits {have or 'none'} under {root}. Check the dataset/split "
                f"name, or download {HF_REPO} there (huggingface-cli download {HF_REPO} --repo-type dataset "
                f"--local-dir {root})."
            )
        return read_qa_file(path, dataset=dataset, split=split)
    if hub:
        rows = [
            _row(dict(obj), f"{HF_REPO}/{dataset}/{split}, row {i}", dataset, split)
            for i, obj in enumerate(_hf_rows(dataset, split))
        ]
        if not rows:
            raise DataSourceError(f"{HF_REPO}/{dataset}/{split} is empty")
        return rows
    raise DataSourceError(
        f"no source for {dataset}/{split}: pass --flashrag-dir DIR (a local copy of {HF_REPO}) or --hub to download"
    )


def eval_split(dataset: str, *, root: str | os.PathLike[str] | None = None, hub: bool = False) -> str:
    """The split a benchmark is evaluated on: the first of :data:`EVAL_SPLIT_ORDER` it has.

    Raises:
        DataSourceError: The benchmark has none of them (locally), or no source is given.
    """
    if root is not None:
        have = local_splits(root, dataset)
    elif hub:
        try:
            import datasets

            have = list(datasets.get_dataset_split_names(HF_REPO, dataset))
        except Exception as e:
            raise DataSourceError(
                f"cannot list the splits of {HF_REPO} config {dataset!r} ({type(e).__name__}: {e}); pass "
                "--flashrag-dir with a local copy"
            ) from e
    else:
        raise DataSourceError(f"no source for {dataset}: pass --flashrag-dir DIR or --hub")
    for split in EVAL_SPLIT_ORDER:
        if split in have:
            return split
    raise DataSourceError(
        f"{dataset!r} has no split among {list(EVAL_SPLIT_ORDER)} (found {have or 'none'}"
        f"{f' under {root}' if root is not None else ''}); check the dataset name."
    )
