"""Per-question metrics and their aggregation on hand-built results (every expected number computed by hand)."""

from __future__ import annotations

import pytest

from agentrag_verl.eval.metrics import aggregate, question_metrics, search_efficiency
from agentrag_verl.methods.autosearch.parts import AutoSearchSteps
from agentrag_verl.rewards.parts import RewardContext
from agentrag_verl.rewards.record import Sample


def rec(dataset, em, cem, f1, ok, n_search, policy, aux=0, **extra):
    return {
        "dataset": dataset,
        "em": em,
        "cem": cem,
        "f1": f1,
        "format_ok": ok,
        "n_search": n_search,
        "tokens": {"policy": policy, "aux": aux},
        **extra,
    }


def judged(correct, ok, t_c, over_search, score) -> dict:
    """The judge's verdict, AutoSearch's t_c and over-search flag, and the Search-R1 reward of one record."""
    return {
        "judge": {"correct": correct, "ok": ok},
        "autosearch": {"t_c": t_c, "over_search": over_search},
        "rewards": {"searchr1": {"score": score}},
    }


RECORDS = [
    rec("a", 1.0, 1.0, 1.0, True, 2, 100, 20, **judged(correct=True, ok=True, t_c=2, over_search=False, score=1.0)),
    rec("a", 0.0, 1.0, 0.5, False, 0, 50, 0, **judged(correct=None, ok=False, t_c=-1, over_search=False, score=0.2)),
    rec("a", 1.0, 1.0, 1.0, True, 3, 150, 30, **judged(correct=False, ok=True, t_c=1, over_search=True, score=0.8)),
    rec(
        "b",
        0.0,
        0.0,
        0.0,
        True,
        1,
        80,
        hiprag={"over_search": 1, "judged_search": 2, "under_search": 1, "judged_non_search": 4, "failures": 1},
    ),
    rec(
        "b",
        1.0,
        1.0,
        1.0,
        True,
        0,
        40,
        hiprag={"over_search": 0, "judged_search": 1, "under_search": 2, "judged_non_search": 2, "failures": 0},
    ),
]


def test_per_dataset_numbers():
    agg = aggregate(RECORDS)
    a, b = agg["datasets"]["a"], agg["datasets"]["b"]
    assert a["n"] == 3 and b["n"] == 2
    assert a["em"] == pytest.approx(2 / 3) and a["cem"] == 1.0 and a["f1"] == pytest.approx(2.5 / 3)
    assert a["search_depth"] == pytest.approx(5 / 3)  # (2 + 0 + 3) / 3
    assert a["se"] == pytest.approx(40.0)  # 100 * (2/3) / (5/3): EM points per search
    assert a["autosearch_osr"] == pytest.approx(1 / 3)  # one of three answered before its last search
    assert a["format_compliance"] == pytest.approx(2 / 3)
    assert a["tokens"] == pytest.approx((120 + 50 + 180) / 3)  # trajectory + auxiliary tokens
    assert a["tokens_trajectory"] == pytest.approx(100.0)
    # judge: the failed verdict is neither right nor wrong: 1 correct of 2 valid verdicts.
    assert a["judge_acc"] == pytest.approx(0.5) and a["judge_failures"] == 1
    assert a["hiprag_osr"] is None and a["hiprag_usr"] is None
    assert a["reward/searchr1"] == pytest.approx(2 / 3)  # (1.0 + 0.2 + 0.8) / 3
    assert a["search_depth_histogram"] == {"0": 1, "2": 1, "3": 1}
    # HiPRAG Eq. 2 pools steps over the dataset: (1+0)/(2+1) and (1+2)/(4+2), not the mean of per-trajectory ratios
    # (which would be 0.25 and 0.625).
    assert b["hiprag_osr"] == pytest.approx(1 / 3) and b["hiprag_usr"] == pytest.approx(0.5)
    assert b["hiprag_judge_failures"] == 1
    assert b["se"] == pytest.approx(100.0)  # EM 0.5 over SD 0.5
    assert b["judge_acc"] is None and b["autosearch_osr"] is None


