"""benchmarks/when_to_search.py without a run: build item 4's checks from eval rows with buckets."""

from __future__ import annotations

import pytest

from tests.benchmarks.test_learning import load


def bucket(n: int, searched: float, direct: int, direct_format: float | None) -> dict:
    return {"n": n, "searched": searched, "search_depth": searched, "cem": 0.5, "direct": direct,
            "direct_format": direct_format}  # fmt: skip


def test_targets_pool_the_no_search_path_and_read_the_corpus_bucket():
    wts = load("when_to_search")
    greedy = {"buckets": {"known": bucket(40, 0.1, 36, 1.0), "common_unknown": bucket(50, 0.9, 5, 1.0),
                          "corpus": bucket(70, 0.97, 2, 1.0)}}  # fmt: skip
    # at T=1: 20 + 9 + 4 no-search answers, 18 + 9 + 0 well-formed (27 / 33); corpus searched 66 / 70 (94%)
    sampled = {"buckets": {"known": bucket(40, 0.5, 20, 0.9), "common_unknown": bucket(50, 0.82, 9, 1.0),
                           "corpus": bucket(70, 66 / 70, 4, 0.0)}}  # fmt: skip
    checks = wts.targets(greedy, sampled)
    direct = checks["direct_path_survives_sampling"]
    assert (direct["direct"], direct["well_formed"], direct["share"], direct["pass"]) == (33, 27, 0.8182, False)
    assert checks["corpus_searched_greedy"]["pass"] and not checks["corpus_searched_sampled"]["pass"]
    assert checks["buckets_of_30"] == {"sizes": {"known": 40, "common_unknown": 50, "corpus": 70}, "min": 30,
                                       "pass": True}  # fmt: skip
    sampled["buckets"]["corpus"] = bucket(70, 1.0, 0, None)  # every corpus question searched: 27 / 29 well-formed,
    checks = wts.targets(greedy, sampled)  # 93%, but over fewer than 30 no-search answers
    assert checks["direct_path_survives_sampling"]["share"] == 0.931
    assert not checks["direct_path_survives_sampling"]["pass"]
    sampled["buckets"]["known"] = bucket(40, 0.5, 21, 20 / 21)  # 29 / 30
    checks = wts.targets(greedy, sampled)
    assert checks["direct_path_survives_sampling"]["share"] == 0.9667 and all(c["pass"] for c in checks.values())
    greedy["buckets"]["known"] = bucket(14, 1.0, 0, None)  # run 2's known bucket
    assert not wts.targets(greedy, sampled)["buckets_of_30"]["pass"]
    # --no-sampled: the greedy targets alone
    assert set(wts.targets(greedy, None)) == {"buckets_of_30", "corpus_searched_greedy"}


def record(qid: str, kind: str, known: bool, searched: bool, cem: float, over: int, under: int) -> dict:
    judged_search, judged_non = int(searched), int(not searched)
    return {"dataset": "common" if kind == "common-knowledge" else "single_hop", "id": qid, "em": cem, "cem": cem,
            "f1": cem, "format_ok": True, "n_search": int(searched), "tokens": {"policy": 10, "aux": 0},
            "metadata": {"metadata": {"type": kind, "knowledge": {"known": known}}},
            "hiprag": {"over_search": over, "judged_search": judged_search, "under_search": under,
                       "judged_non_search": judged_non, "failures": 0}}  # fmt: skip


