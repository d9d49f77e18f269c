"""verl's real ``main_ppo`` on this CPU box with AutoSearch's step rewards (slow; the run holds
/tmp/agentrag_main_ppo.lock through ``flock``). HiPRAG's manager runs in main_ppo in
``tests/recipes/test_local_profile.py``, through its recipe.

A random tiny policy almost never writes a well-formed, correct trajectory, so the run uses the scripted oracle
policy inside our real agent loop (:mod:`agentrag_verl.testing.oracle_policy`): one search for the question through
the real retriever server, then the gold answer. The rewards therefore have known values: PPO-GAE with a critic,
AutoSearch loop (intermediate answers by the oracle: the gold) + ``AutoSearchRewardManager`` + the per-step
``StepRewardAgentLoopManager``: the trainer's token-level rewards right before GAE (dumped by ``train-local
--dump-token-rewards``) hold exactly two non-zero values per sample, the retrieval step's and the answer's (Eq. 1, 2,
7, 9), on model-generated tokens: the retrieval step's last token, then the response's last one.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support import CONSOLE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


ORACLE_YAML = """
- name: oracle_autosearch
  _target_: agentrag_verl.testing.oracle_policy.OracleAgentLoop
  format: autosearch
  intermediate_answers: true
  oracle_aux: true  # intermediate answers = gold: known step rewards
  max_observation_tokens: 64
"""


def train_local(work: Path, args: list[str], overrides: list[str]) -> dict:
    """Two steps of ``agentrag-verl train-local`` in ``work``, which must succeed: its summary."""
    cmd = ["flock", "/tmp/agentrag_main_ppo.lock", CONSOLE, "train-local", f"--work-dir={work}", "--quiet", *args, "--"]
    proc = subprocess.run(cmd + overrides, capture_output=True, text=True)
    summary_path = work / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    log_path = work / "main_ppo.log"
    log = log_path.read_text(errors="replace") if log_path.exists() else ""
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:] + log[-6000:]
    assert sorted(summary["steps"]) == ["1", "2"]
    return summary


def test_ppo_gae_with_autosearch_step_rewards(retriever_service, tmp_path):
    from agentrag_verl.methods.autosearch import reward as autosearch

    yaml_path = tmp_path / "oracle_agent_loops.yaml"
    yaml_path.write_text(ORACLE_YAML)
    args = [
        "--format=autosearch",
        "--agent-name=oracle_autosearch",
        "--reward-module=pkg://agentrag_verl.methods.autosearch.manager",
        "--reward-name=AutoSearchRewardManager",
        "--response-length=256",
        "--dump-token-rewards",
    ]
    overrides = [
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={yaml_path}",
        f"+actor_rollout_ref.rollout.custom.agentrag.retriever_url={retriever_service.url}",
        "data.max_prompt_length=1024",
        "actor_rollout_ref.rollout.prompt_length=1024",
        "algorithm.adv_estimator=gae",
        "+actor_rollout_ref.rollout.agent.agent_loop_manager_class="
        "agentrag_verl.rewards.managers.step_rewards.StepRewardAgentLoopManager",
        # the critic gets the CPU settings train-local gives the actor (FSDP2, sdpa, fp32, no compile)
        f"critic.model.path={tmp_path / 'model'}",  # train-local builds the tiny model there
        "critic.strategy=fsdp2",
        "critic.optim.lr=1e-5",
        "critic.model.use_remove_padding=false",
        "critic.model.enable_gradient_checkpointing=false",
        "+critic.model.override_config.attn_implementation=sdpa",
        "critic.ppo_micro_batch_size_per_gpu=4",
        "critic.fsdp.use_torch_compile=false",
    ]
    # The critic loads with SDPA through the local CPU mode's critic_sdpa patch (verl hard-codes flash-attn 2).
    summary = train_local(tmp_path, args, overrides)
    for metrics in summary["steps"].values():
        assert "critic/vf_loss" in metrics
    retrieval_reward, answer_reward = autosearch.step_rewards([True], True, 1.0, [1.0], [1.0])
    rows = [json.loads(line) for line in (tmp_path / "token_rewards.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 4 * 2  # 2 steps x 4 prompts x n = 2
    for row in rows:
        (step_pos, step_r, step_m), (end_pos, end_r, end_m) = row["rewards"]
        assert step_m == end_m == 1  # rewards sit on model-generated tokens, where GAE reads them
        assert step_r == pytest.approx(retrieval_reward, abs=1e-5) and end_r == pytest.approx(answer_reward, abs=1e-5)
        assert step_pos < end_pos == row["last_mask_one"]
        assert row["mask_ones"] < end_pos + 1  # the retrieved passages (mask 0) lie between the two rewards
