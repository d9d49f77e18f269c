"""Every recipe's keys exist in verl and are read, its values are the papers', and every run script passes ``bash -n``
and prints its exact command with DRY_RUN=1 (both profiles). That the command starts, through verl's own main_ppo
and the worker checks: test_preflight.py."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import CONSOLE

from .conftest import CASES, PAPERS, RECIPES, REPO, compose, dry_run, split_main_ppo

EXTENSION_KEYS = (
    "reward.reward_kwargs",  # read by our managers (verl's DAPO manager reads it too)
    "actor_rollout_ref.rollout.custom",  # RolloutConfig.custom, our agent loops' run-wide options
    "actor_rollout_ref.rollout.agent.agent_loop_manager_class",  # RolloutConfig field, absent from rollout.yaml
    "trainer.v1.sampler.sampler_kwargs",  # handed to the custom sampler, which refuses unknown keys
)


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch):
    # relative paths in the recipes (agent_loop_config_path) resolve from the working directory, as on a cluster
    monkeypatch.chdir(REPO)


def all_scripts() -> list[Path]:
    shared = [RECIPES / "common/run_common.sh", RECIPES / "ray/submit.sh", *sorted(RECIPES.glob("*/recipe.sh"))]
    return sorted({RECIPES / c.script for c in CASES}) + shared


@pytest.mark.parametrize("script", all_scripts(), ids=lambda p: str(p.relative_to(RECIPES)))
def test_bash_n(script):
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_every_paper_has_a_recipe_with_readme():
    for paper in PAPERS:
        assert any(c.script.startswith(f"{paper}/") for c in CASES), paper
        readmes = list((RECIPES / paper).glob("README*.md"))
        assert readmes, f"recipes/{paper} has no README"


def _flatten(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, dict):
        out = []
        for k, v in node.items():
            out += _flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    return [prefix]


def test_recipe_keys_exist_in_verl():
    """A misspelt key in a recipe YAML would be silently added by Hydra; every key must exist in verl's
    ppo_trainer (or be one of our documented extension points)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from omegaconf import OmegaConf

    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        base = OmegaConf.to_container(hydra_compose(config_name="ppo_trainer"), resolve=False)

    def exists(key: str) -> bool:
        node = base
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    for path, key in recipe_keys():
        assert exists(key), f"{path.name}: unknown key {key}"


def recipe_keys() -> list[tuple[Path, str]]:
    """Every key the recipes' own YAML files and the package configs they include (``agentrag_verl/config``) set
    (file, dotted key), but those under :data:`EXTENSION_KEYS`, which our own loaders validate (unknown keys fail
    there)."""
    import agentrag_verl.config

    files = sorted({p for c in CASES for p in (RECIPES / c.script.split("/")[0] / "config").glob("*.yaml")})
    assert len(files) >= 12
    files += sorted(Path(agentrag_verl.config.__file__).parent.rglob("*.yaml"))
    keys = []
    for path in files:
        data = yaml.safe_load(path.read_text())
        data.pop("hydra", None)
        data.pop("defaults", None)
        keys += [(path, key) for key in _flatten(data) if not key.startswith(EXTENSION_KEYS)]
    return keys


def _reading_sources() -> str:
    """The Python source that can read a config value: verl's (without its config definitions: a dataclass field or
    a YAML default is not a reader) and ours (without the preflight, which names the keys verl ignores to refuse
    them)."""
    import verl

    import agentrag_verl
    import agentrag_verl.preflight

    verl_root = Path(verl.__file__).parent
    definitions = (verl_root / "trainer" / "config", verl_root / "workers" / "config")
    files = [p for p in verl_root.rglob("*.py") if not any(d in p.parents for d in definitions)]
    files += [
        p for p in Path(agentrag_verl.__file__).parent.rglob("*.py") if p != Path(agentrag_verl.preflight.__file__)
    ]
    return "\n".join(p.read_text(errors="replace") for p in files)