def test_experiment_checks_read_the_issues_claims_from_eval_records():
    from agentrag_verl.demo.pipeline import stage_metrics

    wts = load("when_to_search")
    corpus = [("s1", "single-hop", False, True, 1.0, 0, 0), ("s2", "single-hop", False, True, 0.0, 0, 0)]
    known = [f"k{i}" for i in range(6)]
    records = {
        # the warm start searches every known question (each search judged over-search)
        "warm": [record(q, "common-knowledge", True, True, 1.0, 1, 0) for q in known],
        # the baseline keeps searching them
        "baseline": [record(q, "common-knowledge", True, True, 1.0, 1, 0) for q in known],
        # HiPRAG answers 5 of 6 directly, right (one direct answer judged under-search); its one search is not
        # judged over-search
        "hiprag": [record(q, "common-knowledge", True, i == 0, 1.0, 0, int(i == 1)) for i, q in enumerate(known)],
    }  # fmt: skip
    for recs in records.values():
        recs += [record(*c) for c in corpus]
    rows = {name: stage_metrics(recs, "hiprag") for name, recs in records.items()}
    checks = wts.experiment_checks(records, rows)
    assert set(checks) == set(wts.EXPERIMENT_CLAIMS)
    drop = checks["known_searched_drops"]
    assert (drop["warm"], round(drop["hiprag"], 4), round(drop["diff"], 4), drop["questions"]) == (
        1.0,
        0.1667,
        -0.8333,
        6,
    )
    assert drop["pass"]  # SE of the paired differences: sd 0.408 / sqrt(6) = 0.167; -0.83 < -0.33
    # OSR (Eq. 2, over-search steps / search steps; mean over the two sets): baseline (6/6 + 0/2) / 2, HiPRAG 0
    assert (checks["osr_below_baseline"]["baseline"], checks["osr_below_baseline"]["hiprag"]) == (0.5, 0.0)
    assert checks["osr_below_baseline"]["pass"] and checks["corpus_still_searched"]["pass"]
    assert checks["known_cem_holds"]["pass"] and checks["cem_not_below_baseline"]["pass"]
    # USR: the baseline took no step without a search, so it has none to compare with: not shown
    assert checks["usr_not_above_baseline"]["baseline"] is None and not checks["usr_not_above_baseline"]["pass"]
    # a run that stopped searching the corpus questions fails that claim
    records["hiprag"][-2:] = [record(c[0], c[1], False, False, 0.0, 0, 1) for c in corpus]
    rows["hiprag"] = stage_metrics(records["hiprag"], "hiprag")
    assert not wts.experiment_checks(records, rows)["corpus_still_searched"]["pass"]
    # --rl-runs hiprag: the claims against the warm start only; --rl-runs baseline: none
    del records["baseline"], rows["baseline"]
    assert set(wts.experiment_checks(records, rows)) == {"known_searched_drops", "known_cem_holds",
                                                         "corpus_still_searched"}  # fmt: skip
    records["baseline"], rows["baseline"] = records.pop("hiprag"), rows.pop("hiprag")
    assert wts.experiment_checks(records, rows) == {}


def test_sampled_checks_compare_with_the_warm_starts_and_the_baselines_sampled_evals():
    """At temperature 1 the paths mix, so the known share moves by degrees and USR is defined."""
    wts = load("when_to_search")
    known = [f"k{i}" for i in range(8)]

    def run(searched: set[int], over: int, under: set[int]) -> list[dict]:
        return [record(q, "common-knowledge", True, i in searched, 1.0, over * (i in searched), int(i in under))
                for i, q in enumerate(known)]  # fmt: skip

    records = {
        "warm": run(set(range(7)), 0, set()),  # 7 of 8 searched
        "baseline": run(set(range(8)), 1, set()),  # 8 of 8, every search over-search, no step without one
        "hiprag": run({0, 1}, 0, {7}),  # 2 of 8; one of its 6 direct answers judged under-search
    }
    checks = wts.sampled_checks(records)
    drop = checks["known_searched_drops"]
    # paired differences against the warm start: 5 of -1, 3 of 0: mean -0.625, sd 0.518 / sqrt(8) = 0.183
    assert (drop["warm"], drop["hiprag"], drop["diff"], drop["questions"]) == (0.875, 0.25, -0.625, 8)
    assert round(drop["se"], 3) == 0.183 and drop["pass"]
    assert checks["known_searched_below_baseline"]["diff"] == -0.75 and checks["known_searched_below_baseline"]["pass"]
    assert (checks["osr_below_baseline"]["baseline"], checks["osr_below_baseline"]["hiprag"]) == (1.0, 0.0)
    # USR (under-search steps / steps without a search): the baseline has none, so the claim cannot be checked
    assert checks["usr_not_above_baseline"] == {"baseline": None, "hiprag": 1 / 6, "pass": False}
    records["warm"] = run({0, 1}, 0, set())  # as little searching before RL: no drop
    assert not wts.sampled_checks(records)["known_searched_drops"]["pass"]
    del records["baseline"]  # HiPRAG's run alone: against the warm start only
    assert list(wts.sampled_checks(records)) == ["known_searched_drops"]


@pytest.mark.parametrize("name", ["when_to_search", "learning"])
def test_module_examples(name, monkeypatch):
    import doctest
    import sys

    module = load(name)
    monkeypatch.setitem(sys.modules, name, module)  # doctest keeps the objects whose module is sys.modules[name]
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


def test_the_demo_points_to_the_benchmark_and_shows_its_latest_checks(tmp_path):
    import json

    from agentrag_verl.demo.main import when_to_search_note

    wts = load("when_to_search")
    work = tmp_path / "demo"
    assert "No run of it on this machine yet" in when_to_search_note(work)
    greedy = {"buckets": {"corpus": bucket(70, 1.0, 0, None)}}
    sampled = {"buckets": {"known": bucket(36, 0.2, 29, 0.9), "corpus": bucket(70, 0.5, 35, 1.0)}}
    summary = tmp_path / "when_to_search" / "when_to_search.json"
    summary.parent.mkdir()
    command = "python benchmarks/when_to_search.py --known-demos 15"
    summary.write_text(json.dumps({"command": command, "checks": wts.targets(greedy, sampled)}))
    note = when_to_search_note(work)
    assert command in note and "2 of 4 checks pass" in note
    assert "corpus_searched_greedy PASS" in note and "corpus_searched_sampled FAIL" in note


