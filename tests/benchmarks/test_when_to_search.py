"""benchmarks/when_to_search.py without a run: build item 4's checks from eval rows with buckets."""

from __future__ import annotations

from tests.benchmarks.test_learning import load


def bucket(n: int, searched: float, direct: int, direct_format: float | None) -> dict:
    return {"n": n, "searched": searched, "search_depth": searched, "cem": 0.5, "direct": direct,
            "direct_format": direct_format}  # fmt: skip


def test_targets_pool_the_no_search_path_and_read_the_corpus_bucket():
    wts = load("when_to_search")
    greedy = {"buckets": {"known": bucket(40, 0.1, 36, 1.0), "corpus": bucket(70, 0.97, 2, 1.0)}}
    # at T=1: 20 + 9 + 4 no-search answers, 18 + 9 + 0 well-formed (27 / 33); corpus searched 66 / 70 (94%)
    sampled = {"buckets": {"known": bucket(40, 0.5, 20, 0.9), "common_unknown": bucket(50, 0.82, 9, 1.0),
                           "corpus": bucket(70, 66 / 70, 4, 0.0)}}  # fmt: skip
    checks = wts.targets(greedy, sampled)
    direct = checks["direct_path_survives_sampling"]
    assert (direct["direct"], direct["well_formed"], direct["share"], direct["pass"]) == (33, 27, 0.8182, False)
    assert checks["corpus_searched_greedy"]["pass"] and not checks["corpus_searched_sampled"]["pass"]
    sampled["buckets"]["corpus"] = bucket(70, 1.0, 0, None)  # every corpus question searched: 27 / 29
    checks = wts.targets(greedy, sampled)
    assert checks["direct_path_survives_sampling"]["share"] == 0.931 and all(c["pass"] for c in checks.values())
