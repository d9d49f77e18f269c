"""``agentrag-verl reasonrag generate``: build RAG-ProGuide from FlashRAG-layout questions (ReasonRAG §2.2).

The authors' pipeline ran the MCTS in 10 OS processes, one question at a time each, with no resume, and its pair
builder silently wrote nothing. Here:

- **Concurrent**: ``concurrency`` questions are searched at once in one event loop (each question's MCTS is
  sequential by nature; its SPRE rollouts run concurrently); the policy client bounds the requests in flight.
- **Resumable**: a finished question's tree is appended to ``trees.jsonl`` as one line
  (:class:`~agentrag_verl.jsonl.JsonlStore`: flushed and fsynced, one writer), only when its search completed. On
  restart, questions already there are skipped. A kill can leave at most a partial last line: it is cut off (and
  that question searched again). Partial trees are never written; a question whose policy or retriever failed
  after retries goes to ``failures.jsonl`` (informational) and is tried again by the next run. ``run_config.json``
  records the search settings; resuming with other MCTS settings or another policy model is refused (use a new
  ``--out``), because the trees would mix.
- **Pairs and statistics** are derived from ``trees.jsonl`` at the end of every run (``pairs.jsonl``,
  ``stats.json``, ``stats.md``; rewritten atomically), so they always cover every finished question.
  ``agentrag-verl reasonrag pairs`` rebuilds them with other filters without searching again.

Input: jsonl files with ``id``, ``question``, ``golden_answers`` per line (FlashRAG layout, read by
:func:`agentrag_verl.data.flashrag.read_questions`). A question's key is ``<source>/<id>``; the source is the file's
stem (``hotpotqa/train.jsonl`` -> ``train``) unless ``--source`` names one per file.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrag_verl.data.flashrag import DataSourceError, Question, read_questions
from agentrag_verl.jsonl import JsonlStore, read_records
from agentrag_verl.methods.reasonrag.mcts import MCTSConfig, MCTSEnv, run_mcts
from agentrag_verl.methods.reasonrag.pairs import PairConfig, build_pairs, dataset_statistics, statistics_markdown
from agentrag_verl.methods.reasonrag.tree import Tree

__all__ = [
    "load_questions",
    "open_trees",
    "tree_uid",
    "RunSummary",
    "generate",
    "build_dataset",
    "TREES",
    "PAIRS",
    "FAILURES",
]

logger = logging.getLogger(__name__)

TREES, PAIRS, FAILURES, RUN_CONFIG = "trees.jsonl", "pairs.jsonl", "failures.jsonl", "run_config.json"
STATS_JSON, STATS_MD = "stats.json", "stats.md"


class GenerateError(RuntimeError):
    """Bad input or output directory (message says what, why and how to fix)."""


def load_questions(paths: Sequence[str | Path], sources: Sequence[str] | None = None) -> list[Question]:
    """Read FlashRAG-layout jsonl files (:func:`~agentrag_verl.data.flashrag.read_questions`), question texts
    stripped.

    A question's :attr:`~agentrag_verl.data.flashrag.Question.dataset` is its source, so its key is
    ``<source>/<id>``; a row without ``id`` is numbered by its line (line number minus one).

    Args:
        paths: The files.
        sources: A source name per file; the file stems by default.

    Raises:
        GenerateError: A missing file, a malformed line (not a JSON object with a non-empty ``question`` and a
            non-empty ``golden_answers`` list), or two questions with the same ``<source>/<id>``.
    """
    if sources is not None and len(sources) != len(paths):
        raise GenerateError(f"--source names {len(sources)} sources for {len(paths)} --data files; give one per file")
    out: list[Question] = []
    seen: dict[str, Path] = {}
    for i, path in enumerate(paths):
        path = Path(path)
        source = sources[i] if sources else path.stem
        try:
            questions = read_questions(path, dataset=source, split="train", flag="--data", number_missing_ids=True)
        except DataSourceError as exc:
            raise GenerateError(f"{exc} (FlashRAG-layout jsonl files with --data)") from None
        for q in questions:
            if q.key in seen:
                raise GenerateError(
                    f"{path}: duplicate question id {q.key!r} (also in {seen[q.key]}); ids must be unique per source: "
                    "name the files' sources apart with --source"
                )
            seen[q.key] = path
            out.append(dataclasses.replace(q, question=q.question.strip()))
    return out


REDO = "its question is then searched again"
"""What deleting a corrupt line of ``trees.jsonl`` means (for the error message)."""


def tree_uid(record: Mapping[str, Any]) -> str:
    """The key of a ``trees.jsonl`` record: the question's ``<source>/<id>``.

    >>> tree_uid({"uid": "hotpotqa/7", "tree": {}})
    'hotpotqa/7'
    """
    return str(record["uid"])


def open_trees(out_dir: str | Path) -> JsonlStore:
    """``<out>/trees.jsonl`` as a :class:`~agentrag_verl.jsonl.JsonlStore` keyed by :func:`tree_uid`, keeping only
    the keys in memory (trees are large; :func:`build_dataset` reads them back)."""
    return JsonlStore(Path(out_dir) / TREES, key=tree_uid, redo=REDO, keep_records=False)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _check_run_config(out_dir: Path, settings: dict[str, Any], has_trees: bool) -> None:
    """Store the search settings, or refuse other settings when finished trees were searched with the stored ones."""
    path = out_dir / RUN_CONFIG
    if path.exists() and has_trees:
        previous = json.loads(path.read_text(encoding="utf-8"))
        if previous != settings:
            changed = sorted(k for k in set(previous) | set(settings) if previous.get(k) != settings.get(k))
            raise GenerateError(
                f"{out_dir} holds trees searched with other settings ({', '.join(changed)} differ; see {path}). "
                "Resume with the same settings, or write to a new --out directory."
            )
    else:
        _atomic_write(path, json.dumps(settings, indent=2, sort_keys=True) + "\n")


@dataclass
class RunSummary:
    """What one ``generate`` run did."""

    total: int = 0
    skipped: int = 0
    searched: int = 0
    failed: int = 0
    aborted: bool = False
    pairs: int = 0
    elapsed_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


async def generate(
    questions: Sequence[Question],
    out_dir: str | Path,
    env: MCTSEnv,
    mcts: MCTSConfig,
    pairs: PairConfig | None = None,
    *,
    concurrency: int = 8,
    settings: dict[str, Any] | None = None,
    max_failures: int | None = 20,
    progress: bool = True,
    count_tokens: Callable[[str], int] | None = None,
) -> RunSummary:
    """Search every question not yet in ``trees.jsonl``, then rebuild the pairs and statistics.

    Args:
        questions: The questions (:func:`load_questions`).
        out_dir: Output directory (created).
        env: Policy, retriever, judge.
        mcts: Search settings.
        pairs: Pair filters.
        concurrency: Questions searched at once.
        settings: What must match on resume (default: the MCTS settings); stored in ``run_config.json``.
        max_failures: Stop starting new questions after this many failed ones (``None``: never).
        progress: Show a tqdm progress bar.
        count_tokens: Token counter for the statistics.

    Returns:
        The run's summary.
    """
    if concurrency < 1:
        raise GenerateError(f"--concurrency must be >= 1, got {concurrency}")
    if mcts.value == "process_eval" and env.judge is None:
        raise GenerateError(
            "mcts.value=process_eval scores nodes with an LLM judge: pass --judge-url and --judge-model"
        )
    start = time.monotonic()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    store = open_trees(out)  # created: pairs and stats are (re)built even when no question finishes
    try:
        _check_run_config(out, settings if settings is not None else {"mcts": dataclasses.asdict(mcts)}, bool(store))
    except BaseException:
        store.close()
        raise
    pending = [q for q in questions if q.key not in store]
    summary = RunSummary(total=len(questions), skipped=len(questions) - len(pending))
    logger.info("%d questions: %d already finished, %d to search", len(questions), summary.skipped, len(pending))

    bar = None
    if progress and pending:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(pending), desc="ReasonRAG MCTS", unit="question")
    queue: asyncio.Queue[Question] = asyncio.Queue()
    for q in pending:
        queue.put_nowait(q)
    stop = asyncio.Event()

    async def worker() -> None:
        while not stop.is_set():
            try:
                q = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            t0 = time.monotonic()
            try:
                tree, stats = await run_mcts(q.question, q.golden_answers, env, mcts, qid=q.key)
            except Exception as exc:  # the question is retried by the next run
                summary.failed += 1
                logger.error("question %s failed: %s: %s", q.key, type(exc).__name__, exc)
                with (out / FAILURES).open("a", encoding="utf-8") as f:
                    f.write(json.dumps({"uid": q.key, "error": f"{type(exc).__name__}: {exc}", "time": time.time()}))
                    f.write("\n")
                if max_failures is not None and summary.failed >= max_failures:
                    summary.aborted = True
                    stop.set()
            else:
                store.append(
                    {
                        "uid": q.key,
                        "id": q.id,
                        "source": q.dataset,
                        "question": q.question,
                        "golden_answers": list(q.golden_answers),
                        "mcts": dataclasses.asdict(mcts),
                        "stats": stats.as_dict(),
                        "elapsed_s": round(time.monotonic() - t0, 3),
                        "tree": tree.to_dict(),
                    }
                )
                summary.searched += 1
            if bar is not None:
                bar.update(1)
                bar.set_postfix(failed=summary.failed)

    try:
        await asyncio.gather(*(worker() for _ in range(min(concurrency, max(1, len(pending))))))
    finally:
        if bar is not None:
            bar.close()
        store.close()
    if summary.aborted:
        logger.error(
            "stopped after %d failed questions (see %s); fix the endpoint and run again to resume",
            summary.failed,
            out / FAILURES,
        )
    stats = build_dataset(out, pairs, count_tokens=count_tokens)
    summary.pairs = stats["pairs"]
    summary.elapsed_s = round(time.monotonic() - start, 3)
    return summary


def iter_pairs(records: Iterable[dict[str, Any]], config: PairConfig | None = None) -> Iterable[dict[str, Any]]:
    """The pairs of finished tree records, in record order."""
    for record in records:
        tree = Tree.from_dict(record["tree"])
        yield from build_pairs(tree, config, question_id=record["uid"], source=record.get("source", ""))


def build_dataset(
    out_dir: str | Path, config: PairConfig | None = None, count_tokens: Callable[[str], int] | None = None
) -> dict[str, Any]:
    """Write ``pairs.jsonl``, ``stats.json`` and ``stats.md`` from ``trees.jsonl`` (atomically).

    Returns:
        The statistics.

    Raises:
        GenerateError: ``trees.jsonl`` is missing.
        JsonLinesError: A line of ``trees.jsonl`` is corrupt (the message names it).
    """
    out = Path(out_dir)
    if not (out / TREES).exists():
        raise GenerateError(f"{out / TREES} does not exist; run `agentrag-verl reasonrag generate --out {out}` first")
    records = list(read_records(out / TREES, tree_uid, redo=REDO).values())
    pairs = list(iter_pairs(records, config))
    _atomic_write(out / PAIRS, "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pairs))
    searched = Counter(r.get("source", "") for r in records)
    stats = dataset_statistics(pairs, questions_searched=searched, count_tokens=count_tokens)
    stats["filters"] = dataclasses.asdict(config or PairConfig())
    _atomic_write(out / STATS_JSON, json.dumps(stats, indent=2) + "\n")
    _atomic_write(out / STATS_MD, statistics_markdown(stats))
    return stats