def test_every_recipe_key_is_read():
    """A key verl defines but never reads changes nothing (Search-P1's ``over_sample_rate: 0.1`` did): each key a
    recipe sets must be read, by attribute or by name, somewhere in verl's code or ours. A key that only names a
    field (``n``, ``path``) matches trivially; the values verl reads only to warn that it ignores them are refused by
    ``agentrag-verl preflight`` (``IGNORED_SETTINGS``, run on every recipe by test_preflight.py)."""
    sources = _reading_sources()
    unread = [
        f"{path.name}: {key}"
        for path, key in recipe_keys()
        if not re.search(rf"[.\"']{re.escape(key.rsplit('.', 1)[-1])}\b", sources)
    ]
    assert not unread, f"set by a recipe, read by nothing: {unread}"


def composed(script: str, **env: str) -> Any:
    recipe = next(c for c in CASES if c.script == script and all(c.env.get(k) == v for k, v in env.items()))
    path, name, overrides = split_main_ppo(dry_run(recipe))
    return compose(path, name, overrides)


def test_paper_values():
    """Spot checks of the values each recipe must carry (the papers' setup sections)."""
    c = composed("hiprag/run_ppo.sh")
    # HiPRAG §4.3: 400 steps, checkpoint every 50, temperature / top-p 1, top-3, λf 0.2, λp 0.4, judges' models
    assert (c.trainer.total_training_steps, c.trainer.save_freq) == (400, 50)
    assert (c.actor_rollout_ref.rollout.temperature, c.actor_rollout_ref.rollout.top_p) == (1.0, 1.0)
    assert c.actor_rollout_ref.rollout.custom.agentrag.retriever_topk == 3
    rk = c.reward.reward_kwargs
    assert (rk.lambda_f, rk.lambda_p) == (0.2, 0.4)
    assert (rk.over_search_judge.model, rk.under_search_judge.model) == ("gpt-4.1-mini", "gpt-5-mini")
    assert composed("hiprag/run_grpo.sh").actor_rollout_ref.rollout.n == 5  # §4.3 group of 5

    c = composed("multistage/run_dapo.sh", STAGE="1")
    a, r = c.actor_rollout_ref.actor, c.actor_rollout_ref.rollout
    # DAPO clip-higher + token-mean + dynamic sampling; Table 5: n 32, batch 32, mini 32, lr 1e-6, kl 1e-4, top-5
    assert (a.clip_ratio_low, a.clip_ratio_high, a.loss_agg_mode) == (0.2, 0.28, "token-mean")
    assert c.algorithm.filter_groups.enable is True
    assert (r.n, c.data.train_batch_size, a.ppo_mini_batch_size, a.optim.lr, a.kl_loss_coef) == (32, 32, 32, 1e-6, 1e-4)
    assert r.custom.agentrag.retriever_topk == 5 and c.reward.reward_kwargs.beta == 0.3
    assert c.reward.reward_kwargs.stage == 1 and c.trainer.total_training_steps == 250  # two-run: stops at switch
    c2 = composed("multistage/run_dapo.sh", STAGE="2")
    assert c2.reward.reward_kwargs.stage == 2 and c2.trainer.resume_mode == "resume_path"
    assert c2.trainer.resume_from_path == "/ckpt/global_step_250" and c2.trainer.total_training_steps == 500
    cs = composed("multistage/run_dapo.sh", STAGE="switch")
    assert cs.reward.reward_kwargs.stage is None and cs.reward.reward_kwargs.stage_switch_step == 250

    c = composed("searchp1/run_grpo.sh")
    a, r = c.actor_rollout_ref.actor, c.actor_rollout_ref.rollout
    # Search-P1 B.1: GRPO n 16 (7B), clip 0.2/0.28, KL 0.001 low_var_kl, lr 1e-6 warm-up 0.1, batch 512/256,
    # SGLang, temperature 0.6, top-k 20, top-p 0.95; B.2: λ 0.3/0.6/0.1
    assert (r.n, r.name, r.temperature, r.top_k, r.top_p) == (16, "sglang", 0.6, 20, 0.95)
    assert (a.clip_ratio_low, a.clip_ratio_high, a.kl_loss_coef, a.kl_loss_type) == (0.2, 0.28, 0.001, "low_var_kl")
    assert (a.optim.lr, a.optim.lr_warmup_steps_ratio, c.data.train_batch_size, a.ppo_mini_batch_size) == (
        1e-6,
        0.1,
        512,
        256,
    )
    rk = c.reward.reward_kwargs
    assert (rk.lambda_p, rk.lambda_a, rk.lambda_f) == (0.3, 0.6, 0.1)
    assert rk.planner_cache == "data/searchp1/planners.jsonl"
    c3 = composed("searchp1/run_grpo.sh", MODEL="Qwen/Qwen2.5-3B-Instruct")  # B.1: n 32, micro-batch 16, memory 0.75
    a3, r3 = c3.actor_rollout_ref.actor, c3.actor_rollout_ref.rollout
    assert (r3.n, a3.ppo_micro_batch_size_per_gpu, r3.gpu_memory_utilization) == (32, 16, 0.75)
    assert (r.n, a.ppo_micro_batch_size_per_gpu, r.gpu_memory_utilization) == (16, 8, 0.8)  # 7B

    c = composed("autosearch/run_ppo.sh")
    # AutoSearch App. C: 1005 steps, actor 1e-6 / critic 1e-5, warm-up 0.285 / 0.015, batch 512 / mini 256,
    # 4096 tokens in total; per-step rewards through the step-reward agent-loop manager
    assert c.trainer.total_training_steps == 1005
    assert (c.actor_rollout_ref.actor.optim.lr, c.critic.optim.lr) == (1e-6, 1e-5)
    assert (c.actor_rollout_ref.actor.optim.lr_warmup_steps_ratio, c.critic.optim.lr_warmup_steps_ratio) == (
        0.285,
        0.015,
    )
    assert c.data.max_prompt_length + c.data.max_response_length == 4096
    assert c.actor_rollout_ref.rollout.agent.agent_loop_manager_class.endswith("StepRewardAgentLoopManager")
    assert c.reward.reward_kwargs.per_step is True
    # Eq. 11-12 have no KL term and App. C gives none: no KL in the reward or the loss (HiPRAG's PPO keeps 0.001)
    assert c.algorithm.use_kl_in_reward is False and c.actor_rollout_ref.actor.use_kl_loss is False
    h = composed("hiprag/run_ppo.sh")
    assert h.algorithm.use_kl_in_reward is True and h.algorithm.kl_ctrl.kl_coef == 0.001
    g = composed("autosearch/run_grpo.sh")
    assert (
        g.reward.reward_kwargs.per_step is False
        and g.actor_rollout_ref.rollout.agent.get("agent_loop_manager_class") is None
    )

    c = composed("searchr1/run_ppo.sh")
    # Search-R1 v0.3 reward; Search-R1 App. B: KL 0.001 in the reward for PPO, critic on the policy's model
    assert (c.reward.reward_kwargs.variant, c.reward.reward_kwargs.lambda_f) == ("outcome_format", 0.2)
    assert c.algorithm.use_kl_in_reward is True and c.algorithm.kl_ctrl.kl_coef == 0.001
    assert c.critic.model.path == c.actor_rollout_ref.model.path
    c = composed("reasonrag/run_grpo.sh")
    assert c.reward.reward_kwargs.variant == "em" and c.actor_rollout_ref.model.path == "Qwen/Qwen2.5-7B-Instruct"


