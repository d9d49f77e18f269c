"""Teacher demonstrations by rejection sampling through our own agent loops (``agentrag-verl demos generate``).

For each training question the format's agent loop (verl's real ``AgentLoopWorker``, as in ``agentrag-verl eval``)
runs ``samples`` times with a teacher policy — any OpenAI-compatible endpoint (a large vLLM model or an API), or
the scripted stand-in teacher of :mod:`agentrag_verl.warmstart.teacher` for the embedded default. A trajectory is
**kept** when

1. it ended by itself (not cut by the response length),
2. the format's checker accepts it (``Format.is_valid``: HiPRAG F(T) = 1, Search-R1's structure rule, ...), and
3. its answer is correct under the paper's metric (its method's :attr:`~agentrag_verl.registry.Method.paper_metric`);

otherwise it is kept on disk with ``kept: false`` and the first failed rule as ``reject_reason`` (``length``,
``format``, ``wrong_answer``), so the statistics count it and a rerun does not sample it again.

Every record holds the agent loop's own ``prompt_ids``, ``response_ids`` and ``response_mask`` (1 = model-written,
0 = observation or injected tag): exactly what an RL rollout of the same trajectory holds, which is what
:class:`~agentrag_verl.warmstart.sft_dataset.DemonstrationDataset` trains on. Records are appended to
``<out>/<format>/demos.jsonl`` as each trajectory ends (:class:`~agentrag_verl.jsonl.JsonlStore`, keyed
``dataset/id#sample``), so a killed job loses only the trajectories in flight and a rerun samples only the missing
ones. ``stats.json`` / ``stats.md`` report kept and rejected counts by reason, and searches per question, per
dataset.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agentrag_verl.agent_loops import fields as F
from agentrag_verl.data.flashrag import Question
from agentrag_verl.eval.harness import EvalIncomplete, build_record
from agentrag_verl.eval.runner import AgentLoopRunner, RunnerConfig
from agentrag_verl.jsonl import JsonlStore
from agentrag_verl.options import check_choice

__all__ = [
    "DemoConfig",
    "demo_key",
    "judge_trajectory",
    "generate_demos",
    "demo_stats",
    "scripted_teacher_client",
]

logger = logging.getLogger(__name__)

DEMOS_FILE = "demos.jsonl"
RUN_FILE = "run.json"


@dataclass(frozen=True)
class DemoConfig:
    """One demonstration-generation run."""

    runner: RunnerConfig
    """Teacher endpoint, the *policy's* tokenizer (demonstrations are token ids of the model to be trained),
    retriever, sampling, loop options."""
    format: str
    """Trajectory format (agent loop) of the demonstrations."""
    out_dir: str
    """Output folder; records go to ``<out>/<format>/demos.jsonl``."""
    samples: int = 1
    """Trajectories sampled per question (k); use temperature > 0 with a teacher model when k > 1."""
    concurrency: int = 8
    """Trajectories in flight."""
    metric: str | None = None
    """Correctness metric (``em``, ``cem``, ``f1``); None = the paper metric of the format's method."""
    min_f1: float = 1.0
    """With ``metric="f1"``: the F1 a kept answer needs."""
    question_retries: int = 2
    """Extra attempts for a trajectory whose rollout raised (teacher or retriever down after retries)."""
    teacher: str = "scripted"
    """What produced the demonstrations (recorded in ``run.json``; ``scripted`` = the stand-in teacher)."""
    progress: bool = True

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ValueError(f"samples must be >= 1, got {self.samples} (--samples).")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency} (--concurrency).")
        if self.metric is not None:
            check_choice("metric", self.metric, ("em", "cem", "f1"), where="--metric")

    @property
    def format_name(self) -> str:
        return str(self.format).strip().lower()

    @property
    def resolved_metric(self) -> str:
        from agentrag_verl.registry import get_method

        return self.metric or get_method(self.format_name).paper_metric

    def fingerprint(self) -> dict[str, Any]:
        """What the records depend on (a rerun with other values is refused: one file, one teacher)."""
        r = asdict(self.runner)
        for key in ("api_key_env", "request_timeout_s", "base_url", "retriever_url"):
            r.pop(key, None)
        return {"runner": r, "format": self.format_name, "metric": self.resolved_metric, "teacher": self.teacher}


def demo_key(record: Mapping[str, Any]) -> str:
    """Resume key ``"<dataset>/<id>#<sample>"``.

    >>> demo_key({"dataset": "single_hop", "id": "q1", "sample": 2})
    'single_hop/q1#2'
    """
    return f"{record['dataset']}/{record['id']}#{record['sample']}"


