"""Search-P1 reference-planner generation (§3.2.1, Algorithm 1, Eq. 5, Figure 8): concurrent, resumable, cached.

For each training question (id, question, gold answers):

1. **K candidates**: K requests with the Figure 8 prompt (:func:`agentrag_verl.methods.searchp1.judge.planner_request`)
   to a strong LLM through the judges client (any OpenAI-compatible endpoint). With K > 1 each request carries its
   own ``seed`` and ``candidate_temperature`` so the candidates differ (equal requests would be served once from
   the client's cache).
2. **Correctness filter** ("filter for correct answers", Eq. 5). Figure 8's output is a query list and a planner
   text with no final answer, so "correct" must be defined; the mode is an option (**Decision**):

   - ``retrieval``: running the candidate's reasoning path through the retriever (top-k per query) retrieves a
     passage that contains a gold answer (cover match), i.e. the path actually reaches the answer;
   - ``answer``: the candidate's planner or queries mention a gold answer (cover match);
   - ``none``: every parsable candidate counts;
   - ``auto`` (default): ``retrieval`` when a retriever URL is given, else ``answer``.

3. **Vote** (Eq. 5): with two or more correct candidates, one more LLM call merges them into the minimal set of
   essential steps (:mod:`agentrag_verl.methods.searchp1.planners.prompts`; the paper prints no vote prompt). If the
   vote reply
   fails, the correct candidate with the fewest queries is kept (``selection: "shortest"``). One correct
   candidate is used as is (``selection: "single"``); K = 1 never votes.

Cache (what :func:`agentrag_verl.methods.searchp1.manager.load_planner_cache` reads): JSONL, one line per planned
question, ``{"id", "planner", "reasoning_path": [queries], "question", "golden_answers", "selection",
"num_candidates", "num_parsed", "num_correct", "correctness", "model", "llm_calls"}``. Questions without a usable
plan (no candidate parsed, or none was correct) go to the sidecar ``<stem>.rejected.jsonl`` with a ``reason``; the
reward manager then finds no plan and keeps Track A only (``sp1_missing_plan``). Both files count as done: a
restart skips every id found in either. Endpoint failures (timeouts, 5xx, retriever errors after retries) write
nothing, so a rerun retries exactly those questions.

Crash safety: both files are :class:`~agentrag_verl.jsonl.JsonlStore` files: each record is one line, flushed and
fsynced; a process killed in the middle of a write leaves at most one partial last line, which the next run cuts off
(the question is then planned again, once); a lock on each file stops two generators from writing the same cache.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, get_args

from agentrag_verl.data.flashrag import Question, read_questions
from agentrag_verl.jsonl import JsonlStore
from agentrag_verl.judges.client import JudgeRequest
from agentrag_verl.methods.searchp1.judge import ReferencePlan, parse_planner, planner_request
from agentrag_verl.methods.searchp1.planners.prompts import vote_messages
from agentrag_verl.metrics import cover_exact_match
from agentrag_verl.options import check_choice

logger = logging.getLogger(__name__)

__all__ = [
    "PlannerOptions",
    "PlanCache",
    "GenerationSummary",
    "load_questions",
    "rejected_path",
    "answer_in_plan",
    "shortest",
    "plan_question",
    "generate_plans",
]

Correctness = Literal["auto", "answer", "retrieval", "none"]


@dataclass(frozen=True)
class PlannerOptions:
    """How plans are generated (``agentrag-verl planners generate`` flags)."""

    num_candidates: int = 1
    """K, candidates per question (Eq. 5)."""
    candidate_temperature: float = 0.7
    """Sampling temperature of the candidates when K > 1 (each also gets ``seed = k``); K = 1 uses the planner
    LLM config's temperature."""
    correctness: Correctness = "auto"
    """Correctness filter: ``retrieval`` | ``answer`` | ``none`` | ``auto`` (see the module docstring)."""
    retriever_url: str | None = None
    """Search-R1 ``/retrieve`` endpoint for the ``retrieval`` filter."""
    retriever_topk: int = 3
    """Passages per query of the ``retrieval`` filter (Search-P1 B.4: top-3)."""
    vote: bool = True
    """Merge several correct candidates by an LLM vote (off: keep the shortest correct candidate)."""
    max_questions_in_flight: int = 32
    """Questions processed concurrently (the client bounds HTTP concurrency separately)."""

    def __post_init__(self) -> None:
        if self.num_candidates < 1:
            raise ValueError(f"num_candidates (K) must be >= 1, got {self.num_candidates}")
        check_choice("correctness filter", self.correctness, get_args(Correctness), where="--correctness")
        if self.resolved_correctness == "retrieval" and not self.retriever_url:
            raise ValueError("the retrieval correctness filter needs a retriever URL (--retriever-url)")
        if self.max_questions_in_flight < 1:
            raise ValueError(f"max_questions_in_flight must be >= 1, got {self.max_questions_in_flight}")

    @property
    def resolved_correctness(self) -> str:
        """The filter in effect (``auto`` resolved)."""
        if self.correctness == "auto":
            return "retrieval" if self.retriever_url else "answer"
        return self.correctness