NO_ACCOUNT_LOGGERS = {"console", "file", "tensorboard"}
"""verl tracker backends that write locally and need no account or API key."""


def _own_trainer_keys(config_dir: Path, name: str) -> dict[str, Any]:
    """The ``trainer`` keys the recipe's own YAML files set (the run config and the ``*_common`` file it includes),
    i.e. what is explicit in the recipe rather than inherited from verl's ``ppo_trainer``."""
    data = yaml.safe_load((config_dir / f"{name}.yaml").read_text())
    own: dict[str, Any] = {}
    for include in data.get("defaults", []):
        if isinstance(include, str) and include not in ("ppo_trainer", "_self_"):
            own.update(yaml.safe_load((config_dir / f"{include}.yaml").read_text()).get("trainer", {}))
    own.update(data.get("trainer", {}))
    return own


@pytest.mark.parametrize("recipe", CASES, ids=lambda c: c.id)
def test_recipe_saves_validates_and_logs_without_an_account(recipe):
    """verl's defaults (save_freq -1, test_freq -1, 30 epochs, logger [console, wandb]) would train for days without
    one checkpoint or validation, and fail at start without a wandb account: every recipe sets its own."""
    config_path, name, overrides = split_main_ppo(dry_run(recipe))
    cfg = compose(config_path, name, overrides)
    assert cfg.trainer.save_freq > 0 and cfg.trainer.test_freq > 0
    assert cfg.trainer.total_training_steps is not None and cfg.trainer.total_training_steps > 0
    own = _own_trainer_keys(Path(config_path), name)
    for key in ("save_freq", "test_freq", "total_training_steps", "logger"):
        assert key in own, f"{name}: trainer.{key} is inherited from verl, not set by the recipe"
    assert set(cfg.trainer.logger) <= NO_ACCOUNT_LOGGERS, cfg.trainer.logger
    # wandb stays one knob away (documented in recipes/README.md)
    wandb = dry_run(recipe, LOGGER="[console,wandb]")
    assert "trainer.logger=[console,wandb]" in wandb
    assert "LOGGER='[console,wandb]'" in (RECIPES / "README.md").read_text()


