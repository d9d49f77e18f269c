"""Every run script's exact command starts as it would on a GPU cluster: the command a script prints with DRY_RUN=1
runs through verl's own ``main_ppo`` entry (its ``@hydra.main``, ``validate_config``), with only Ray's start stubbed,
and then through the checks verl makes while it builds its workers that need no GPU (``agentrag_verl.preflight``).

Every script, in the knob variants a GPU user reaches first (the defaults, 8 GPUs on one node, 8 GPUs on each of two
nodes), the multi-stage stages and Search-P1 with a 3B model, and the local profile of every script. The model is the
tiny test model (a local folder, so the critic and tokenizer checks run), named like the paper's model where the
script picks settings by the size in the name.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from agentrag_verl.preflight import check_command, training_length

from .conftest import CASES, RECIPES, REPO, Recipe, compose, dry_run, option, split_main_ppo

REMOTE_SERVICES = {
    "RETRIEVER_URL": "http://10.0.0.5:8000/retrieve",
    "JUDGE_URL": "http://10.0.0.6:8001/v1",
    "EMBEDDING_URL": "http://10.0.0.7:8002/v1",
}
GPU_VARIANTS = {
    "defaults": {},
    "8gpus-1node": {"N_GPUS": "8", "NNODES": "1"},  # with an extra Hydra override, which comes last and wins
    # several nodes: the services must be on an address every node reaches (loopback URLs are refused)
    "8gpus-2nodes": {"N_GPUS": "8", "NNODES": "2", **REMOTE_SERVICES},
    # verl's async V1 trainers (agentrag_verl/config/trainer_mode): partial rollout on the training GPUs, and a
    # rollout pool of its own (ROLLOUT_N_GPUS beside the trainer's N_GPUS)
    "colocate_async": {"TRAINER_MODE": "colocate_async"},
    "separate_async": {"TRAINER_MODE": "separate_async", "N_GPUS": "4", "ROLLOUT_N_GPUS": "4"},
}


@pytest.fixture(autouse=True)
def _elsewhere(tmp_path, monkeypatch):
    # not the repository: nothing may depend on the working directory (a Ray worker's is not the repository)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")


@pytest.fixture(scope="module")
def model_named(tiny_model_dir, tmp_path_factory):
    """``model_named(MODEL)``: the tiny model in a folder named like ``MODEL`` (the scripts read the size from it)."""
    root = tmp_path_factory.mktemp("models")

    def named(model: str | None) -> str:
        if not model:
            return str(tiny_model_dir)
        link = root / model.rsplit("/", 1)[-1]
        if not link.exists():
            link.symlink_to(tiny_model_dir, target_is_directory=True)
        return str(link)

    return named


def _failure(recipe: Recipe, variant: str, report) -> str:
    return f"{recipe.id} [{variant}]: the command stops at start-up:\n{report.format()}\ncommand: {report.command}"


@pytest.mark.parametrize("variant", list(GPU_VARIANTS))
@pytest.mark.parametrize("recipe", CASES, ids=lambda c: c.id)
def test_gpu_command_starts(recipe, variant, model_named):
    knobs = {**GPU_VARIANTS[variant], "MODEL": model_named(recipe.env.get("MODEL"))}
    extra = ["trainer.total_epochs=3"] if variant == "8gpus-1node" else []
    argv = dry_run(recipe, *extra, **knobs)
    config_path, name, overrides = split_main_ppo(argv)
    assert Path(config_path) == RECIPES / recipe.script.split("/")[0] / "config" and name == recipe.config
    report = check_command(argv)
    assert report.ok, _failure(recipe, variant, report)
    checked = {c.name: c for c in report.checks}
    assert checked["typed configs"].status == "ok" and "model" in checked["typed configs"].detail
    assert f"default {recipe.agent}" in checked["agent loops"].detail
    assert checked["reward manager"].detail == recipe.reward
    # the knobs reached the config main_ppo composed
    cfg = report.config
    assert cfg.algorithm.adv_estimator == recipe.algo and cfg.actor_rollout_ref.model.path == knobs["MODEL"]
    assert cfg.trainer.nnodes == int(knobs.get("NNODES", 1))
    mode = knobs.get("TRAINER_MODE", "sync")
    assert cfg.trainer.v1.trainer_mode == mode and checked["trainer mode"].detail.startswith(
        {"sync": "PPOTrainerSync", "colocate_async": "PPOTrainerColocateAsync", "separate_async": "PPOTrainerSepar"}[
            mode
        ]
    )
    if "RETRIEVER_URL" in knobs:
        assert cfg.actor_rollout_ref.rollout.custom.agentrag.retriever_url == knobs["RETRIEVER_URL"]
    if extra:
        assert overrides[-1] == extra[0] and cfg.trainer.total_epochs == 3
    # on GPU the multi-stage recipe batches its 16k-token sequences by tokens (Table 5); the local profile does not
    assert cfg.actor_rollout_ref.actor.use_dynamic_bsz is (recipe.reward == "MultistageRewardManager")


@pytest.mark.parametrize("recipe", CASES, ids=lambda c: c.id)
def test_local_profile_command_starts(recipe, tmp_path):
    work = tmp_path / "local"
    argv = dry_run(recipe, profile="local", LOCAL_WORK=str(work))
    assert argv[1] == "train-local" and option(argv, "--reward-name") == recipe.reward
    report = check_command(argv)
    assert report.ok, _failure(recipe, "PROFILE=local", report)
    assert not work.exists()  # the preflight builds nothing in the work folder
    # train-local's CPU settings, then the script's: the same recipe YAML on this box
    cfg = report.config
    # (trainer.device: main_ppo's auto_set_device puts the platform it detects there; train-local runs it with
    # VERL_PLATFORM=cpu, this process with whatever verl found at import)
    assert cfg.trainer.total_training_steps == 2 and cfg.trainer.n_gpus_per_node == 1
    assert cfg.data.train_files == str(work / "data" / "train.parquet")
    assert cfg.actor_rollout_ref.rollout.custom.agentrag.retriever_url.startswith("http://127.0.0.1:")
    assert cfg.actor_rollout_ref.actor.fsdp_config.param_offload is False
    # micro-batches by count: a recipe's token budget (multi-stage: 18432) packs ~10 CPU-length sequences at once
    arr = cfg.actor_rollout_ref
    assert arr.actor.use_dynamic_bsz is False and arr.rollout.log_prob_use_dynamic_bsz is False
    assert arr.ref.log_prob_use_dynamic_bsz is False
    assert cfg.algorithm.adv_estimator == recipe.algo
    if recipe.algo == "gae":
        assert cfg.critic.strategy == "fsdp2" and cfg.critic.model.path == cfg.actor_rollout_ref.model.path
        # verl's V1 trainer builds the critic's engine from critic.fsdp (dynamic batches of 32768 tokens unless
        # told otherwise); the local profile has it take the critic's own micro-batch size
        from verl.utils.config import omega_conf_to_dataclass

        engine = omega_conf_to_dataclass(cfg.critic.fsdp)
        assert engine.use_dynamic_bsz is False
        assert engine.micro_batch_size_per_gpu == engine.infer_micro_batch_size_per_gpu
        assert engine.micro_batch_size_per_gpu == cfg.critic.ppo_micro_batch_size_per_gpu == 4
        # fp32 like the actor (train-local): verl's default is bf16 autocast, emulated and slow on a CPU
        assert dict(engine.mixed_precision) == {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}


def _recipe(script: str, **env: str) -> Recipe:
    return next(c for c in CASES if c.script == script and all(c.env.get(k) == v for k, v in env.items()))


def _failed(report) -> dict[str, str]:
    return {c.name: c.detail for c in report.failures}


@pytest.mark.parametrize(
    ("script", "args", "check", "message"),
    [
        # the bug this test was written for: no log-prob micro-batch, stopped by validate_config
        (
            "hiprag/run_grpo.sh",
            ["actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=null"],
            "main_ppo start-up (compose, validate_config)",
            "Please set at least one of 'actor_rollout_ref.ref.log_prob_micro_batch_size'",
        ),
        # mini-batches of 100 trajectories over 8 GPUs: the engine worker's assert, met only once the model has loaded
        # (validate_config checks the whole batch only: 512 splits over 8)
        (
            "searchr1/run_ppo.sh",
            ["actor_rollout_ref.actor.ppo_mini_batch_size=100"],
            "batch sizes",
            "100 trajectories does not split over its 8 data-parallel ranks",
        ),
        # 256 prompts over 8 ranks in micro-batches of 3: the engine's assert, at the first update after the rollout
        (
            "autosearch/run_ppo.sh",
            ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3"],
            "batch sizes",
            "32 trajectories, does not split into micro-batches of actor_rollout_ref.actor.ppo_micro_batch_size_per",
        ),
        ("multistage/run_dapo.sh", ["trainer.n_gpus_per_node=6"], "batch sizes", "replicas of tensor x data"),
        (
            "multistage/run_dapo.sh",
            ["actor_rollout_ref.actor.ppo_max_token_len_per_gpu=16384"],
            "batch sizes",
            "is below one full-length sequence",
        ),
        (
            "searchp1/run_grpo.sh",
            ["actor_rollout_ref.rollout.over_sample_rate=0.1"],
            "ignored settings",
            "no rollout reads it",
        ),
        (
            "multistage/run_dapo.sh",
            ["trainer.v1.sampler.custom_sampler.path=null", "trainer.v1.sampler.custom_sampler.name=null"],
            "ignored settings",
            "max_num_gen_batches=10: verl 0.9.1's V1 replay buffer ignores it",
        ),
        ("searchp1/run_grpo.sh", ["actor_rollout_ref.rollout.skip_tokenizer_init=true"], "agent loops", "SGLang"),
        # the learning benchmark's first Search-P1 run: actor/ppo_kl 0.013-0.015 a step instead of 2e-6
        (
            "searchp1/run_grpo.sh",
            ["algorithm.rollout_correction.bypass_mode=true"],
            "old log-probs",
            "rollout samples with top_k=20 and top_p=0.95",
        ),
        (
            "searchr1/run_grpo.sh",
            ["actor_rollout_ref.rollout.agent.default_agent_loop=searchr1"],
            "agent loops",
            "is not in",
        ),
        ("hiprag/run_ppo.sh", ["+reward.reward_kwargs.lambda_q=0.4"], "reward manager", "lambda_q"),
        ("searchr1/run_grpo.sh", ["trainer.v1.trainer_mode=async"], "trainer mode", "Unknown trainer 'async'"),
    ],
    ids=lambda v: v if isinstance(v, str) and v.endswith(".sh") else None,
)
def test_each_check_names_what_would_stop_the_run(script, args, check, message, model_named):
    report = check_command(dry_run(_recipe(script), *args, MODEL=model_named(None)))
    failed = _failed(report)
    assert check in failed and message in failed[check], report.format()


def test_training_length_against_the_data(model_named):
    """verl's V1 loop ends at total_training_steps or when the epochs run out: the ReasonRAG preset's 9,000 questions
    (3 x 3,000, ``data prepare --preset reasonrag_questions``) at batch 512 give 17 steps per epoch."""
    from agentrag_verl.data.prepare import presets

    train = next(o for o in presets()["reasonrag_questions"].outputs if o.name == "train")
    rows = sum(s.sample for s in train.sources)
    assert rows == 9000
    recipe = _recipe("reasonrag/run_grpo.sh")
    config_path, name, overrides = split_main_ppo(dry_run(recipe, MODEL=model_named(None)))
    cfg = compose(config_path, name, overrides)
    assert training_length(cfg, rows) == "255 steps = 15.0 epochs of 9000 prompts"
    # Search-R1's 1005 steps (the recipe before) stop at step 255 with no final checkpoint, after a 286-step warm-up
    with pytest.raises(ValueError, match="end the run at step 255"):
        training_length(compose(config_path, name, [*overrides, "trainer.total_training_steps=1005"]), rows)
    # a warm-up stated in steps that outlasts the run (0.285 x 1005 = 286, the old recipe's)
    warm = compose(config_path, name, [*overrides, "actor_rollout_ref.actor.optim.lr_warmup_steps=286"])
    with pytest.raises(ValueError, match="a warm-up of 286 steps does not end inside the 255-step run"):
        training_length(warm, rows)


def test_training_length_runs_where_the_data_is(tmp_path, model_named):
    import pandas as pd

    train = tmp_path / "train.parquet"
    pd.DataFrame({"x": range(1000)}).to_parquet(train)
    recipe = _recipe("reasonrag/run_grpo.sh")
    report = check_command(dry_run(recipe, f"data.train_files={train}", MODEL=model_named(None)))
    assert _failed(report)["training length"].startswith("trainer.total_training_steps=255, but 1000 prompts")


def test_preflight_knob_runs_the_check_on_the_scripts_command(model_named):
    """PREFLIGHT=1 runs ``agentrag-verl preflight`` on the script's exact command and exits with its status (the
    passing case is every test above, in-process)."""
    env = {**os.environ, "PREFLIGHT": "1", "MODEL": model_named(None), "PYTHON": "python3"}
    env["PATH"] = f"{Path(__import__('sys').executable).parent}{os.pathsep}{env['PATH']}"
    bad = subprocess.run(
        ["bash", str(RECIPES / "searchr1/run_grpo.sh"), "actor_rollout_ref.actor.ppo_mini_batch_size=100"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert bad.returncode == 1 and "FAIL batch sizes" in bad.stdout and "preflight: 1 check(s) failed" in bad.stdout
    assert "ok   main_ppo start-up (compose, validate_config)" in bad.stdout  # the rest of the report is printed
    refused = subprocess.run(
        ["bash", str(RECIPES / "searchr1/run_grpo.sh")], capture_output=True, text=True, env={**env, "PREFLIGHT": "0"}
    )
    assert refused.returncode == 2 and "PREFLIGHT='0' is not understood" in refused.stderr


def test_a_command_that_is_not_a_training_command():
    report = check_command(["python3", "-m", "verl.trainer.sft_trainer", "--config-name=sft"])
    assert not report.ok and "expected a `python -m verl.trainer.main_ppo ...`" in report.failures[0].detail


@pytest.mark.parametrize("script", sorted({c.script for c in CASES}))
def test_loopback_services_are_refused_on_several_nodes(script):
    env = {k: v for k, v in os.environ.items() if k not in REMOTE_SERVICES}
    done = subprocess.run(
        ["bash", str(RECIPES / script)],
        capture_output=True,
        text=True,
        env={**env, "DRY_RUN": "1", "NNODES": "2", "STAGE1_CKPT": "/ckpt/global_step_1"},
        cwd=REPO,
    )
    assert done.returncode == 2 and not done.stdout
    assert "RETRIEVER_URL=http://127.0.0.1:8000/retrieve points at this machine, but NNODES=2" in done.stderr


def test_learning_benchmark_samples_what_its_actor_scores(tmp_path, monkeypatch):
    """The learning benchmark's RL stage takes vLLM's log-probs as PPO's old ones (bypass mode). vLLM returns them for
    the distribution it sampled from, after top-k / top-p, while the actor's are untruncated; so the stage samples
    untruncated, at the recipe's temperature (Search-P1: 0.6 with top-k 20 / top-p 0.95 in the recipe). Checked on
    the command verl starts: the recipe's local profile with the stage's overrides."""
    from agentrag_verl.demo.pipeline import grpo_overrides
    from tests.benchmarks.test_learning import settings_of

    s = settings_of(monkeypatch, "--design", "searchp1")
    sizes = {"LOCAL_BATCH_SIZE": str(s.grpo_batch_size), "LOCAL_ROLLOUT_N": str(s.grpo_rollout_n)}
    argv = dry_run(
        _recipe("searchp1/run_grpo.sh"), *grpo_overrides(s), profile="local", LOCAL_WORK=str(tmp_path), **sizes
    )
    report = check_command(argv)
    assert report.ok, _failure(_recipe("searchp1/run_grpo.sh"), "learning benchmark", report)
    rollout = report.config.actor_rollout_ref.rollout
    assert report.config.algorithm.rollout_correction.bypass_mode is True
    assert (rollout.temperature, rollout.top_k, rollout.top_p) == (0.6, -1, 1.0)


def test_learning_benchmark_micro_batches_divide_an_overridden_critic_mini_batch(tmp_path, monkeypatch):
    """``--override critic.ppo_mini_batch_size=3`` (more critic updates a step) with 30 prompts a step: the critic's
    micro-batches must divide its mini-batch of 3, not only the step's 30 trajectories. AutoSearch run 5 stopped at its
    first critic update on micro-batches of 2, after 6 minutes of rollout; the preflight now sees it in the config."""
    from agentrag_verl.demo.pipeline import grpo_overrides
    from tests.benchmarks.test_learning import settings_of

    argv = "--design autosearch --algo ppo --batch-size 30 --override critic.ppo_mini_batch_size=3".split()
    s = settings_of(monkeypatch, *argv)
    sizes = {"LOCAL_BATCH_SIZE": str(s.grpo_batch_size), "LOCAL_ROLLOUT_N": str(s.grpo_rollout_n)}
    recipe = _recipe("autosearch/run_ppo.sh")
    report = check_command(dry_run(recipe, *grpo_overrides(s), profile="local", LOCAL_WORK=str(tmp_path), **sizes))
    assert report.ok, _failure(recipe, "learning benchmark", report)
    assert (report.config.critic.ppo_mini_batch_size, report.config.critic.fsdp.micro_batch_size_per_gpu) == (3, 1)
    assert report.config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 2  # of the actor's 30

    before = [*grpo_overrides(s), "critic.ppo_micro_batch_size_per_gpu=2"]  # what run 5 started with
    report = check_command(dry_run(recipe, *before, profile="local", LOCAL_WORK=str(tmp_path), **sizes))
    assert "critic: a rank's share of a PPO mini-batch, 3 trajectories" in _failed(report)["batch sizes"]