def rejected_path(cache_path: str | os.PathLike[str]) -> Path:
    """The sidecar of questions without a usable plan: ``plans.jsonl`` -> ``plans.rejected.jsonl``.

    >>> str(rejected_path("/x/plans.jsonl"))
    '/x/plans.rejected.jsonl'
    """
    p = Path(cache_path)
    return p.with_name(f"{p.stem}.rejected{p.suffix or '.jsonl'}")


def _scalar_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in list(value)]


def load_questions(path: str | os.PathLike[str]) -> list[Question]:
    """Questions from a verl parquet written by ``agentrag-verl data prepare`` (ids = ``extra_info.id``, the key the
    reward manager looks up) or from a FlashRAG-layout ``.jsonl`` (ids verbatim, read by
    :func:`~agentrag_verl.data.flashrag.read_questions`); question texts stripped.

    A parquet row that repeats an earlier row's id with the same question and gold answers (a training file that
    lists its questions in several passes, or up-samples them) is the same question: it is kept once, in its first
    place, as the cache holds one plan per id. (``read_questions`` refuses any repeated id in a FlashRAG file.)

    Raises:
        ValueError: The file is missing, a row lacks an id / question / gold answers, or an id repeats with another
            question or other gold answers (in a FlashRAG file: at all).
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"question file {p} not found; pass the train parquet of `agentrag-verl data prepare`")
    if p.suffix != ".parquet":
        questions = read_questions(p, dataset=p.stem, split="train", flag="--questions")
        return [replace(q, question=q.question.strip()) for q in questions]
    import pandas as pd

    frame = pd.read_parquet(p)
    missing = [c for c in ("extra_info", "reward_model") if c not in frame.columns]
    if missing:
        raise ValueError(
            f"{p}: missing column(s) {missing}; expected the verl parquet of `agentrag-verl data prepare` "
            "(extra_info.id / extra_info.question, reward_model.ground_truth.target)"
        )
    out: list[Question] = []
    for i, (info, rm) in enumerate(zip(frame["extra_info"], frame["reward_model"], strict=True)):
        info = dict(info or {})
        qid, question = info.get("id"), info.get("question")
        golds = _scalar_list(((rm or {}).get("ground_truth") or {}).get("target"))
        if qid is None or not question or not golds:
            raise ValueError(
                f"{p}, row {i}: needs extra_info.id, extra_info.question and reward_model.ground_truth.target "
                f"(got id={qid!r}, question={question!r}, target={golds!r}); re-run `agentrag-verl data prepare`"
            )
        out.append(Question(str(qid), str(question), tuple(golds), p.stem, str(info.get("split") or "train")))
    return _unique_ids(p, out)


def _unique_ids(path: Path, questions: list[Question]) -> list[Question]:
    """``questions`` with each id once, in first-seen order; an id whose rows disagree on the question or the gold
    answers is an error (:func:`load_questions`)."""
    first: dict[str, Question] = {}
    conflicts: list[str] = []
    for q in questions:
        seen = first.setdefault(q.id, q)
        if (seen.question, seen.golden_answers) != (q.question, q.golden_answers) and q.id not in conflicts:
            conflicts.append(q.id)
    if conflicts:
        raise ValueError(
            f"{path}: question ids {conflicts[:5]} repeat with a different question or different gold answers; the "
            "planner cache holds one plan per id, so give each question its own id"
        )
    return list(first.values())


def _plan_id(record: Mapping[str, Any]) -> str:
    return str(record["id"])


class PlanCache:
    """The planner cache and its rejected sidecar: two :class:`~agentrag_verl.jsonl.JsonlStore` files keyed by
    question id, each locked for one writer.

    Use as a context manager: ``with PlanCache(path) as cache: cache.done`` (ids already in either file).

    Raises:
        JsonlLockedError: Another generator is writing the cache.
        JsonLinesError: A line of either file is corrupt.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.rejected_path = rejected_path(self.path)
        self.done: set[str] = set()
        self.repaired_bytes = 0
        self._stores: dict[bool, JsonlStore] = {}

    def __enter__(self) -> PlanCache:
        redo = "its question is then planned again"
        try:
            for rejected, p in ((False, self.path), (True, self.rejected_path)):
                self._stores[rejected] = JsonlStore(p, key=_plan_id, redo=redo, keep_records=False)
        except BaseException:
            self.__exit__()
            raise
        self.repaired_bytes = sum(s.repaired_bytes for s in self._stores.values())
        self.done = self._stores[False].done | self._stores[True].done
        return self

    def append(self, record: dict[str, Any], rejected: bool = False) -> None:
        """Write one record as one line, durably (flush + fsync), to the cache or the rejected sidecar."""
        self._stores[rejected].append(record)
        self.done.add(_plan_id(record))

    def __exit__(self, *exc: Any) -> None:
        for store in self._stores.values():
            store.close()
        self._stores = {}


