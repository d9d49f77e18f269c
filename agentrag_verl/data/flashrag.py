"""Reading QA sets in the FlashRAG layout (``RUC-NLPIR/FlashRAG_datasets``), locally or from the hub.

A FlashRAG QA file is JSON Lines, one ``{"id": "train_0", "question": "...", "golden_answers": ["..."], ...}``
object per line; the hub dataset stores one config per benchmark (``nq``, ``hotpotqa``, ...) with the splits that
benchmark has. A local copy (``huggingface-cli download RUC-NLPIR/FlashRAG_datasets --repo-type dataset
--local-dir DIR``) has the same layout on disk: ``DIR/<dataset>/<split>.jsonl``.

Which split is the *test* split of a benchmark follows Search-R1's data scripts: ``test`` if the benchmark has one,
else ``dev``, else ``train`` (HotpotQA, 2Wiki and MuSiQue are evaluated on ``dev``; PopQA and Bamboogle have only
``test``).

:func:`read_questions` is the one reader of FlashRAG question files: ``data prepare``, ``eval``, ``demos
generate``, ``planners generate``, ``reasonrag generate`` and the tiny packaged QA set
(:func:`agentrag_verl.data.corpus.load_qa`) all read through it, so a row is valid (and a bad row reported, by file
and line) the same way everywhere. Each returns :class:`Question` records.

>>> normalize_question("  who wrote hamlet ")
'who wrote hamlet?'
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrag_verl.jsonl import JsonLinesError, read_json_lines

__all__ = [
    "HF_REPO",
    "TEST_SETS",
    "EVAL_SPLIT_ORDER",
    "DataSourceError",
    "Question",
    "normalize_question",
    "read_questions",
    "local_split_path",
    "local_splits",
    "load_split",
    "eval_split",
]

HF_REPO = "RUC-NLPIR/FlashRAG_datasets"
"""Hugging Face dataset holding the FlashRAG benchmarks (one config per benchmark)."""

TEST_SETS = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")
"""The seven test sets every paper reports, by FlashRAG config name, in Search-R1's order."""

EVAL_SPLIT_ORDER = ("test", "dev", "train")
"""Split used to evaluate a benchmark: the first one it has (Search-R1 ``qa_search_test_merge.py``)."""

_EXAMPLE = '{"id": "train_0", "question": "...", "golden_answers": ["..."]}'


class DataSourceError(ValueError):
    """A QA source cannot be read (missing file, offline hub, malformed row); the message says how to fix it.

    A :class:`ValueError`, so command lines that report bad input (``except (ValueError, OSError)``) report it."""


@dataclass(frozen=True)
class Question:
    """One question of a FlashRAG-layout QA set: the one record every reader of questions returns
    (:func:`read_questions`, :func:`load_split`).

    Attributes:
        id: The row's ``id`` as in the file (a string; integer ids are converted).
        question: The question text as in the file (callers strip or normalize it).
        golden_answers: The gold answers (non-empty; any of them counts).
        dataset: The benchmark name (FlashRAG config name, or the name given for a custom file).
        split: The split the row comes from.
        metadata: The row's other fields (``metadata``, ...), as they are in the file.

    >>> q = Question("test_0", "Who wrote Hamlet?", ("Shakespeare",), "nq", "test", {"metadata": {"type": "x"}})
    >>> q.key, q.as_row()["golden_answers"]
    ('nq/test_0', ['Shakespeare'])
    """

    id: str
    question: str
    golden_answers: tuple[str, ...]
    dataset: str
    split: str
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False)

    @property
    def key(self) -> str:
        """``"<dataset>/<id>"``: unique across datasets (FlashRAG ids such as ``test_0`` repeat in every benchmark);
        the key evaluation results and ReasonRAG trees are resumed by."""
        return f"{self.dataset}/{self.id}"

    def as_row(self) -> dict[str, Any]:
        """The FlashRAG JSON object of the question (``id``, ``question``, ``golden_answers``, then the other
        fields)."""
        return {"id": self.id, "question": self.question, "golden_answers": list(self.golden_answers), **self.metadata}


def normalize_question(question: str, add_question_mark: bool = True) -> str:
    """Strip the question and, like Search-R1's data scripts, end it with ``?`` unless it already does.

    >>> normalize_question("Capital of France", add_question_mark=False)
    'Capital of France'
    """
    question = question.strip()
    if add_question_mark and not question.endswith("?"):
        question += "?"
    return question


