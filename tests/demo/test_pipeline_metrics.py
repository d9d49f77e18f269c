"""The demo's per-stage table row, from eval records (hand-computed)."""

from __future__ import annotations

import pytest

from agentrag_verl.demo.pipeline import mean_ci, stage_metrics


def rec(dataset, cem, n_search, fmt=True, score=1.0, policy=10):
    return {"dataset": dataset, "em": cem, "cem": cem, "f1": cem, "format_ok": fmt, "n_search": n_search,
            "tokens": {"policy": policy}, "rewards": {"hiprag": {"score": score}}}  # fmt: skip


def test_stage_row():
    records = [
        rec("single_hop", 1.0, 1),
        rec("single_hop", 0.0, 1, fmt=False, score=0.0),
        rec("multi_hop", 1.0, 2),
        rec("common", 1.0, 0),
        rec("common", 1.0, 1),
        rec("common", 0.0, 0, score=0.2),
        rec("common", 1.0, 0),
    ]
    row = stage_metrics(records, "hiprag")
    assert row["n"] == 7
    # CEM: unweighted mean of the set means (single 1/2, multi 1, common 3/4) = 0.75
    assert row["cem"][0] == pytest.approx(0.75)
    # format: (1/2 + 1 + 1) / 3
    assert row["format_ok"][0] == pytest.approx(0.8333, abs=1e-4)
    # search depth: corpus questions (1, 1, 2) -> 4/3; common (0, 1, 0, 0) -> 1/4
    assert row["depth_corpus"][0] == pytest.approx(1.3333, abs=1e-4)
    assert row["depth_common"][0] == pytest.approx(0.25)
    # over-search: 1 of 4 common questions answered with a search
    assert row["over_search_common"][0] == pytest.approx(0.25)
    # reward: (0.5 + 1 + (1 + 1 + 0.2 + 1)/4) / 3
    assert row["reward"][0] == pytest.approx((0.5 + 1 + 0.8) / 3, abs=1e-4)
    assert row["cem_by_set"] == {"single_hop": 0.5, "multi_hop": 1.0, "common": 0.75}
    assert "buckets" not in row  # no knowledge labels
    # labelled by the knowledge probe: eval's buckets beside the row (the 3 common questions the policy knows, 1
    # searched; the one it does not; the 3 corpus questions)
    for r, known in zip(records, [False, False, False, True, True, False, True], strict=True):
        r["metadata"] = {"metadata": {"type": "common-knowledge" if r["dataset"] == "common" else "single-hop",
                                      "knowledge": {"known": known}}}  # fmt: skip
    buckets = stage_metrics(records, "hiprag")["buckets"]
    assert {b: (m["n"], round(m["searched"], 4)) for b, m in buckets.items()} == {
        "known": (3, 0.3333), "common_unknown": (1, 0.0), "corpus": (3, 1.0)}  # fmt: skip


def test_mean_ci():
    # mean 0.5, sample sd 0.5774, half-width 1.96 * 0.5774 / 2
    assert mean_ci([1.0, 0.0, 1.0, 0.0]) == (0.5, 0.5658)
    assert mean_ci([3.0]) == (3.0, None)