def answer_in_plan(plan: ReferencePlan, golden_answers: Sequence[str]) -> bool:
    """The ``answer`` filter: a gold answer appears (cover match) in the planner text or a query.

    >>> answer_in_plan(ReferencePlan(("Hamlet author",), "Search Hamlet; the answer is Shakespeare."), ["Shakespeare"])
    True
    >>> answer_in_plan(ReferencePlan(("Hamlet author",), "Search Hamlet."), ["Shakespeare"])
    False
    """
    return bool(cover_exact_match(plan.planner + "\n" + "\n".join(plan.reasoning_path), list(golden_answers)))


def shortest(plans: Sequence[ReferencePlan]) -> ReferencePlan:
    """The plan with the fewest queries (the first on ties).

    >>> shortest([ReferencePlan(("a", "b"), "x"), ReferencePlan(("c",), "y")]).planner
    'y'
    """
    return min(plans, key=lambda p: len(p.reasoning_path))


@dataclass
class _Outcome:
    record: dict[str, Any] | None = None
    rejected: bool = False
    failure: str | None = None


async def _retrieval_correct(plan: ReferencePlan, golds: Sequence[str], retriever: Any, topk: int) -> bool:
    hits = await retriever.search(list(plan.reasoning_path), topk)
    text = "\n".join(
        str((h.get("document", h) if isinstance(h, dict) else {}).get("contents", "")) for per in hits for h in per
    )
    return bool(cover_exact_match(text, list(golds)))


async def plan_question(q: Question, client: Any, options: PlannerOptions, retriever: Any = None) -> _Outcome:
    """Candidates -> filter -> vote for one question (see the module docstring). Never raises on endpoint errors:
    they come back as ``_Outcome.failure``."""
    k = options.num_candidates
    params: list[dict[str, Any] | None] = (
        [None] if k == 1 else [{"temperature": options.candidate_temperature, "seed": i} for i in range(k)]
    )
    verdicts = await client.judge_many([planner_request(q.question, q.golden_answers, p) for p in params])
    calls = sum(v.attempts for v in verdicts)
    parsed = [v.value for v in verdicts if v.ok]
    hard = [v for v in verdicts if not v.ok and v.error_kind != "parse_error"]
    mode = options.resolved_correctness
    base = {"id": q.id, "question": q.question, "golden_answers": list(q.golden_answers), "num_candidates": k}
    if not parsed:
        if hard:
            return _Outcome(failure=f"{hard[0].error_kind}: {hard[0].error}")
        return _Outcome({**base, "reason": "no_parsable_candidate", "num_parsed": 0, "llm_calls": calls}, True)
    correct: list[ReferencePlan] = []
    for plan in parsed:
        if mode == "none":
            ok = True
        elif mode == "answer":
            ok = answer_in_plan(plan, q.golden_answers)
        else:
            try:
                ok = await _retrieval_correct(plan, q.golden_answers, retriever, options.retriever_topk)
            except Exception as e:  # RetrievalError after retries: transient, retry on the next run
                return _Outcome(failure=f"retriever: {e}")
        if ok:
            correct.append(plan)
    stats = {"num_parsed": len(parsed), "num_correct": len(correct), "correctness": mode}
    if not correct:
        if hard:  # some candidates never arrived; one of them might have been correct: retry later
            return _Outcome(failure=f"{hard[0].error_kind}: {hard[0].error}")
        return _Outcome({**base, **stats, "reason": "no_correct_candidate", "llm_calls": calls}, True)
    if len(correct) == 1:
        chosen, selection = correct[0], "single"
    elif options.vote:
        verdict = await client.judge(JudgeRequest(vote_messages(q.question, q.golden_answers, correct), parse_planner))
        calls += verdict.attempts
        chosen, selection = (verdict.value, "vote") if verdict.ok else (shortest(correct), "shortest")
    else:
        chosen, selection = shortest(correct), "shortest"
    record = {
        "id": q.id,
        "planner": chosen.planner,
        "reasoning_path": list(chosen.reasoning_path),
        **{k2: v for k2, v in base.items() if k2 != "id"},
        **stats,
        "selection": selection,
        "model": getattr(getattr(client, "config", None), "model", None),
        "llm_calls": calls,
    }
    return _Outcome(record)