@pytest.mark.parametrize("name", ["dpo", "sft"])
def test_trl_recipes_save_evaluate_and_log_without_an_account(name):
    cfg = yaml.safe_load((RECIPES / "reasonrag" / "dpo" / f"{name}.yaml").read_text())
    assert cfg["save_strategy"] == "steps" and cfg["save_steps"] > 0
    assert cfg["eval_strategy"] == "steps" and cfg["eval_steps"] > 0
    assert cfg["num_train_epochs"] > 0 and cfg["report_to"] == "none"


def test_multistage_stage2_needs_the_stage1_checkpoint():
    import os

    env = {**os.environ, "STAGE": "2", "STAGE1_CKPT": ""}
    proc = subprocess.run(
        ["bash", str(RECIPES / "multistage/run_dapo.sh")], capture_output=True, text=True, env=env, cwd=REPO
    )
    assert proc.returncode == 2 and "STAGE1_CKPT" in proc.stderr
    bad = subprocess.run(
        ["bash", str(RECIPES / "multistage/run_dapo.sh")],
        capture_output=True,
        text=True,
        env={**os.environ, "STAGE": "3", "DRY_RUN": "1"},
        cwd=REPO,
    )
    assert bad.returncode == 2 and "STAGE='3' is not one of: 1 2 switch" in bad.stderr
    # a dry run of stage 2 without the checkpoint is refused too: the command it would print could not run
    dry = subprocess.run(
        ["bash", str(RECIPES / "multistage/run_dapo.sh")],
        capture_output=True,
        text=True,
        env={**os.environ, "STAGE": "2", "STAGE1_CKPT": "", "DRY_RUN": "1"},
        cwd=REPO,
    )
    assert dry.returncode == 2 and "set STAGE1_CKPT" in dry.stderr and not dry.stdout


def _script(path: str, **env: str) -> subprocess.CompletedProcess:
    import os

    full_env = {k: v for k, v in os.environ.items() if k not in ("DRY_RUN", "PROFILE", "ROLLOUT", "STAGE")}
    full_env.update(PYTHON=sys.executable, AGENTRAG=CONSOLE, **env)
    return subprocess.run(["bash", str(RECIPES / path)], capture_output=True, text=True, env=full_env, cwd=REPO)