def judge_trajectory(record: Mapping[str, Any], metric: str, min_f1: float = 1.0) -> str | None:
    """The rejection reason of an eval-style record (:func:`~agentrag_verl.eval.harness.build_record`), or None
    when the trajectory is kept (module docstring, rules 1-3).

    >>> judge_trajectory({"length_exhausted": False, "format_ok": True, "em": 1.0}, "em") is None
    True
    >>> judge_trajectory({"length_exhausted": False, "format_ok": True, "em": 0.0}, "em")
    'wrong_answer'
    """
    if record.get("length_exhausted"):
        return "length"
    if not record.get("format_ok"):
        return "format"
    score = float(record.get(metric) or 0.0)
    if score < (min_f1 if metric == "f1" else 1.0):
        return "wrong_answer"
    return None


def scripted_teacher_client(tokenizer: Any, format_name: str, questions: Sequence[Question]) -> Any:
    """The stand-in teacher (:class:`~agentrag_verl.warmstart.teacher.ScriptedTeacher`) as an ``LLMServerClient``."""
    from agentrag_verl.agent_loops.local_clients import ScriptedLLMClient
    from agentrag_verl.warmstart.teacher import ScriptedTeacher, plan_from_row

    plans = [plan_from_row(q.question, q.golden_answers, q.metadata) for q in questions]
    return ScriptedLLMClient(tokenizer, ScriptedTeacher(format_name, plans))


def _check_run_file(out: Path, config: DemoConfig, overwrite: bool) -> None:
    run_file = out / RUN_FILE
    current = config.fingerprint()
    demos = out / DEMOS_FILE
    has_records = demos.exists() and demos.stat().st_size > 0
    if run_file.exists() and has_records and not overwrite:  # a fingerprint without records blocks nothing
        previous = json.loads(run_file.read_text()).get("fingerprint")
        if previous != current:
            raise ValueError(
                f"{out} holds demonstrations of another run (see {run_file}); use another --out, or --overwrite to "
                "delete them."
            )
    if overwrite and demos.exists():
        demos.unlink()
    out.mkdir(parents=True, exist_ok=True)
    run_file.write_text(json.dumps({"fingerprint": current}, indent=1))


