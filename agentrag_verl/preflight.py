"""``agentrag-verl preflight``: a training command checked the way verl starts it, without Ray or a GPU.

A GPU run that fails in its first minutes costs a queue slot and a model load; most such failures are visible in
the config. For the exact command a user would run (``python -m verl.trainer.main_ppo ...``, or the
``agentrag-verl train-local ...`` of a recipe's local profile), :func:`check_command`:

1. runs verl's own entry point, ``verl.trainer.main_ppo.main`` (its ``@hydra.main``: the config path, name and
   overrides of the command; ``auto_set_device``; ``validate_config``), with only ``run_ppo`` replaced, so nothing
   starts Ray. Hydra's own bookkeeping is kept out of the working directory (its run folder is a temporary one, no
   ``.hydra`` copy, logging untouched); the config is the one a cluster run composes;
2. on that config, runs the checks verl makes later, while it builds its workers, that need no GPU:

   - ``typed configs``: ``omega_conf_to_dataclass`` of the algorithm, actor, rollout, ref (renamed as the engine
     worker renames it) and critic configs; the model and critic configs load the model's config files when the
     model is a local folder (a hub id is not downloaded: those two are then skipped);
   - ``batch sizes``: each PPO mini-batch (``ppo_mini_batch_size`` × ``rollout.n`` trajectories) splits evenly over
     the data-parallel ranks of the actor and of the critic, and a rank's share into whole micro-batches (without
     dynamic batch sizes; the critic's engine reads ``critic.fsdp``); the GPUs split into whole rollout replicas
     (TP × DP × PP); dynamic batch sizing is on or off for actor and log-probs together, and every token budget
     holds one full-length sequence; a ``separate_async`` rollout pool splits into whole replicas too;
   - ``trainer mode``: verl's V1 trainer of ``trainer.v1.trainer_mode`` is constructed (its own checks of the mode,
     its replay buffer and sampler settings); only its ``init``, which starts the workers, is not run;
   - ``agent loops``: the agent-loop YAML resolves as verl resolves it, every ``_target_`` imports and is an
     ``AgentLoopBase``, the default loop is one of them, an ``agent_loop_manager_class`` loads, the rollout engine
     can stop at our stop strings (:mod:`agentrag_verl.agent_loops.sampling`), and the options of our loops are
     valid (:class:`~agentrag_verl.agent_loops.config.SearchLoopConfig`);
   - ``reward manager``: verl resolves and constructs it (``load_reward_manager``: unknown ``reward_kwargs`` fail);
   - ``ignored settings``: a value verl 0.9.1 defines but never acts on (:data:`IGNORED_SETTINGS`) is refused rather
     than silently dropped;
   - ``old log-probs``: PPO's old log-probs taken from the rollout (verl's bypass mode) need untruncated sampling
     (no top-k, top-p 1), because the engine returns the log-probs of the truncated distribution it sampled from;
   - ``training length``: where the training files are on this machine, the run reaches
     ``trainer.total_training_steps`` before its epochs run out, and its learning-rate warm-up ends inside the run.

The checks read what verl's worker code asserts (``verl/workers/engine_workers.py``, ``verl/trainer/ppo/v1/``),
restated here because those asserts run only on started workers.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import math
import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Check", "IGNORED_SETTINGS", "PreflightError", "Report", "check_command", "check_config", "main_ppo_args"]

MAIN_PPO = "verl.trainer.main_ppo"
STARTUP = "main_ppo start-up (compose, validate_config)"
"""The first check's name: verl's own entry point up to where it would start Ray."""
HYDRA_QUIET = ("hydra.output_subdir=null", "hydra/job_logging=none", "hydra/hydra_logging=none")
"""Hydra runtime settings the preflight adds: no ``.hydra`` copy of the config, logging left as it is (the run
folder itself goes to a temporary directory). They change nothing in the composed config."""


class PreflightError(ValueError):
    """The command is not one the preflight can read (message says what it expected)."""


@dataclass
class Check:
    """One check: its name, ``ok`` / ``failed`` / ``skipped``, and what it found."""

    name: str
    status: str
    detail: str = ""


@dataclass
class Report:
    """What :func:`check_command` found for one command."""

    command: list[str]
    checks: list[Check] = field(default_factory=list)
    config: Any = None
    """The config ``main_ppo`` composed and validated (an OmegaConf ``DictConfig``), once start-up passed."""

    @property
    def ok(self) -> bool:
        return all(c.status != "failed" for c in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == "failed"]

    def format(self) -> str:
        marks = {"ok": "ok  ", "failed": "FAIL", "skipped": "skip"}
        return "\n".join(f"{marks[c.status]} {c.name}" + (f": {c.detail}" if c.detail else "") for c in self.checks)


def _ignored_over_sample_rate(cfg: Any) -> str | None:
    rate = cfg.actor_rollout_ref.rollout.get("over_sample_rate", 0) or 0
    if rate:
        return (
            f"actor_rollout_ref.rollout.over_sample_rate={rate}: verl 0.9.1 defines this setting but no rollout reads "
            "it, so every request would still be awaited; remove it (or set 0)"
        )
    return None


def _ignored_max_num_gen_batches(cfg: Any) -> str | None:
    from agentrag_verl.dynamic_sampling import BoundedDynamicSampling, uses_bounded_sampler

    sampler = f"{BoundedDynamicSampling.__module__}.{BoundedDynamicSampling.__name__}"
    limit = _select(cfg, "algorithm.filter_groups.max_num_gen_batches", 0) or 0
    enabled = _select(cfg, "algorithm.filter_groups.enable", False)
    if limit > 0 and enabled and not uses_bounded_sampler(cfg):
        return (
            f"algorithm.filter_groups.max_num_gen_batches={limit}: verl 0.9.1's V1 replay buffer ignores it (it only "
            "logs a warning), so dynamic sampling would regenerate without bound; set "
            f"trainer.v1.sampler.custom_sampler to {sampler} "
            "(the multi-stage recipe does), or set max_num_gen_batches=0 for unbounded regeneration"
        )
    return None


IGNORED_SETTINGS: dict[str, Callable[[Any], str | None]] = {
    "actor_rollout_ref.rollout.over_sample_rate": _ignored_over_sample_rate,
    "algorithm.filter_groups.max_num_gen_batches": _ignored_max_num_gen_batches,
}
"""Config keys verl 0.9.1 accepts and then does not act on, each with the test that refuses a value that would be
silently dropped (``None`` when the value is harmless)."""


def _select(cfg: Any, key: str, default: Any = None) -> Any:
    """``OmegaConf.select`` with ``default`` for a missing or null key."""
    from omegaconf import OmegaConf

    value = OmegaConf.select(cfg, key, default=default)
    return default if value is None else value


# --------------------------------------------------------------------------------------------- the command


def main_ppo_args(command: Sequence[str]) -> list[str]:
    """The arguments ``main_ppo`` gets from ``command`` (its config path and name, then the overrides).

    ``command`` is ``[python] -m verl.trainer.main_ppo ARGS...`` or ``[agentrag-verl] train-local ...`` (the local
    profile: the main_ppo command train-local would run is built without building anything).

    >>> main_ppo_args(["python3", "-m", "verl.trainer.main_ppo", "--config-name=x", "trainer.nnodes=2"])
    ['--config-name=x', 'trainer.nnodes=2']
    """
    argv = list(command)
    for i in range(len(argv) - 1):
        if argv[i] == "-m" and argv[i + 1] == MAIN_PPO:
            return argv[i + 2 :]
    if "train-local" in argv:
        from agentrag_verl.local_cpu.train_local import preflight_main_ppo_args

        return preflight_main_ppo_args(argv[argv.index("train-local") + 1 :])
    raise PreflightError(
        f"expected a `python -m {MAIN_PPO} ...` or an `agentrag-verl train-local ...` command, got "
        f"{' '.join(argv[:4])}{' ...' if len(argv) > 4 else ''}; pass the command a run script prints with DRY_RUN=1"
    )


@contextlib.contextmanager
def _main_ppo_without_ray(captured: list[Any]) -> Iterator[Any]:
    """verl's ``main_ppo`` module with ``run_ppo`` recording the config instead of starting Ray; errors raised."""
    import verl.trainer.main_ppo as main_ppo

    saved_run, saved_env = main_ppo.run_ppo, os.environ.get("HYDRA_FULL_ERROR")
    main_ppo.run_ppo = lambda config, task_runner_class: captured.append(config)
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra re-raises the job's exception instead of printing and exiting
    try:
        yield main_ppo
    finally:
        main_ppo.run_ppo = saved_run
        if saved_env is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = saved_env