_FIELDS = ("id", "question", "golden_answers")


def _question(obj: Any, where: str, dataset: str, split: str, default_id: str | None) -> Question:
    def bad(what: str) -> DataSourceError:
        return DataSourceError(f"{where}: {what}. Each FlashRAG QA row must look like {_EXAMPLE}; fix or drop the row.")

    if not isinstance(obj, dict):
        raise bad(f"expected a JSON object, got {type(obj).__name__}")
    if default_id is not None and "id" not in obj:
        obj = {"id": default_id, **obj}
    missing = [k for k in _FIELDS if k not in obj]
    if missing:
        raise bad(f"missing field(s) {json.dumps(missing)} (has {json.dumps(sorted(obj))})")
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
    if not isinstance(obj.get("metadata") or {}, dict):
        raise bad(f'"metadata" must be an object when present, got {obj["metadata"]!r}')
    extra = {k: v for k, v in obj.items() if k not in _FIELDS}
    return Question(id=rid, question=question, golden_answers=golds, dataset=dataset, split=split, metadata=extra)


def _questions(
    source: str, unit: str, numbered: Iterable[tuple[int, Any]], dataset: str, split: str, number_missing_ids: bool
) -> list[Question]:
    """Validate ``(position, object)`` pairs of one source; ids must be unique within it."""
    out: list[Question] = []
    seen: dict[str, int] = {}
    for n, obj in numbered:
        where = f"{source}, {unit} {n}"
        q = _question(obj, where, dataset, split, str(n - 1) if number_missing_ids else None)
        if q.id in seen:
            raise DataSourceError(
                f"{where}: id {q.id!r} already used on {unit} {seen[q.id]}; ids must be unique within a file because "
                "evaluation results, rewards and planner caches look questions up by id. Renumber one of them."
            )
        seen[q.id] = n
        out.append(q)
    if not out:
        raise DataSourceError(f"{source} holds no questions; expected lines like {_EXAMPLE}.")
    return out


def read_questions(
    path: str | os.PathLike[str],
    *,
    dataset: str,
    split: str,
    flag: str = "QA file",
    number_missing_ids: bool = False,
) -> list[Question]:
    """Read and validate a FlashRAG JSON Lines QA file: the one reader of question files.

    Each non-blank line is one ``{"id", "question", "golden_answers", ...}`` object: ``id`` a non-empty string (an
    integer is converted), ``question`` a non-empty string, ``golden_answers`` a non-empty list (empty and null
    answers are dropped, others converted to strings), ``metadata`` an object when present; the other fields are
    kept in :attr:`Question.metadata`.

    Args:
        path: The ``.jsonl`` file (blank lines are skipped; a UTF-8 byte-order mark is allowed).
        dataset: Benchmark name recorded on each question.
        split: Split name recorded on each question.
        flag: The command-line flag (or name) of the file, for the messages.
        number_missing_ids: A row without ``id`` gets its line number minus one (ReasonRAG's generator accepts
            such files); otherwise a missing ``id`` is an error.

    Returns:
        The questions, in file order.

    Raises:
        DataSourceError: The file is missing, a folder or empty, a line is not UTF-8 JSON, a field is missing or
            mistyped, or an id repeats; the message names the file and the line and says how to fix it.
    """
    p = Path(path).expanduser()
    if p.is_dir():
        raise DataSourceError(
            f"{flag} {p} is a folder; pass one FlashRAG .jsonl file (`agentrag-verl data prepare` reads a folder of "
            "<dataset>/<split>.jsonl files as --flashrag-dir)."
        )
    if not p.is_file():
        raise DataSourceError(
            f"{flag} {p} does not exist. Pass an existing FlashRAG .jsonl file (one {_EXAMPLE} object per line; e.g. "
            f"from huggingface-cli download {HF_REPO} --repo-type dataset --local-dir DIR)."
        )
    try:
        return _questions(str(p), "line", read_json_lines(p, flag), dataset, split, number_missing_ids)
    except JsonLinesError as e:
        raise DataSourceError(str(e)) from None


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
) -> list[Question]:
    """All questions of one benchmark split, from ``root`` (local copy) or, with ``hub=True``, from the hub.

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
        return read_questions(path, dataset=dataset, split=split)
    if hub:
        rows = ((i, dict(obj)) for i, obj in enumerate(_hf_rows(dataset, split)))
        return _questions(f"{HF_REPO}/{dataset}/{split}", "row", rows, dataset, split, number_missing_ids=False)
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
