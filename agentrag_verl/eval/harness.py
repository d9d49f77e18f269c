"""The evaluation loop: every question of every dataset, for each format, concurrently, resumable.

For each ``(format, question)`` the harness rolls out the format's agent loop (:class:`~agentrag_verl.eval.runner.
AgentLoopRunner`), computes the string metrics (:func:`~agentrag_verl.eval.metrics.question_metrics`), optionally
the judge metrics (:mod:`~agentrag_verl.eval.judging`) and the reward designs (:mod:`~agentrag_verl.eval.rewards`),
and appends one JSON line to ``<out>/<format>/results.jsonl`` as soon as the question is done
(:class:`~agentrag_verl.jsonl.JsonlStore`: flushed and fsynced, a torn last line cut off on restart, one writer). A
restart skips the questions already there, so an interrupted run loses at most the questions in flight. No question
is dropped: a question whose rollout fails is retried (``question_retries``), and if it still fails the run goes on
with the others and ends with :class:`EvalIncomplete` naming it (rerun the same command to retry only the missing
ones). A judged metric that could not be computed for a question (a judge verdict that failed after the judge
client's retries: ``judge_acc``, a method's judged metric, a judged reward design) fails the question the same way
(:func:`unjudged_metrics`): its result is not written, so the metrics never silently leave it out and the rerun
judges it again. A failure that repeats (the same error for every question) is logged once at WARNING, its repeats at
DEBUG, and counted in :class:`EvalIncomplete`'s one line.

``<out>/run.json`` records what the results depend on (policy, tokenizer, sampling, loop options, judge, reward
options); restarting with different values is refused unless ``overwrite`` (which deletes the old results), so one
results file never mixes two policies. Adding formats or datasets to a finished run is allowed. ``run.json`` is
written only after every endpoint (policy, retriever, judge) has answered (:func:`check_endpoints`), and a
``run.json`` with no result beside it (a run that stopped before its first question) never blocks a rerun.

Outputs once all questions are done: ``metrics.json`` (per format: per-dataset metrics and their average),
``metrics.md`` (markdown tables), ``accuracy_vs_search_depth.png`` and ``search_depth_histogram.png``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentrag_verl.data.flashrag import Question
from agentrag_verl.eval.runner import AgentLoopRollout, AgentLoopRunner, RunnerConfig
from agentrag_verl.failure_log import FailureLog
from agentrag_verl.jsonl import JsonlStore, read_records

__all__ = [
    "EvalConfig",
    "EvalIncomplete",
    "EndpointError",
    "open_results",
    "read_results",
    "result_key",
    "run_eval",
    "evaluate",
    "build_record",
    "check_endpoints",
    "unjudged_metrics",
]

logger = logging.getLogger(__name__)

RESULTS_FILE = "results.jsonl"
RUN_FILE = "run.json"


class EndpointError(ConnectionError):
    """An endpoint (policy, retriever) does not answer as it must; the message names the URL and the flag to fix."""


class EvalIncomplete(RuntimeError):
    """Some questions failed after their retries, or a judged metric of theirs could not be computed; their keys are
    in :attr:`missing`, the cause of each in :attr:`errors`. Rerun to retry them.

    The message counts the questions by cause (equal causes once, most frequent first), so a failure that hits every
    question is one line, not one per question.
    """

    def __init__(self, missing: dict[str, list[str]], errors: dict[str, str]) -> None:
        self.missing = missing
        self.errors = errors
        n = sum(len(v) for v in missing.values())
        causes = FailureLog(None)
        for key, cause in errors.items():
            causes.record(cause, "", example=key)
        super().__init__(
            f"{n} question(s) could not be evaluated: {causes.summary()}. Their results are not written; the others "
            "are. Fix the cause and rerun the same command: finished questions are skipped."
        )


@dataclass(frozen=True)
class EvalConfig:
    """One evaluation run."""

    runner: RunnerConfig
    """Policy endpoint, tokenizer, retriever, sampling, loop options."""
    formats: Sequence[str]
    """Trajectory formats to evaluate (the declared methods' names; each runs its method's agent loop)."""
    out_dir: str
    """Output directory (results, metrics, plots)."""
    concurrency: int = 16
    """Questions in flight at once (over all formats)."""
    judge: Mapping[str, Any] | None = None
    """JudgeConfig mapping for judge accuracy, HiPRAG OSR/USR and the judged reward designs; None = no judge."""
    rewards: Sequence[str] = ()
    """Reward designs to score trajectories with (:func:`agentrag_verl.eval.rewards.design_formats`)."""
    reward_kwargs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per-design ``reward.reward_kwargs`` overrides."""
    question_retries: int = 2
    """Extra attempts for a question whose rollout raised (server errors after the client's own retries)."""
    overwrite: bool = False
    """Delete earlier results in ``out_dir`` instead of resuming."""
    progress: bool = True
    """Show a progress bar."""
    judge_metrics: bool = True
    """Compute judge accuracy and the methods' judged metrics with ``judge``; False uses the judge only for the reward
    designs."""
    plot_metric: str = "cem"
    """Accuracy metric of the accuracy-vs-search-depth plot (``em``, ``cem``, ``f1`` or ``judge_acc``)."""

    def fingerprint(self) -> dict[str, Any]:
        """What the results depend on (compared on resume). Endpoint URLs are left out: the same policy served on
        another port (the demo picks free ports) must resume, so the served model name and tokenizer identify it."""
        r = asdict(self.runner)
        for key in ("api_key_env", "request_timeout_s", "base_url", "retriever_url"):
            r.pop(key, None)
        judge = dict(self.judge) if self.judge else None
        if judge:
            judge = {k: judge.get(k) for k in ("model", "temperature", "max_tokens") if k in judge}
        return {
            "runner": r,
            "judge": judge,
            # judged metrics are computed only with a judge: results without them must not resume a judged run
            "judge_metrics": bool(self.judge) and self.judge_metrics,
            "rewards": sorted(self.rewards),
            "reward_kwargs": {k: dict(v) for k, v in self.reward_kwargs.items()},
        }