def test_average_row_is_unweighted_mean_over_datasets():
    avg = aggregate(RECORDS)["average"]
    assert avg["n"] == 5
    assert avg["em"] == pytest.approx((2 / 3 + 1 / 2) / 2)  # not the pooled 3/5
    assert avg["se"] == pytest.approx((40.0 + 100.0) / 2)
    assert avg["hiprag_osr"] == pytest.approx(1 / 3)  # only dataset b has HiPRAG judgements
    assert avg["judge_acc"] == pytest.approx(0.5)
    assert avg["judge_failures"] == 1
    assert avg["search_depth_histogram"] == {"0": 2, "1": 1, "2": 1, "3": 1}


def test_dataset_order_and_no_search():
    agg = aggregate([rec("z", 1.0, 1.0, 1.0, True, 0, 5), rec("y", 0.0, 0.0, 0.0, True, 0, 5)], datasets=["y", "z"])
    assert list(agg["datasets"]) == ["y", "z"]
    assert agg["datasets"]["z"]["se"] is None  # SE undefined without a search
    assert search_efficiency(0.45, 1.5) == pytest.approx(30.0)


def test_question_metrics_reads_the_format_and_the_loop_fields():
    response = (
        "<think>look up</think>\n<search> capital of France </search>\n\n"
        "<information>Doc 1(Title: France) <answer>Lyon</answer></information>\n\n"
        "<think>found</think>\n<answer>Paris</answer>"
    )
    fields = {"agentrag_num_searches": 1, "agentrag_steps": [{"kind": "search"}, {"kind": "answer"}]}
    m = question_metrics("searchr1", response, ["Paris"], fields)
    # The answer inside the retrieved passage never counts; the model's last answer does. Two parsed steps: the
    # searching think and the concluding think.
    assert (m["prediction"], m["em"], m["format_ok"], m["n_search"], m["n_steps"]) == ("Paris", 1.0, True, 1, 2)
    assert m["autosearch"] is None  # no intermediate answers: not an AutoSearch run
    bad = question_metrics("hiprag", response, ["Paris"], fields)
    assert bad["format_ok"] is False  # Search-R1 text is not HiPRAG's grammar


def searchr1_response(n_search: int) -> str:
    """A Search-R1 response with ``n_search`` retrieval turns (each followed by ``<information>``), then the answer."""
    turns = "".join(f"<think>t{i}</think><search>q{i}</search><information>d{i}</information>" for i in range(n_search))
    return turns + "<think>x</think><answer>Paris</answer>"


def test_autosearch_intermediate_answers_map_to_search_steps():
    steps = [{"kind": "search"}, {"kind": "invalid"}, {"kind": "search"}, {"kind": "search"}, {"kind": "answer"}]
    inter = [
        {"step": 0, "answer": "Lyon"},
        {"step": 2, "answer": "Paris"},  # second search step (index 2 of agentrag_steps)
        {"step": 3, "answer": "Paris"},
    ]
    fields = {"agentrag_steps": steps, "agentrag_intermediate_answers": inter, "agentrag_num_searches": 3}
    m = question_metrics("autosearch", searchr1_response(3), ["Paris"], fields)
    assert m["autosearch"] == {"intermediate_em": [0.0, 1.0, 1.0], "t_c": 2, "over_search": True}
    # An AutoSearch run without searches counts in the OSR denominator as "not over-searched".
    none = question_metrics("autosearch", "<think>x</think><answer>Paris</answer>", ["Paris"], {})
    assert none["autosearch"] == {"intermediate_em": [], "t_c": -1, "over_search": False}


@pytest.mark.parametrize(
    ("answers", "t_c", "over_search"),
    [
        (["Paris"], 1, False),  # correct after the only (= last) search
        (["Paris", "Lyon"], 1, True),  # correct after search 1 of 2: search 2 was redundant
        (["Lyon", "Lyon"], -1, False),  # never correct
    ],
)
def test_autosearch_over_search_event(answers, t_c, over_search):
    fields = {"agentrag_intermediate_answers": [{"step": i, "answer": a} for i, a in enumerate(answers)]}
    m = question_metrics("autosearch", searchr1_response(len(answers)), ["Paris"], fields)
    assert (m["autosearch"]["t_c"], m["autosearch"]["over_search"]) == (t_c, over_search)