def test_first_choice_weighs_the_two_openings_of_the_teacher_templates(tiny_model_dir):
    """P(direct) is the direct opening's share of the two openings' probabilities, each the product of its tokens'
    probabilities after the prompt and the shared prefix: here checked against the model's own loss on each opening."""
    import math

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrag_verl.formats import get_format

    wts = load("when_to_search")
    recs = [record("k0", "common-knowledge", True, True, 1.0, 0, 0), record("s1", "single-hop", False, True, 1.0, 0, 0)]
    recs[0]["question"], recs[1]["question"] = "What is the capital of France?", "Who built Kessrow Bridge?"
    p = wts.first_choice(tiny_model_dir, {f"{r['dataset']}/{r['id']}": r["question"] for r in recs}, "hiprag")
    assert set(p) == {"common/k0", "single_hop/s1"} and all(0.0 < v < 1.0 for v in p.values())

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    lm = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    prompt = tok.apply_chat_template(get_format("hiprag").prompt.messages(recs[0]["question"]), tokenize=False,
                                     add_generation_prompt=True) + "<think>\n<step>\n<reasoning>"  # fmt: skip
    head = len(tok(prompt, add_special_tokens=False)["input_ids"])

    def logp(opening: str) -> float:  # - mean loss over the opening's tokens x their number
        ids = tok(prompt + opening, add_special_tokens=False)["input_ids"]
        labels = [-100] * head + ids[head:]
        with torch.no_grad():
            loss = lm(torch.tensor([ids]), labels=torch.tensor([labels])).loss.item()
        return -loss * (len(ids) - head)

    direct = logp("This is common knowledge, so I can answer without searching.</reasoning>\n<conclusion>")
    search = logp("I do not know this, so I will search for it.</reasoning>\n<search>")
    assert p["common/k0"] == pytest.approx(1 / (1 + math.exp(search - direct)), rel=1e-4)

    table = wts.first_choice_table({"warm": p, "rl": {k: v + 0.1 for k, v in p.items()}}, recs)
    assert table["warm"]["known"] == {"n": 1, "p_direct": round(p["common/k0"], 4)}
    assert table["rl"]["corpus"]["n"] == 1 and table["rl"]["corpus"]["change"][0] == pytest.approx(0.1)


def test_facts_corpus_states_each_common_fact_the_corpus_lacks(tmp_path):
    import json

    from agentrag_verl.data.corpus import load_corpus

    wts = load("when_to_search")
    (tmp_path / "common").mkdir()
    (tmp_path / "corpus.jsonl").write_text(
        json.dumps({"id": "0", "contents": '"Paris"\nParis is the capital of France.'}) + "\n"
    )
    rows = {"test": [{"id": "t0", "question": "What is the capital of France?", "golden_answers": ["Paris"],
                      "metadata": {"supporting_ids": ["0"]}},
                     {"id": "t1", "question": "What colour is grass?", "golden_answers": ["green", "Green"],
                      "metadata": {"supporting_ids": []}}],
            "train": [{"id": "r0", "question": "How many legs has a spider?",
                       "golden_answers": ["eight"]}]}  # fmt: skip
    for split, qa in rows.items():
        (tmp_path / "common" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in qa))
    out = tmp_path / "facts" / "corpus.jsonl"
    assert wts.facts_corpus(tmp_path, out) == {"corpus": str(out), "passages": 3, "added": 2}
    passages = load_corpus(out)
    assert [(p.id, p.title, p.text) for p in passages] == [
        ("0", "Paris", "Paris is the capital of France."),
        ("fact_common_train_r0", "eight", "How many legs has a spider? The answer is eight."),
        ("fact_common_test_t1", "green", "What colour is grass? The answer is green."),
    ]


def test_unknown_demos_need_the_facts_in_the_corpus(monkeypatch, capsys):
    """The teacher's search on an unknown common question concludes only from a passage stating the fact, which the
    mini-wiki lacks for most of them: the flag is refused without --facts-in-corpus, before anything runs."""
    wts = load("when_to_search")
    monkeypatch.setattr("sys.argv", ["when_to_search.py", "--unknown-demos", "18"])
    with pytest.raises(SystemExit) as e:
        wts.main()
    assert e.value.code == 2
    assert "--unknown-demos needs --facts-in-corpus" in capsys.readouterr().err