SCRIPTS = sorted({c.script for c in CASES}) + ["reasonrag/dpo/run_generate_proguide.sh"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_dry_run_takes_1_true_yes_and_refuses_anything_else(script, tmp_path):
    for value in ("1", "true", "YES"):
        done = _script(script, DRY_RUN=value, STAGE1_CKPT="/ckpt")
        assert done.returncode == 0 and len(done.stdout.strip().splitlines()) == 1, done.stderr
    for value in ("0", "false", "dry"):
        refused = _script(script, DRY_RUN=value)
        assert refused.returncode == 2 and not refused.stdout, refused.stdout
        assert f"DRY_RUN='{value}' is not understood" in refused.stderr


def test_a_dry_run_creates_nothing(tmp_path):
    work = tmp_path / "local_work"
    for script in ("hiprag/run_ppo.sh", "searchp1/run_grpo.sh"):
        done = _script(script, DRY_RUN="1", PROFILE="local", LOCAL_WORK=str(work))
        assert done.returncode == 0, done.stderr
        assert str(work) in done.stdout and not work.exists()
    done = _script("hiprag/run_ppo.sh", DRY_RUN="1", PROFILE="local")
    assert done.returncode == 0 and not (REPO / "outputs" / "local" / "hiprag_ppo").exists()


def test_a_local_run_on_real_data_takes_a_model_data_and_running_services(tmp_path):
    """The local profile's knobs for a real run (benchmarks/learning.py): a warm-started model, prepared data,
    services already running (nothing started for them), the step's sizes; bad values refused before anything."""
    import shlex

    model, data = tmp_path / "model", tmp_path / "data"
    model.mkdir()
    (model / "config.json").write_text("{}")
    data.mkdir()
    for name in ("train.parquet", "test.parquet"):
        (data / name).write_bytes(b"")
    knobs = dict(PROFILE="local", LOCAL_MODEL=str(model), LOCAL_DATA_DIR=str(data), LOCAL_BATCH_SIZE="6",
                 LOCAL_ROLLOUT_N="4", LOCAL_RETRIEVER_URL="http://127.0.0.1:9/retrieve",
                 LOCAL_JUDGE_URL="http://127.0.0.1:7/v1", LOCAL_SAVE_FREQ="5")  # fmt: skip
    done = _script("multistage/run_dapo.sh", DRY_RUN="1", **knobs)
    assert done.returncode == 0, done.stderr
    cmd = shlex.split(done.stdout)
    flags = dict(zip(cmd[2 : cmd.index("--")], cmd[3 : cmd.index("--")], strict=False))
    assert flags["--model"] == str(model) and flags["--batch-size"] == "6" and flags["--rollout-n"] == "4"
    assert flags["--save-freq"] == "5" and "--resume" not in cmd  # a stopped run continues only when asked
    resumed = shlex.split(_script("multistage/run_dapo.sh", DRY_RUN="1", LOCAL_RESUME="yes", **knobs).stdout)
    assert "--resume" in resumed[: resumed.index("--")]
    assert flags["--train-files"] == str(data / "train.parquet") and flags["--val-files"] == str(data / "test.parquet")
    assert "actor_rollout_ref.rollout.custom.agentrag.retriever_url=http://127.0.0.1:9/retrieve" in cmd
    assert "reward.reward_kwargs.judge.base_url=http://127.0.0.1:7/v1" in cmd
    # the query-diversity embeddings come from the same retriever's /encode
    assert "reward.reward_kwargs.embedding.url=http://127.0.0.1:9" in cmd
    for bad, message in (
        ({"LOCAL_MODEL": str(tmp_path)}, "is not a Hugging Face model folder"),
        ({"LOCAL_DATA_DIR": str(tmp_path)}, "must hold train.parquet and test.parquet"),
        ({"LOCAL_BATCH_SIZE": "0"}, "LOCAL_BATCH_SIZE='0'"),
        ({"LOCAL_SAVE_FREQ": "every"}, "LOCAL_SAVE_FREQ='every' must be a whole number"),
        ({"LOCAL_RESUME": "0"}, "LOCAL_RESUME='0' is not understood"),
    ):
        refused = _script("multistage/run_dapo.sh", DRY_RUN="1", **{**knobs, **bad})
        assert refused.returncode == 2 and message in refused.stderr and not refused.stdout


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"ROLLOUT": "tgi"}, "ROLLOUT='tgi' is not one of: vllm sglang"),
        ({"PROFILE": "cluster"}, "PROFILE='cluster' is not one of: gpu local"),
        ({"NNODES": "0"}, "NNODES='0' must be a whole number of at least 1"),
        ({"N_GPUS": "eight"}, "N_GPUS='eight' must be a whole number"),
        # the knobs' earlier names are refused with the new one, never silently ignored
        ({"GPUS_PER_NODE": "4"}, "GPUS_PER_NODE was renamed N_GPUS: set N_GPUS=4"),
        ({"MODEL_PATH": "/models/qwen"}, "MODEL_PATH was renamed MODEL: set MODEL=/models/qwen"),
        ({"LOCAL_STEPS": "-1", "PROFILE": "local"}, "LOCAL_STEPS='-1'"),
    ],
)
def test_run_script_knobs_are_checked(env, message):
    refused = _script("searchr1/run_ppo.sh", DRY_RUN="1", **env)
    assert refused.returncode == 2 and message in refused.stderr and not refused.stdout


