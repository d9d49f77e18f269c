"""Slow: verl's real main_ppo (2 GRPO steps, CPU mode) with the search agent loop and the real retriever server
(MiniLM index of the fixture corpus) on 127.0.0.1.

The trainer's batch must hold responses with retrieved passages, masked out of the loss:

- the reward manager of ``masking_evidence_reward.py`` sees the batch's ``responses`` and the loop's
  ``extra_fields`` and records that every response holds passages (verl's reward loop gets no ``response_mask``);
- the trainer's ``training/rollout_probs_diff_max`` compares rollout and actor log-probs over the batch's
  ``response_mask``. The agent loop reports log-prob 0.0 for observation tokens while the random actor gives them
  about log(1/2048); a diff near 1e-10 therefore shows that no observation token is in the trainer's mask.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentrag_verl.agent_loops import AGENT_LOOP_CONFIG
from agentrag_verl.agent_loops import fields as F

HERE = Path(__file__).parent


def _console_script() -> str:
    script = Path(sys.executable).with_name("agentrag-verl")
    return str(script) if script.exists() else (shutil.which("agentrag-verl") or "agentrag-verl")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_main_ppo_grpo_with_search_agent_loop(tmp_path, retriever):
    pytest.importorskip("vllm")
    evidence = tmp_path / "evidence.jsonl"
    cmd = [
        "flock",
        "/tmp/agentrag_main_ppo.lock",
        _console_script(),
        "train-local",
        "--work-dir",
        str(tmp_path / "work"),
        "--format",
        "searchr1",
        "--agent-loop-config",
        AGENT_LOOP_CONFIG,
        "--agent-name",
        "searchr1_agent",
        "--reward-module",
        str(HERE / "masking_evidence_reward.py"),
        "--reward-name",
        "MaskingEvidenceReward",
        "--response-length",
        "160",
        "--quiet",
        "--",
        f"+actor_rollout_ref.rollout.custom.agentrag.retriever_url={retriever.url}",
        # A random policy never writes <search>: retrieve for the question first so passages are in the batch.
        "+actor_rollout_ref.rollout.custom.agentrag.initial_search=true",
        "+actor_rollout_ref.rollout.custom.agentrag.max_observation_tokens=48",
        f"+reward.reward_kwargs.evidence_path={evidence}",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=880, env={**os.environ})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert retriever.requests, "the agent loop never reached the retriever"
    summary = json.loads((tmp_path / "work" / "summary.json").read_text())
    records = [json.loads(line) for line in evidence.read_text().splitlines()]
    # 2 steps x 4 prompts x n=2 training samples, plus validation samples.
    assert len(records) >= 16
    for r in records:
        assert r["passages_in_response"] and r["response_tokens"] <= 160
        assert r["agentrag_format"] == "searchr1" and set(F.ALL_KEYS) <= set(r["agentrag_keys"])
        if r["mask_available"]:  # a later verl may pass the mask to the reward loop
            assert r["passages_in_masked"] and not r["passages_in_trained"]
    assert summary["returncode"] == 0 and set(summary["steps"]) == {"1", "2"}
    for metrics in summary["steps"].values():
        # Observation tokens carry rollout log-prob 0.0; were any in the loss mask, this would be O(1).
        assert metrics["training/rollout_probs_diff_max"] < 1e-3
        assert metrics["num_turns/mean"] >= 3  # prompt + initial observation + generation