async def generate_demos(
    config: DemoConfig,
    datasets: Mapping[str, Sequence[Question]],
    *,
    llm_client: Any = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Sample, check and store demonstrations (module docstring); returns the statistics (``stats.json``).

    Args:
        config: The run.
        datasets: ``{dataset: questions}`` (:func:`agentrag_verl.eval.data.load_datasets`).
        llm_client: The teacher as an ``LLMServerClient``; None = the endpoint in ``config.runner``; pass
            :func:`scripted_teacher_client` for the stand-in teacher.
        overwrite: Delete earlier records of ``out_dir`` instead of resuming.

    Raises:
        EvalIncomplete: Some trajectories failed after their retries (all others are saved; rerun to finish).
        ValueError: ``out_dir`` holds another run's records, or an option is invalid.
    """
    from tqdm.auto import tqdm

    out = Path(config.out_dir) / config.format_name
    _check_run_file(out, config, overwrite)
    store = JsonlStore(out / DEMOS_FILE, key=demo_key, redo="its trajectory is then sampled again")
    jobs = [
        (q, s, i)
        for qs in datasets.values()
        for i, q in enumerate(qs)
        for s in range(config.samples)
        if f"{q.key}#{s}" not in store
    ]
    missing: dict[str, list[str]] = defaultdict(list)
    errors: dict[str, str] = {}
    # Auxiliary generations (HiPRAG re-answers, AutoSearch intermediate answers) never enter the trained tokens and
    # only cost teacher calls: off unless the loop options ask for them.
    options = {"reanswers": False, "intermediate_answers": False, **dict(config.runner.loop_options)}
    try:
        runner = AgentLoopRunner(dataclasses.replace(config.runner, loop_options=options), llm_client=llm_client)
    except BaseException:
        store.close()
        raise
    semaphore = asyncio.Semaphore(config.concurrency)
    bar = tqdm(total=len(jobs), desc=f"demos {config.format_name}", disable=not config.progress or not jobs)
    t0 = time.perf_counter()

    async def one(question: Question, sample: int, index: int) -> None:
        async with semaphore:
            for attempt in range(config.question_retries + 1):
                try:
                    trajectory = await runner.run(question, config.format_name, index)
                    break
                except Exception as e:  # the teacher or retriever failed after their own retries
                    if attempt == config.question_retries:
                        missing[question.dataset].append(f"{question.id}#{sample}")
                        errors[f"{question.key}#{sample}"] = repr(e)
                        bar.update(1)
                        return
                    await asyncio.sleep(0.5 * 2**attempt)
        record = build_record(question, config.format_name, trajectory)
        reason = judge_trajectory(record, config.resolved_metric, config.min_f1)
        record.update(
            sample=sample,
            kept=reason is None,
            reject_reason=reason,
            prompt_ids=trajectory.prompt_ids,
            response_ids=trajectory.response_ids,
            response_mask=trajectory.response_mask,
            # a staged loop's stages, each trained on its own prompt (ReasonRAG; sft_dataset)
            **({"stages": stages} if (stages := trajectory.extra_fields.get(F.STAGES)) else {}),
        )
        store.append(record)
        bar.update(1)

    try:
        await asyncio.gather(*(one(q, s, i) for q, s, i in jobs))
    finally:
        bar.close()
        store.close()
        await runner.aclose()
    stats = demo_stats(store.records.values(), samples=config.samples)
    stats["wall_s"] = round(time.perf_counter() - t0, 1)
    stats["metric"] = config.resolved_metric
    stats["teacher"] = config.teacher
    (out / "stats.json").write_text(json.dumps(stats, indent=1))
    (out / "stats.md").write_text(stats_markdown(stats))
    if missing:
        raise EvalIncomplete(dict(missing), errors)
    return stats


def demo_stats(records: Sequence[Mapping[str, Any]] | Any, samples: int = 1) -> dict[str, Any]:
    """Kept / rejected (by reason) and searches per question, overall and per dataset.

    >>> s = demo_stats([{"dataset": "a", "id": "1", "kept": True, "n_search": 2, "tokens": {"policy": 9}},
    ...                 {"dataset": "a", "id": "2", "kept": False, "reject_reason": "format", "n_search": 0}])
    >>> s["kept"], s["rejected"], s["datasets"]["a"]["searches_per_kept"]
    (1, {'format': 1}, 2.0)
    """
    per: dict[str, dict[str, Any]] = defaultdict(lambda: {"trajectories": 0, "kept": 0, "rejected": Counter()})
    searches: dict[str, list[int]] = defaultdict(list)
    questions: dict[str, set[str]] = defaultdict(set)
    with_demo: dict[str, set[str]] = defaultdict(set)
    model_tokens, total_tokens = [], []
    for r in records:
        ds = r["dataset"]
        d = per[ds]
        d["trajectories"] += 1
        questions[ds].add(r["id"])
        if r.get("kept"):
            d["kept"] += 1
            with_demo[ds].add(r["id"])
            searches[ds].append(int(r.get("n_search") or 0))
            if "response_mask" in r:
                model_tokens.append(sum(r["response_mask"]))
                total_tokens.append(len(r["prompt_ids"]) + len(r["response_ids"]))
        else:
            d["rejected"][r.get("reject_reason") or "unknown"] += 1
    datasets = {}
    for ds, d in sorted(per.items()):
        s = searches[ds]
        datasets[ds] = {
            "questions": len(questions[ds]),
            "questions_with_demo": len(with_demo[ds]),
            "trajectories": d["trajectories"],
            "kept": d["kept"],
            "rejected": dict(d["rejected"]),
            "searches_per_kept": round(sum(s) / len(s), 3) if s else None,
            "search_depth_histogram": dict(sorted(Counter(s).items())),
        }
    rejected: Counter = Counter()
    for d in per.values():
        rejected.update(d["rejected"])
    n = sum(d["trajectories"] for d in per.values())
    return {
        "samples_per_question": samples,
        "trajectories": n,
        "kept": sum(d["kept"] for d in per.values()),
        "rejected": dict(rejected),
        "keep_rate": round(sum(d["kept"] for d in per.values()) / n, 4) if n else None,
        "mean_model_tokens": round(sum(model_tokens) / len(model_tokens), 1) if model_tokens else None,
        "mean_total_tokens": round(sum(total_tokens) / len(total_tokens), 1) if total_tokens else None,
        "datasets": datasets,
    }


def stats_markdown(stats: Mapping[str, Any]) -> str:
    """``stats.md``: one row per dataset."""
    lines = [
        f"Demonstrations: {stats['kept']} kept of {stats['trajectories']} trajectories "
        f"(metric {stats.get('metric')}, teacher {stats.get('teacher')}); rejected {stats['rejected']}.",
        "",
        "| dataset | questions | with a demo | kept | rejected | searches per kept | search depths |",
        "|---|---|---|---|---|---|---|",
    ]
    for ds, d in stats["datasets"].items():
        lines.append(
            f"| {ds} | {d['questions']} | {d['questions_with_demo']} | {d['kept']} | {d['rejected'] or '-'} | "
            f"{d['searches_per_kept']} | {d['search_depth_histogram']} |"
        )
    return "\n".join(lines) + "\n"