def test_model_knob_names_the_run_and_picks_the_size_settings():
    """One script per paper and algorithm: the model is a knob, and what the papers set per model follows it."""
    hiprag = next(c for c in CASES if c.script == "hiprag/run_ppo.sh")
    default = dry_run(hiprag)
    assert "actor_rollout_ref.model.path=Qwen/Qwen2.5-3B-Instruct" in default  # HiPRAG's main setting
    assert "trainer.experiment_name=hiprag-qwen2.5-3b-it-ppo" in default
    other = dry_run(hiprag, MODEL="Qwen/Qwen2.5-7B-Instruct", N_GPUS="8")
    assert "trainer.experiment_name=hiprag-qwen2.5-7b-it-ppo" in other and "trainer.n_gpus_per_node=8" in other
    assert "trainer.default_local_dir=checkpoints/agentrag_hiprag/hiprag-qwen2.5-7b-it-ppo" in other
    searchp1 = next(c for c in CASES if c.script == "searchp1/run_grpo.sh" and not c.env)
    # a name that states no size (a local checkpoint) gets the paper's default (7B) values; explicit knobs win
    local_ckpt = dry_run(searchp1, MODEL="/ckpt/my_policy/", ROLLOUT_N="24")
    assert (
        "actor_rollout_ref.rollout.n=24" in local_ckpt
        and "trainer.experiment_name=searchp1-my_policy-grpo-n24" in local_ckpt
    )
    assert "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8" in local_ckpt
    small = dry_run(searchp1, MODEL="Qwen/Qwen2.5-1.5B-Instruct")
    assert (
        "actor_rollout_ref.rollout.n=32" in small and "trainer.experiment_name=searchp1-qwen2.5-1.5b-grpo-n32" in small
    )


def test_run_scripts_are_named_by_algorithm_not_model():
    names = sorted(p.relative_to(RECIPES).as_posix() for p in RECIPES.glob("*/**/run_*.sh"))
    assert names and not [n for n in names if re.search(r"qwen|llama|\d+(\.\d+)?b_", n, re.I)], names
    for c in CASES:
        assert re.fullmatch(r"[a-z0-9]+/run_(ppo|grpo|dapo)\.sh", c.script), c.script


def test_searchr1_tool_config_loads_through_verl():
    from verl.tools.tool_registry import initialize_tools_from_config

    from agentrag_verl.tools.search_tool import SearchTool

    tools = initialize_tools_from_config(str(RECIPES / "searchr1/tools/search_tool.yaml"))
    assert [type(t) for t in tools] == [SearchTool] and tools[0].name == "search"