def result_key(record: Mapping[str, Any]) -> str:
    """Resume key of an eval result: ``"<dataset>/<id>"``.

    >>> result_key({"dataset": "nq", "id": "test_7"})
    'nq/test_7'
    """
    return f"{record['dataset']}/{record['id']}"


REDO = "its question is then evaluated again; or rerun with --overwrite"
"""What deleting a corrupt line of a results file means (for the error message)."""


def open_results(path: str | os.PathLike[str]) -> JsonlStore:
    """The results file of one format as a :class:`~agentrag_verl.jsonl.JsonlStore` keyed by :func:`result_key`."""
    return JsonlStore(path, key=result_key, redo=REDO)


def read_results(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """The finished results of one format by :func:`result_key`, read without writing ({} when there are none)."""
    return read_records(path, result_key, redo=REDO)


def build_record(question: Question, format_name: str, trajectory: AgentLoopRollout) -> dict[str, Any]:
    """The result record of one question (without judge / reward parts)."""
    from agentrag_verl.eval.metrics import question_metrics

    extra = trajectory.extra_fields
    policy_tokens = int(sum(trajectory.response_mask))
    aux = extra.get("agentrag_aux_cost") or {}
    record: dict[str, Any] = {
        "dataset": question.dataset,
        "id": question.id,
        "format": format_name,
        "question": question.question,
        "golden_answers": list(question.golden_answers),
        "metadata": question.metadata,
    }
    record.update(question_metrics(format_name, trajectory.response, question.golden_answers, extra))
    record.update(
        tokens={
            "prompt": len(trajectory.prompt_ids),
            "policy": policy_tokens,
            "observation": len(trajectory.response_ids) - policy_tokens,
            "aux": int(aux.get("completion_tokens", 0) or 0),
            "aux_prompt": int(aux.get("prompt_tokens", 0) or 0),
        },
        num_turns=trajectory.num_turns,
        budget_exhausted=bool(extra.get("agentrag_budget_exhausted", False)),
        length_exhausted=bool(extra.get("agentrag_length_exhausted", False)),
        retriever_errors=int(extra.get("agentrag_retriever_errors", 0) or 0),
        steps=extra.get("agentrag_steps", []),
        intermediate_answers=extra.get("agentrag_intermediate_answers", []),
        reanswers=extra.get("agentrag_reanswers", []),
        timings=extra.get("agentrag_timings", {}),
        response=trajectory.response,
        judge=None,
        rewards={},
    )
    return record


async def check_endpoints(config: EvalConfig, *, policy: bool = True, timeout_s: float = 10.0) -> None:
    """Ask the policy server (``GET /models``) and the retriever (one ``POST /retrieve``) whether they answer.

    Raises:
        EndpointError: Naming the URL, what came back (an echoed API key redacted), and the flag to fix.
    """
    import os

    from agentrag_verl.http import httpx_client

    runner = config.runner
    async with httpx_client(timeout_s, 2) as client:
        if policy:
            url = runner.base_url.rstrip("/") + "/models"
            key = os.environ.get(runner.api_key_env, "") if runner.api_key_env else ""
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            flag = "--base-url" + (" and --api-key-env" if runner.api_key_env else "")
            response = await _ask(client, "GET", url, "policy server", flag, headers=headers)
            try:
                served = [m.get("id") for m in response.json().get("data", [])]
            except (ValueError, AttributeError):
                served = None
            if served and runner.model not in served:
                raise EndpointError(
                    f"the policy server at {runner.base_url} serves {served}, not --model {runner.model!r}; pass one "
                    "of those names (--model)."
                )
        await _ask(
            client,
            "POST",
            runner.retriever_url,
            "retriever",
            "--retriever-url",
            json={"queries": ["endpoint check"], "topk": 1},
        )


async def _ask(client: Any, method: str, url: str, what: str, flag: str, **kwargs: Any) -> Any:
    from agentrag_verl.http import RequestError, httpx_request

    try:
        response = await httpx_request(client, method, url, **kwargs)
        if response.status != 200:  # a redirect is not an answer either
            raise RequestError("client_error", f"HTTP {response.status}: {response.detail()}", status=response.status)
        return response
    except RequestError as e:
        if e.status is None:  # connection refused, timeout: "does not answer"
            raise EndpointError(f"the {what} at {url} does not answer ({e.message}); start it or fix {flag}.") from None
        raise EndpointError(f"the {what} at {url} answered {e.message}; check {flag}.") from None
    except Exception as e:  # a malformed URL
        raise EndpointError(
            f"the {what} at {url} does not answer ({type(e).__name__}: {e}); start it or fix {flag}."
        ) from None


def unjudged_metrics(record: Mapping[str, Any]) -> str | None:
    """Which judged metrics of a result could not be computed (a judge verdict failed after the client's retries),
    as one cause for :class:`EvalIncomplete`; ``None`` when all were.

    The cause names the metric and, for the correctness judge, the judge's error; it holds no count or key, so
    that the same failure of many questions is one cause.

    >>> unjudged_metrics({"judge": {"ok": False, "error": "client_error: HTTP 401"}, "hiprag": {"failures": 2},
    ...                   "rewards": {"searchr1": {"judge_failures": 0.0}, "hiprag": {"judge_failures": 1.0}}})
    'judge verdicts failed for judge_acc (client_error: HTTP 401), hiprag_osr/hiprag_usr, reward/hiprag'
    """
    from agentrag_verl.eval.hooks import method_hooks

    failed = []
    judge = record.get("judge")
    if isinstance(judge, Mapping) and not judge.get("ok", True):
        failed.append(f"judge_acc ({judge.get('error')})")
    for name, hooks in method_hooks().items():
        entry = record.get(name)
        cause = hooks.failed(entry) if isinstance(entry, Mapping) else None
        if cause:
            failed.append(cause)
    for design, info in (record.get("rewards") or {}).items():
        if isinstance(info, Mapping) and info.get("judge_failures"):
            failed.append(f"reward/{design}")
    return f"judge verdicts failed for {', '.join(failed)}" if failed else None


def _has_results(out: Path) -> bool:
    return any(f.stat().st_size > 0 for f in out.glob(f"*/{RESULTS_FILE}"))


def _check_run_file(out: Path, config: EvalConfig) -> None:
    run_file = out / RUN_FILE
    current = config.fingerprint()
    if run_file.exists() and not config.overwrite and not _has_results(out):
        logger.info("%s: %s has no results beside it; replacing it with this run's", out, RUN_FILE)
    elif run_file.exists() and not config.overwrite:
        previous = json.loads(run_file.read_text())
        if previous.get("fingerprint") != current:
            diff = sorted(
                k
                for k in set(previous.get("fingerprint", {})) | set(current)
                if previous.get("fingerprint", {}).get(k) != current.get(k)
            )
            raise ValueError(
                f"{out} holds results of a different evaluation (differs in {diff}; see {run_file}). Use another "
                "--out directory, or --overwrite to delete those results."
            )
    if config.overwrite:
        for fmt_dir in out.iterdir() if out.exists() else []:
            if fmt_dir.is_dir() and (fmt_dir / RESULTS_FILE).exists():
                shutil.rmtree(fmt_dir)
    out.mkdir(parents=True, exist_ok=True)
    run_file.write_text(json.dumps({"fingerprint": current}, indent=1))


async def evaluate(
    config: EvalConfig,
    datasets: Mapping[str, Sequence[Question]],
    *,
    runner: AgentLoopRunner | None = None,
) -> dict[str, Any]:
    """Run the evaluation (module docstring) and return ``metrics.json``'s content.

    Args:
        config: The run.
        datasets: ``{dataset: questions}`` (:func:`agentrag_verl.eval.data.load_datasets`).
        runner: An existing runner (tests); default: built from ``config.runner``.

    Raises:
        EvalIncomplete: Some questions failed after their retries (all others are saved).
        ValueError: ``out_dir`` holds results of another configuration, or an option is invalid.
    """
    from tqdm.auto import tqdm

    from agentrag_verl.eval.hooks import method_hooks
    from agentrag_verl.eval.judging import judge_correctness
    from agentrag_verl.eval.metrics import aggregate
    from agentrag_verl.eval.report import write_reports
    from agentrag_verl.registry import methods

    formats = [str(f).strip().lower() for f in config.formats]
    known = [m.name for m in methods()]
    bad = [f for f in formats if f not in known]
    if bad or not formats:
        raise ValueError(f"Unknown or missing format(s) {bad}; choose from {known} (--format).")
    hooks = method_hooks()
    if config.concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {config.concurrency} (--concurrency).")
    out = Path(config.out_dir)
    own_runner = runner is None
    # every endpoint answers before anything is written: a run that cannot start leaves no run.json behind
    await check_endpoints(config, policy=own_runner)
    judge = None
    if config.judge:
        from agentrag_verl.judges import JudgeClient

        judge = JudgeClient.from_config(dict(config.judge))
        try:
            await judge.check()
        except BaseException:
            await judge.aclose()
            raise
    stores: dict[str, JsonlStore] = {}
    scorer = None
    t0 = time.perf_counter()
    missing: dict[str, list[str]] = {}
    errors: dict[str, str] = {}
    attempt_failures = FailureLog(logger)
    try:
        _check_run_file(out, config)
        stores = {f: open_results(out / f / RESULTS_FILE) for f in formats}
        todo = [
            (f, i, q) for f in formats for qs in datasets.values() for i, q in enumerate(qs) if q.key not in stores[f]
        ]
        total = sum(len(qs) for qs in datasets.values()) * len(formats)
        if runner is None:
            runner = AgentLoopRunner(config.runner)
        if config.rewards:
            from agentrag_verl.eval.rewards import RewardScorer

            root = config.runner.retriever_url.rstrip("/").removesuffix("/retrieve")
            scorer = RewardScorer(
                list(config.rewards),
                runner.tokenizer,
                judge=config.judge,
                retriever_root=root,
                reward_kwargs=config.reward_kwargs,
            )
        semaphore = asyncio.Semaphore(config.concurrency)
        bar = tqdm(total=total, initial=total - len(todo), desc="eval", unit="q", disable=not config.progress)

        async def one(format_name: str, index: int, question: Question) -> None:
            async with semaphore:
                t_start = time.perf_counter()
                error: BaseException | None = None
                for attempt in range(config.question_retries + 1):
                    try:
                        trajectory = await runner.run(question, format_name, index)
                        break
                    except Exception as e:  # retried, then reported; never silently dropped
                        error = e
                        cause = f"{type(e).__name__}: {e}"
                        attempt_failures.record(
                            cause,
                            f"{format_name} {question.key} attempt {attempt + 1} failed: {cause} (the same failure "
                            "of other attempts is logged at DEBUG and counted at the end)",
                        )
                        if attempt < config.question_retries:
                            await asyncio.sleep(min(2.0**attempt, 10.0))
                else:
                    missing.setdefault(format_name, []).append(question.key)
                    errors[f"{format_name}:{question.key}"] = f"{type(error).__name__}: {error}"
                    bar.update(1)
                    return
                record = build_record(question, format_name, trajectory)
                if judge is not None and config.judge_metrics:
                    record["judge"] = await judge_correctness(judge, record["prediction"], question.golden_answers)
                    for name, method_hook in hooks.items():
                        judged = await method_hook.judged(
                            judge, format_name, trajectory.response, trajectory.extra_fields
                        )
                        if judged is not None:
                            record[name] = {**(record.get(name) or {}), **judged}
                if scorer is not None:
                    record["rewards"] = await scorer.score(trajectory, question, format_name)
                unjudged = unjudged_metrics(record)
                if unjudged:  # a metric that could not be computed fails its question, as a failed rollout does
                    missing.setdefault(format_name, []).append(question.key)
                    errors[f"{format_name}:{question.key}"] = unjudged
                    bar.update(1)
                    return
                record["wall_s"] = round(time.perf_counter() - t_start, 3)
                stores[format_name].append(record)
                bar.update(1)

        await asyncio.gather(*(one(f, i, q) for f, i, q in todo))
        bar.close()
    finally:
        for store in stores.values():
            store.close()
        if own_runner and runner is not None:
            await runner.aclose()
        if judge is not None:
            await judge.aclose()
        if scorer is not None:
            await scorer.aclose()

    order = list(datasets)
    summary: dict[str, Any] = {"formats": {}, "datasets": order, "wall_s": round(time.perf_counter() - t0, 1)}
    for f in formats:
        records = [stores[f].records[q.key] for qs in datasets.values() for q in qs if q.key in stores[f]]
        summary["formats"][f] = aggregate(records, order)
        summary["formats"][f]["missing"] = len(missing.get(f, []))
    if scorer is not None:
        summary["judge_metrics"] = scorer.judge_metrics()
    (out / "metrics.json").write_text(json.dumps(summary, indent=1))
    write_reports(summary, out, plot_metric=config.plot_metric)
    if missing:
        raise EvalIncomplete(missing, errors)
    return summary


def run_eval(config: EvalConfig, datasets: Mapping[str, Sequence[Question]]) -> dict[str, Any]:
    """Synchronous wrapper of :func:`evaluate`."""
    return asyncio.run(evaluate(config, datasets))