@dataclass
class GenerationSummary:
    """Counts of one :func:`generate_plans` run."""

    total: int = 0
    already_done: int = 0
    planned: int = 0
    rejected: int = 0
    failed: int = 0
    llm_calls: int = 0
    selections: dict[str, int] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0
    repaired_bytes: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "failures"} | {"failed_ids": sorted(self.failures)[:20]}


async def generate_plans(
    questions: Sequence[Question],
    cache_path: str | os.PathLike[str],
    client: Any,
    options: PlannerOptions,
    *,
    retriever: Any = None,
    progress: bool = True,
    on_record: Callable[[dict[str, Any]], None] | None = None,
) -> GenerationSummary:
    """Plan every question not yet in the cache, ``options.max_questions_in_flight`` at a time.

    Args:
        questions: The training questions.
        cache_path: The JSONL cache (created; appended to).
        client: A :class:`~agentrag_verl.judges.client.JudgeClient` for the planner LLM.
        options: K, filter, vote, concurrency.
        retriever: A :class:`~agentrag_verl.tools.retriever_client.RetrieverClient` for the ``retrieval`` filter.
        progress: Show a tqdm progress bar (stderr).
        on_record: Called after each record is written (tests, logging).

    Returns:
        The counts; ``failed`` questions were not written and are retried by a rerun.
    """
    start = time.monotonic()
    summary = GenerationSummary(total=len(questions))
    with PlanCache(cache_path) as cache:
        summary.repaired_bytes = cache.repaired_bytes  # the store logged the cut
        pending = [q for q in questions if q.id not in cache.done]
        summary.already_done = len(questions) - len(pending)
        queue: asyncio.Queue[Question] = asyncio.Queue()
        for q in pending:
            queue.put_nowait(q)
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(pending), desc="planners", unit="q", dynamic_ncols=True)
        selections: Counter[str] = Counter()

        async def worker() -> None:
            while True:
                try:
                    q = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                try:
                    outcome = await plan_question(q, client, options, retriever)
                except Exception as e:  # a bug or an unexpected client error: count it, keep the others going
                    logger.exception("planning question %s failed", q.id)
                    outcome = _Outcome(failure=f"{type(e).__name__}: {e}")
                if outcome.failure is not None:
                    summary.failed += 1
                    summary.failures[q.id] = outcome.failure
                else:
                    assert outcome.record is not None
                    cache.append(outcome.record, rejected=outcome.rejected)
                    summary.llm_calls += int(outcome.record.get("llm_calls", 0))
                    if outcome.rejected:
                        summary.rejected += 1
                    else:
                        summary.planned += 1
                        selections[outcome.record["selection"]] += 1
                    if on_record is not None:
                        on_record(outcome.record)
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(planned=summary.planned, rejected=summary.rejected, failed=summary.failed)

        try:
            n = min(options.max_questions_in_flight, max(1, len(pending)))
            await asyncio.gather(*(worker() for _ in range(n)))
        finally:
            if bar is not None:
                bar.close()
    summary.selections = dict(selections)
    summary.wall_s = round(time.monotonic() - start, 2)
    return summary
