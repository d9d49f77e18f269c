"""The whole eval path on the fixture corpus: verl's AgentLoopWorker + our loops + the real retriever server, a
scripted policy and judge over real HTTP, judge metrics and three reward designs through their verl managers.

Expected numbers follow from the script in ``conftest.py`` and the papers' equations (comments give the sums).
"""

from __future__ import annotations

import json

import pytest

from agentrag_verl.eval.data import load_datasets
from agentrag_verl.eval.harness import evaluate

from .conftest import make_config

pytestmark = pytest.mark.timeout(600)


async def test_eval_on_fixture_corpus(tmp_path, fixture_datasets, scripted_server, retriever_service, tiny_model_dir):
    server, endpoint = scripted_server
    datasets = load_datasets([str(tmp_path / "data")])
    assert list(datasets) == ["common", "multi", "single"] and sum(len(v) for v in datasets.values()) == 30
    config = make_config(
        tmp_path / "out",
        server,
        retriever_service.url,
        tiny_model_dir,
        ["searchr1", "autosearch", "hiprag"],
        rewards=["searchr1", "autosearch", "hiprag"],
    )
    summary = await evaluate(config, datasets)
    out = tmp_path / "out"
    assert json.loads((out / "metrics.json").read_text())["formats"].keys() == {"searchr1", "autosearch", "hiprag"}
    for name in ("metrics.md", "accuracy_vs_search_depth.png", "search_depth_histogram.png"):
        assert (out / name).stat().st_size > 0
    for fmt in ("searchr1", "autosearch", "hiprag"):
        lines = (out / fmt / "results.jsonl").read_text().splitlines()
        assert len(lines) == 30  # every question, no dropped batch

    for fmt in ("searchr1", "autosearch", "hiprag"):
        d = summary["formats"][fmt]["datasets"]
        # common: answered at once; single: one search then the gold; multi: two searches then a wrong answer.
        assert (d["common"]["em"], d["single"]["em"], d["multi"]["em"]) == (1.0, 1.0, 0.0), fmt
        assert (d["common"]["search_depth"], d["single"]["search_depth"], d["multi"]["search_depth"]) == (0, 1, 2)
        assert d["common"]["se"] is None and d["single"]["se"] == 100.0 and d["multi"]["se"] == 0.0
        assert all(d[k]["format_compliance"] == 1.0 for k in d), fmt
        # The judge says YES unless the prediction is the wrong answer.
        assert (d["common"]["judge_acc"], d["single"]["judge_acc"], d["multi"]["judge_acc"]) == (1.0, 1.0, 0.0)
        assert summary["formats"][fmt]["average"]["em"] == pytest.approx(2 / 3)
        assert d["multi"]["search_depth_histogram"] == {"2": 12}

    s1, auto, hip = (summary["formats"][f]["datasets"] for f in ("searchr1", "autosearch", "hiprag"))
    # AutoSearch OSR: intermediate answers are the gold, so multi-hop questions (2 searches) were answered after the
    # first one (t_c = 1 < 2); single-hop ones only at their last search; common ones never searched.
    assert (auto["common"]["autosearch_osr"], auto["single"]["autosearch_osr"], auto["multi"]["autosearch_osr"]) == (
        0.0,
        0.0,
        1.0,
    )
    assert s1["multi"]["autosearch_osr"] is None  # no intermediate answers in the Search-R1 loop
    assert auto["multi"]["tokens"] > s1["multi"]["tokens"]  # intermediate answers cost policy tokens
    # HiPRAG Eq. 2: single-hop re-answers equal the conclusions (over-search: OSR 1); multi-hop re-answers differ
    # (OSR 0) and the concluding non-search step is wrong (USR 1); common non-search steps are right (USR 0).
    assert (hip["single"]["hiprag_osr"], hip["multi"]["hiprag_osr"], hip["common"]["hiprag_osr"]) == (1.0, 0.0, None)
    assert (hip["common"]["hiprag_usr"], hip["multi"]["hiprag_usr"], hip["single"]["hiprag_usr"]) == (0.0, 1.0, None)

    # Rewards through the verl managers.
    # Search-R1 v0.3 (λf = 0.2): correct & valid 1.0, wrong & valid 0.2.
    assert (s1["common"]["reward/searchr1"], s1["single"]["reward/searchr1"], s1["multi"]["reward/searchr1"]) == (
        1.0,
        1.0,
        pytest.approx(0.2),
    )
    # AutoSearch, single-hop: retrieval step 0 + (0.4/1 - 0.05) + F1 gain 1.0 = 1.35; answer 0.1 + EM 1 -> 2.45.
    # Multi-hop: step 1 = 1.35; step 2 = 0 - 0.1 + (1.0 - 1.0) = -0.1; answer 0.1 + 0 -> 1.35. Common: 0.1 + 1 = 1.1.
    assert auto["single"]["reward/autosearch"] == pytest.approx(2.45, abs=1e-5)
    assert auto["multi"]["reward/autosearch"] == pytest.approx(1.35, abs=1e-5)
    assert auto["common"]["reward/autosearch"] == pytest.approx(1.1, abs=1e-5)
    assert auto["single"]["reward/searchr1"] == 1.0  # the baseline also scores AutoSearch trajectories
    # HiPRAG Eq. 1 (λf 0.2, λp 0.4): common 0.8 + 0.2 + 0.4·1/1 = 1.4; single: its only step over-searched -> 1.0;
    # multi: wrong answer -> λf·F = 0.2 (no judge call).
    assert hip["common"]["reward/hiprag"] == pytest.approx(1.4)
    assert hip["single"]["reward/hiprag"] == pytest.approx(1.0)
    assert hip["multi"]["reward/hiprag"] == pytest.approx(0.2)

    record = json.loads((out / "hiprag" / "results.jsonl").read_text().splitlines()[0])
    assert {"response", "steps", "reanswers", "tokens", "judge", "hiprag", "rewards", "wall_s"} <= set(record)
    assert "<context>" in record["response"] or record["n_search"] == 0
    assert not server.errors


async def test_a_rerun_of_a_finished_run_calls_nothing(
    tmp_path, fixture_datasets, scripted_server, retriever_service, tiny_model_dir
):
    server, endpoint = scripted_server
    datasets = load_datasets([str(tmp_path / "data")], limit=2)
    config = make_config(tmp_path / "out", server, retriever_service.url, tiny_model_dir, ["searchr1"])
    first = await evaluate(config, datasets)
    calls = endpoint.policy_calls
    assert calls > 0
    second = await evaluate(config, datasets)
    assert endpoint.policy_calls == calls  # everything was already saved
    assert second["formats"] == first["formats"]