def check_command(command: Sequence[str]) -> Report:
    """Run ``command``'s start-up through verl's ``main_ppo`` (Ray stubbed), then :func:`check_config`."""
    report = Report(list(command))
    try:
        args = main_ppo_args(command)
    except (PreflightError, OSError, ValueError) as e:
        report.checks.append(Check("command", "failed", str(e)))
        return report
    captured: list[Any] = []
    with tempfile.TemporaryDirectory(prefix="agentrag-preflight-") as run_dir:
        saved_argv = sys.argv
        sys.argv = [f"{MAIN_PPO}.py", *args, f"hydra.run.dir={run_dir}", *HYDRA_QUIET]
        try:
            with _main_ppo_without_ray(captured) as main_ppo:
                main_ppo.main()
        except Exception as e:  # the error main_ppo would stop with on the cluster
            report.checks.append(Check(STARTUP, "failed", _one_line(e)))
            return report
        finally:
            sys.argv = saved_argv
    if not captured:
        report.checks.append(Check(STARTUP, "failed", "run_ppo was not reached"))
        return report
    report.checks.append(Check(STARTUP, "ok"))
    report.config = captured[0]
    report.checks.extend(check_config(captured[0]))
    return report


# --------------------------------------------------------------------------------------------- the checks


def check_config(cfg: Any) -> list[Check]:
    """The worker-construction checks of the module docstring, on a config ``main_ppo`` composed and validated."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy

    cfg = copy.deepcopy(cfg)
    model_dir = _local_model(cfg.actor_rollout_ref.model.path)
    with warnings.catch_warnings():  # need_critic warns that GRPO has none, which main_ppo has said already
        warnings.simplefilter("ignore")
        use_ref, use_critic = need_reference_policy(cfg), need_critic(cfg)
    checks = []
    for name, fn in (
        ("typed configs", lambda: _typed_configs(cfg, model_dir, use_ref, use_critic)),
        ("batch sizes", lambda: _batch_sizes(cfg, use_critic)),
        ("trainer mode", lambda: _trainer_mode(cfg)),
        ("agent loops", lambda: _agent_loops(cfg)),
        ("reward manager", lambda: _reward_manager(cfg, model_dir)),
        ("ignored settings", lambda: _ignored_settings(cfg)),
        ("old log-probs", lambda: _old_log_probs(cfg)),
        ("training length", lambda: _training_length(cfg)),
    ):
        try:
            detail = fn()
        except _Skip as skip:
            checks.append(Check(name, "skipped", str(skip)))
        except Exception as e:
            checks.append(Check(name, "failed", _one_line(e)))
        else:
            checks.append(Check(name, "ok", detail or ""))
    return checks


class _Skip(Exception):
    """A check that cannot run on this machine (its reason)."""


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if isinstance(e, (ValueError, AssertionError)) else f"{type(e).__name__}: {text}"


def _local_model(path: Any) -> Path | None:
    return Path(str(path)) if path and Path(str(path)).is_dir() else None


def _typed_configs(cfg: Any, model_dir: Path | None, use_ref: bool, use_critic: bool) -> str:
    from omegaconf import open_dict
    from verl.utils.config import omega_conf_to_dataclass

    arr = cfg.actor_rollout_ref
    omega_conf_to_dataclass(cfg.algorithm)
    omega_conf_to_dataclass(arr.actor)
    omega_conf_to_dataclass(arr.rollout)
    done = ["algorithm", "actor", "rollout"]
    if use_ref:  # as ActorRolloutRefWorker.init_model renames the ref section before converting it
        ref = copy.deepcopy(arr.ref)
        with open_dict(ref):
            ref.ppo_mini_batch_size = arr.actor.ppo_mini_batch_size
            ref.ppo_micro_batch_size = ref.pop("log_prob_micro_batch_size", None)
            ref.ppo_micro_batch_size_per_gpu = ref.pop("log_prob_micro_batch_size_per_gpu", None)
            ref.use_dynamic_bsz = ref.pop("log_prob_use_dynamic_bsz", False)
            ref.ppo_max_token_len_per_gpu = ref.pop("log_prob_max_token_len_per_gpu", None)
        omega_conf_to_dataclass(ref)
        done.append("ref")
    skipped = []
    if model_dir is None:
        skipped.append(f"model and critic (the model {arr.model.path} is not a local folder: not loaded)")
    else:
        omega_conf_to_dataclass(arr.model)
        done.append("model")
        if use_critic:
            omega_conf_to_dataclass(cfg.critic)
            done.append("critic")
    return ", ".join(done) + (f"; skipped {skipped[0]}" if skipped else "")


def _sp_size(section: Any) -> int:
    return int(section.get("ulysses_sequence_parallel_size", 1) or 1)


def _batch_sizes(cfg: Any, use_critic: bool) -> str:
    arr, trainer = cfg.actor_rollout_ref, cfg.trainer
    n_gpus = int(trainer.n_gpus_per_node) * int(trainer.nnodes)
    n = int(arr.rollout.n)
    problems = []

    def split(role: str, mini: int, sp: int, micro_key: str, micro: Any) -> int:
        if n_gpus % sp:
            problems.append(f"{role}: {n_gpus} GPUs do not split into sequence-parallel groups of {sp}")
            return 0
        dp = n_gpus // sp
        if (mini * n) % dp:
            problems.append(
                f"{role}: a PPO mini-batch of {mini} prompts x rollout.n {n} = {mini * n} trajectories does not split "
                f"over its {dp} data-parallel ranks ({trainer.n_gpus_per_node} GPUs x {trainer.nnodes} nodes / "
                f"sequence parallel {sp}); change {role}.ppo_mini_batch_size or the GPU count"
            )
        elif micro and (mini * n // dp) % int(micro):
            problems.append(
                f"{role}: a rank's share of a PPO mini-batch, {mini * n // dp} trajectories, does not split into "
                f"micro-batches of {micro_key}={micro} (verl asserts it at the first update, after the first "
                f"rollout); choose a micro-batch size that divides it"
            )
        return dp

    # without dynamic batch sizes the engine splits each rank's share into micro-batches of a fixed count (None:
    # dynamic); the V1 trainer builds the critic's engine from critic.fsdp (the local profile points it at the
    # critic's own size)
    actor_micro = None if arr.actor.use_dynamic_bsz else arr.actor.get("ppo_micro_batch_size_per_gpu")
    key = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"
    actor_dp = split(
        "actor_rollout_ref.actor", int(arr.actor.ppo_mini_batch_size), _sp_size(arr.actor), key, actor_micro
    )
    if use_critic:
        engine = cfg.critic.get("fsdp") or {}
        critic_micro = None if engine.get("use_dynamic_bsz", True) else engine.get("micro_batch_size_per_gpu")
        key = "critic.fsdp.micro_batch_size_per_gpu"
        split("critic", int(cfg.critic.ppo_mini_batch_size), _sp_size(cfg.critic), key, critic_micro)
    rollout = arr.rollout
    replica = int(rollout.tensor_model_parallel_size) * int(rollout.get("data_parallel_size", 1) or 1)
    replica *= int(rollout.get("pipeline_model_parallel_size", 1) or 1)
    if n_gpus % replica:
        problems.append(
            f"rollout: {n_gpus} GPUs do not split into replicas of tensor x data x pipeline parallel = {replica}; "
            "change actor_rollout_ref.rollout.tensor_model_parallel_size or the GPU count"
        )
    dynamic = bool(arr.actor.use_dynamic_bsz)
    if dynamic != bool(rollout.log_prob_use_dynamic_bsz):
        problems.append(
            f"actor_rollout_ref.actor.use_dynamic_bsz={dynamic} but actor_rollout_ref.rollout.log_prob_use_dynamic_bsz="
            f"{bool(rollout.log_prob_use_dynamic_bsz)}: the actor worker requires both the same"
        )
    longest = int(cfg.data.max_prompt_length) + int(cfg.data.max_response_length)
    budgets = []
    if dynamic:
        budgets += [
            ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", arr.actor.ppo_max_token_len_per_gpu),
            ("actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu", rollout.log_prob_max_token_len_per_gpu),
        ]
    if arr.ref.get("log_prob_use_dynamic_bsz"):
        budgets.append(("actor_rollout_ref.ref.log_prob_max_token_len_per_gpu", arr.ref.log_prob_max_token_len_per_gpu))
    if use_critic and cfg.critic.get("use_dynamic_bsz"):
        budgets.append(("critic.ppo_max_token_len_per_gpu", cfg.critic.ppo_max_token_len_per_gpu))
    for key, budget in budgets:
        if budget is None or int(budget) < longest:
            problems.append(
                f"{key}={budget} is below one full-length sequence (data.max_prompt_length + max_response_length = "
                f"{longest}): dynamic batching cannot place such a sequence; raise it to at least {longest}"
            )
    if cfg.trainer.v1.trainer_mode == "separate_async":  # the standalone rollout pool splits into replicas too
        pool = int(rollout.get("nnodes", 0) or 0) * int(rollout.get("n_gpus_per_node", 0) or 0)
        if pool and pool % replica:
            problems.append(
                f"rollout pool: {pool} GPUs (actor_rollout_ref.rollout.nnodes x n_gpus_per_node) do not split into "
                f"replicas of {replica}"
            )
    if problems:
        raise ValueError("; ".join(problems))
    return f"{n_gpus} GPUs, actor data parallel {actor_dp}, rollout replicas of {replica} GPU(s)" + (
        ", dynamic batch sizes" if dynamic else ""
    )


def _trainer_mode(cfg: Any) -> str:
    """verl's V1 trainer of the mode, constructed from the resolved config as its task runner constructs it: the mode's
    own checks (separate_async's batch equality, rollout pool and weight-sync backend), the KL controller, and the
    replay buffer with its sampler settings (a custom sampler included). Its workers start only in ``init()``."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1 import get_trainer_cls

    resolved = copy.deepcopy(cfg)
    OmegaConf.resolve(resolved)
    trainer = get_trainer_cls(resolved.trainer.v1.trainer_mode)(config=resolved)
    return f"{type(trainer).__name__}, replay buffer {type(trainer.replay_buffer).__name__}"


def _agent_loops(cfg: Any) -> str:
    from hydra.utils import get_class
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase
    from verl.utils.import_utils import load_class_from_fqn, resolve_config_path

    from agentrag_verl.agent_loops.config import SearchLoopConfig
    from agentrag_verl.agent_loops.sampling import check_rollout_engine
    from agentrag_verl.agent_loops.search_agent_loop import SearchAgentLoop

    rollout = cfg.actor_rollout_ref.rollout
    agent = rollout.agent
    path = agent.get("agent_loop_config_path")
    if not path:
        return "no agent-loop YAML (verl's own loops)"
    entries = {e.name: e for e in OmegaConf.load(resolve_config_path(path))}
    default = agent.get("default_agent_loop")
    if default not in entries:
        raise ValueError(
            f"actor_rollout_ref.rollout.agent.default_agent_loop={default!r} is not in {path} "
            f"(names: {sorted(entries)})"
        )
    ours = 0
    for name, entry in entries.items():
        cls = get_class(entry._target_)
        if not issubclass(cls, AgentLoopBase):
            raise ValueError(f"agent loop {name!r}: {entry._target_} is not a verl AgentLoopBase")
        if issubclass(cls, SearchAgentLoop):
            options = {k: v for k, v in OmegaConf.to_container(entry).items() if k != "_target_"}
            SearchLoopConfig.from_sources(options, OmegaConf.to_container(rollout.get("custom") or {}))
            ours += 1
    if ours:
        check_rollout_engine(rollout.name, bool(rollout.get("skip_tokenizer_init", False)))
    manager = agent.get("agent_loop_manager_class")
    if manager:
        load_class_from_fqn(manager, "AgentLoopManager")
    return f"{len(entries)} loops from {Path(resolve_config_path(path)).name}, default {default}" + (
        f", manager {manager.rsplit('.', 1)[-1]}" if manager else ""
    )


def _reward_manager(cfg: Any, model_dir: Path | None) -> str:
    from verl.trainer.ppo.reward import load_reward_manager

    tokenizer = _tokenizer(str(model_dir)) if model_dir is not None else None
    manager = load_reward_manager(cfg, tokenizer)
    return type(manager).__name__ + ("" if tokenizer is not None else " (built without the model's tokenizer)")


@functools.lru_cache(maxsize=4)
def _tokenizer(model_dir: str) -> Any:
    """The model's tokenizer, loaded once per folder (a preflight of several commands reuses it)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def _ignored_settings(cfg: Any) -> str:
    problems = [message for check in IGNORED_SETTINGS.values() if (message := check(cfg))]
    if problems:
        raise ValueError("; ".join(problems))
    return ""


def _old_log_probs(cfg: Any) -> str:
    """PPO's old log-probs taken from the rollout (verl's bypass mode) must be the actor's own at the rollout's
    weights. The rollout engine returns the log-probs of the distribution it sampled from, after top-k and top-p
    (vLLM's ``logprobs_mode: processed_logprobs``, verl's default), while the actor's are untruncated: with
    truncation every sampled token's ratio starts below 1 and the clip range is off-centre from the first update."""
    from omegaconf import OmegaConf

    if not OmegaConf.select(cfg, "algorithm.rollout_correction.bypass_mode", default=False):
        return "recomputed by the actor"
    rollout = cfg.actor_rollout_ref.rollout
    top_k, top_p = int(rollout.get("top_k", -1) or -1), float(rollout.get("top_p", 1.0) or 1.0)
    truncated = [s for s, on in ((f"top_k={top_k}", top_k > 0), (f"top_p={top_p}", top_p < 1.0)) if on]
    if truncated:
        raise ValueError(
            f"algorithm.rollout_correction.bypass_mode=true takes the rollout's log-probs as PPO's old ones, but the "
            f"rollout samples with {' and '.join(truncated)}: its log-probs are of the truncated distribution and the "
            "actor's are not, so every ratio starts off 1; sample untruncated (actor_rollout_ref.rollout.top_k=-1 "
            "top_p=1.0) or let the actor recompute them (bypass_mode=false)"
        )
    return "the rollout's (bypass mode), untruncated sampling"