@pytest.mark.parametrize(
    ("response", "fields"),
    [
        (searchr1_response(2), {"agentrag_intermediate_answers": [{"step": 0, "answer": "Paris"}]}),
        # the step records say three searches but the response has no <information> turn (a response cut short):
        # the reward counts the response's retrieval turns (none), and so does the evaluation
        (
            "<think>x</think><answer>Paris</answer>",
            {
                "agentrag_steps": [{"kind": "search"}] * 3 + [{"kind": "answer"}],
                "agentrag_intermediate_answers": [{"step": i, "answer": "Paris"} for i in range(3)],
            },
        ),
    ],
)
async def test_autosearch_metrics_are_the_rewards_step_view(response, fields):
    """t_c and the over-search event are what the AutoSearch reward's own step view computes."""
    m = question_metrics("autosearch", response, ["Paris"], fields)
    result = await RewardContext(Sample(response, ["Paris"], extra_fields=fields)).get(AutoSearchSteps("autosearch"))
    assert m["autosearch"]["t_c"] == result.info["as_t_c"] == result.data.t_c
    assert float(m["autosearch"]["over_search"]) == result.info["as_over_search"]
    assert m["autosearch"]["intermediate_em"] == result.data.intermediate_em


def test_buckets_by_what_the_policy_knows():
    """With the knowledge probe's labels: the metrics per bucket, pooled over datasets, and the share searched."""
    from agentrag_verl.eval.report import markdown_tables

    def meta(kind, known):
        row_fields = {"metadata": {"type": kind, "knowledge": {"known": known, "rate": 1.0 if known else 0.0}}}
        return {"metadata": row_fields}  # a record keeps the row's fields (harness.build_record)

    hip = {"over_search": 1, "judged_search": 1, "under_search": 0, "judged_non_search": 1, "failures": 0}
    records = [
        rec("common", 1.0, 1.0, 1.0, True, 1, 10, hiprag=hip, **meta("common-knowledge", True)),  # known, searched
        rec("common", 1.0, 1.0, 1.0, True, 0, 10, **meta("common-knowledge", True)),  # known, not searched
        rec("common", 0.0, 0.0, 0.0, True, 2, 10, **meta("common-knowledge", False)),
        rec("single", 1.0, 1.0, 1.0, True, 1, 10, **meta("single-hop", False)),
        rec("single", 1.0, 1.0, 1.0, True, 0, 10, **meta("single-hop", True)),  # a corpus question it knows
    ]
    buckets = aggregate(records)["buckets"]
    assert list(buckets) == ["known", "common_unknown", "corpus"]
    assert buckets["known"]["n"] == 3 and buckets["known"]["searched"] == pytest.approx(1 / 3)
    assert buckets["known"]["search_depth"] == pytest.approx(1 / 3) and buckets["known"]["hiprag_osr"] == 1.0
    assert (buckets["common_unknown"]["n"], buckets["common_unknown"]["search_depth"]) == (1, 2.0)
    assert (buckets["corpus"]["n"], buckets["corpus"]["searched"], buckets["corpus"]["cem"]) == (1, 1.0, 1.0)
    table = markdown_tables({"formats": {"hiprag": aggregate(records)}})
    # known: 2 answered without a search, both well-formed; common_unknown: none answered without one
    assert (buckets["known"]["direct"], buckets["common_unknown"]["direct_format"]) == (2, None)
    assert "| hiprag | known | 3 | 33.3 | 0.33 | 100.0 | 100.0 | 100.0 | 0.0 | " in table
    # the same table for the demo's and the benchmarks' stages (one renderer), empty without labels
    from agentrag_verl.eval.report import bucket_table

    stages = bucket_table({"warm": aggregate(records)["buckets"], "unlabelled": None}, label="stage")
    assert stages.startswith("| stage | bucket | N | Searched |") and stages.count("\n") == 4  # header, rule, 3 rows
    assert "| warm | common_unknown | 1 | 100.0 | 2.00 | 0.0 | - |" in stages
    assert bucket_table({"unlabelled": None}) == ""
    assert "buckets" not in aggregate(RECORDS)  # no labels, no bucket table
    assert "By what the policy knows" not in markdown_tables({"formats": {"x": aggregate(RECORDS)}})