def test_ray_submit_wraps_the_exact_recipe_command(tmp_path):
    import os
    import shlex

    recipe = next(c for c in CASES if c.script == "hiprag/run_ppo.sh")
    env = {
        **os.environ,
        "DRY_RUN": "1",
        "RAY_ADDRESS": "http://head:8265",
        "SUBMISSION_ID": "job-1",
        "JUDGE_KEY_VARS": "AGENTRAG_TEST_KEY",
        "AGENTRAG_TEST_KEY": "s3cr3t-value",
        "MODEL": "/shared/models/qwen",
    }
    proc = subprocess.run(
        ["bash", "recipes/ray/submit.sh", "recipes/" + recipe.script, "trainer.total_epochs=2"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert "s3cr3t-value" not in proc.stdout + proc.stderr  # secrets are forwarded, never printed
    argv = shlex.split(proc.stdout)
    assert argv[:7] == ["ray", "job", "submit", "--address", "http://head:8265", "--submission-id", "job-1"]
    # one runtime env (Ray takes --runtime-env or --runtime-env-json, not both): the YAML plus the forwarded names
    assert (
        argv[argv.index("--runtime-env") + 1] == f"<{RECIPES / 'ray/runtime_env.yaml'} + env_vars: AGENTRAG_TEST_KEY>"
    )
    assert "--runtime-env-json" not in argv and "--no-wait" in argv
    entry = argv[argv.index("--") + 1 :]
    assert entry[:2] == ["bash", "-c"] and entry[2].startswith("exec ")
    # run the entrypoint as the job would, from its working directory, printing argv instead of exec'ing
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    shown = subprocess.run(
        ["bash", "-c", "printf '%s\\n' " + entry[2].removeprefix("exec ")],
        capture_output=True,
        text=True,
        cwd=job_dir,
        check=True,
    ).stdout.splitlines()
    expected = dry_run(
        recipe,
        "trainer.total_epochs=2",
        "+ray_kwargs.ray_init.address=auto",
        MODEL="/shared/models/qwen",
        PYTHON="python3",  # submit.sh ran the script with the default interpreter of the job's environment
    )
    expected[3] = f"--config-path={job_dir}/recipes/hiprag/config"  # relative to the job's working_dir
    assert shown == expected
    runtime_env = yaml.safe_load((RECIPES / "ray/runtime_env.yaml").read_text())
    assert runtime_env["working_dir"] == "." and "/.git" in runtime_env["excludes"]
    # excludes are gitignore patterns (matched as Ray's packaging does): a bare "data" would drop the
    # agentrag_verl.data package from the upload
    from ray._private.thirdparty.pathspec import PathSpec

    spec = PathSpec.from_lines("gitwildmatch", runtime_env["excludes"])
    assert not spec.match_file("agentrag_verl/data/prepare.py")
    assert not spec.match_file("agentrag_verl/data/tiny/qa.jsonl")
    assert spec.match_file("data/hiprag/train.parquet") and spec.match_file(".venv/bin/python")
    assert not any(k.endswith(("_KEY", "_TOKEN", "SECRET", "PASSWORD")) for k in runtime_env["env_vars"])


def test_ray_submit_takes_the_local_profile(tmp_path):
    import os
    import shlex

    work = tmp_path / "local"
    env = {**os.environ, "DRY_RUN": "1", "PROFILE": "local", "LOCAL_WORK": str(work), "SUBMISSION_ID": "job-2"}
    env.update(PYTHON=sys.executable, AGENTRAG=CONSOLE)
    proc = subprocess.run(
        ["bash", "recipes/ray/submit.sh", "recipes/hiprag/run_ppo.sh"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    argv = shlex.split(proc.stdout)
    assert argv[argv.index("--runtime-env") + 1].endswith("+ env_vars: CPU settings>")
    assert "--no-wait" not in argv  # the local services live as long as submit.sh waits for the job
    job = shlex.split(argv[argv.index("--") + 3].removeprefix("exec "))
    assert job[:4] == [CONSOLE, "train-local", "--ray-address", "auto"]  # joins the job's cluster
    assert "--config-name" in job and job[job.index("--config-name") + 1] == "hiprag_ppo"
    assert not work.exists()  # a dry run creates nothing
    refused = subprocess.run(
        ["bash", "recipes/ray/submit.sh", "recipes/hiprag/run_ppo.sh"],
        capture_output=True,
        text=True,
        env={**env, "NO_WAIT": "1"},
        cwd=REPO,
    )
    assert refused.returncode == 2 and "NO_WAIT=1 with PROFILE=local" in refused.stderr