def _train_rows(files: Any) -> int | None:
    """Rows of the training parquet files, or ``None`` when one of them is not on this machine."""
    import pyarrow.parquet as pq

    paths = [files] if isinstance(files, str) else list(files)
    if not paths or not all(Path(str(p)).is_file() for p in paths):
        return None
    return sum(pq.ParquetFile(str(p)).metadata.num_rows for p in paths)


def _training_length(cfg: Any) -> str:
    rows = _train_rows(cfg.data.train_files)
    if rows is None:
        raise _Skip("the training files are not on this machine")
    return training_length(cfg, rows)


def training_length(cfg: Any, train_rows: int) -> str:
    """Check that the run is as long as it says, given ``train_rows`` training prompts.

    verl's V1 loop stops at ``trainer.total_training_steps`` or when ``trainer.total_epochs`` run out, whichever comes
    first, and saves and validates its last step only when it stops at the former; the optimizers' warm-up counts
    ``lr_warmup_steps_ratio`` of ``total_training_steps``.

    Raises:
        ValueError: the epochs run out first, or a warm-up outlasts the run.
    """
    steps_per_epoch = train_rows // int(cfg.data.train_batch_size)
    if steps_per_epoch < 1:
        raise ValueError(
            f"{train_rows} training prompts do not fill one batch of data.train_batch_size={cfg.data.train_batch_size}"
        )
    epochs = int(cfg.trainer.total_epochs)
    total = cfg.trainer.total_training_steps
    reachable = steps_per_epoch * epochs
    planned = reachable if total is None else int(total)
    if planned > reachable:
        raise ValueError(
            f"trainer.total_training_steps={planned}, but {train_rows} prompts / batch {cfg.data.train_batch_size} = "
            f"{steps_per_epoch} steps per epoch x trainer.total_epochs={epochs} end the run at step {reachable}, "
            "without a final checkpoint or validation; raise total_epochs to "
            f"{math.ceil(planned / steps_per_epoch)} or lower total_training_steps to {reachable}"
        )
    for key in ("actor_rollout_ref.actor.optim", "critic.optim"):
        ratio = _select(cfg, f"{key}.lr_warmup_steps_ratio", 0.0)
        warmup = _select(cfg, f"{key}.lr_warmup_steps", -1)
        warmup_steps = int(warmup) if warmup is not None and int(warmup) > 0 else int(float(ratio) * planned)
        if warmup_steps >= planned:
            raise ValueError(f"{key}: a warm-up of {warmup_steps} steps does not end inside the {planned}-step run")
    return f"{planned} steps = {planned / steps_per_epoch:.1f} epochs of {train_rows} prompts"


# --------------------------------------------------------------------------------------------- command line


def run(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else list(args.command)
    if not command:
        raise ValueError(
            f"give the command to check after --, e.g. agentrag-verl preflight -- python -m {MAIN_PPO} "
            "--config-path=recipes/<paper>/config --config-name=<config> [overrides...]"
        )
    with contextlib.redirect_stdout(sys.stderr):  # main_ppo prints its own notices
        report = check_command(command)
    print(report.format())
    print("preflight: " + ("passed" if report.ok else f"{len(report.failures)} check(s) failed"))
    return 0 if report.ok else 1


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "preflight",
        help="Check a training command as verl's main_ppo starts it (no Ray, no GPU).",
        description=__doc__.split("\n\n")[1],
    )
    p.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        help="After --: `python -m verl.trainer.main_ppo ...` or `agentrag-verl train-local ...` (what a run script "
        "prints with DRY_RUN=1; PREFLIGHT=1 runs this check on it).",
    )
    p.set_defaults(func=run)
