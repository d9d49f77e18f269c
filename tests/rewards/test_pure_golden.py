"""Golden values of the pure reward functions, computed by hand from the papers' equations (docs/methods/)."""

from __future__ import annotations

import doctest
import importlib

import pytest

from agentrag_verl.methods.autosearch import reward as autosearch
from agentrag_verl.methods.hiprag import reward as hiprag
from agentrag_verl.methods.multistage import reward as multistage
from agentrag_verl.methods.searchp1 import reward as searchp1
from agentrag_verl.methods.searchr1 import reward as searchr1


@pytest.mark.parametrize("module", ["searchr1", "hiprag", "multistage", "searchp1", "autosearch"])
def test_module_examples(module):
    result = doctest.testmod(importlib.import_module(f"agentrag_verl.methods.{module}.reward"))
    assert result.attempted > 0 and result.failed == 0


# ---- Search-R1 (docs/methods/searchr1.md) ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "f", "expected"),
    [(1, 1, 1.0), (1, 0, 0.8), (0, 1, 0.2), (0, 0, 0.0)],  # v0.3 table with λf = 0.2
)
def test_searchr1_outcome_format(a, f, expected):
    assert searchr1.outcome_format_reward(a, f) == pytest.approx(expected)


def test_searchr1_em_only():
    assert searchr1.exact_match_reward(1.0) == 1.0 and searchr1.exact_match_reward(False) == 0.0


# ---- HiPRAG Eq. 1 (docs/methods/hiprag.md) --------------------------------------------------------------------


def test_hiprag_eq1_paper_denominator():
    # Figure 3 shape: 4 steps (3 search), 3 optimal: 0.8 + 0.2 + 0.4 * 3/4 = 1.3
    assert hiprag.hierarchical_reward(1, 1, n_steps=4, n_optimal=3) == pytest.approx(1.3)
    # λp ablations 0.2 / 0.6: 1 + 0.2*0.75 = 1.15 ; 1 + 0.6*0.75 = 1.45
    assert hiprag.hierarchical_reward(1, 1, 4, 3, lambda_p=0.2) == pytest.approx(1.15)
    assert hiprag.hierarchical_reward(1, 1, 4, 3, lambda_p=0.6) == pytest.approx(1.45)
    # λp = 0 is the Search-R1 v0.3 baseline
    assert hiprag.hierarchical_reward(1, 1, 4, 3, lambda_p=0.0) == 1.0


def test_hiprag_eq1_authors_denominator():
    # Authors' code: Ncorr / (#search steps) = 3/3 -> 1 + 0.4 = 1.4 (paper: 1.3); 4 optimal of 2 searches -> 1.8 > 1+λp
    assert hiprag.hierarchical_reward(1, 1, 4, 3, denominator="search", n_search_steps=3) == pytest.approx(1.4)
    assert hiprag.hierarchical_reward(1, 1, 4, 4, denominator="search", n_search_steps=2) == pytest.approx(1.8)
    # no search step: bonus 0
    assert hiprag.hierarchical_reward(1, 1, 2, 2, denominator="search", n_search_steps=0) == 1.0
    with pytest.raises(ValueError, match="n_search_steps"):
        hiprag.hierarchical_reward(1, 1, 4, 3, denominator="search")
    with pytest.raises(ValueError, match="choose one of"):
        hiprag.hierarchical_reward(1, 1, 4, 3, denominator="steps")


@pytest.mark.parametrize(("a", "f", "expected"), [(1, 0, 0.8), (0, 1, 0.2), (0, 0, 0.0)])
def test_hiprag_bonus_only_when_a_and_f(a, f, expected):
    assert hiprag.hierarchical_reward(a, f, 4, 4) == pytest.approx(expected)


def test_hiprag_exclude_policy_counts():
    # exclude: the failed step leaves numerator and denominator -> 2/3 ; all failed -> (0, 0) -> bonus 0
    optimal = hiprag.step_optimality([True, True, False, False], [False, None, None, None], [None, None, True, False])
    assert optimal == [True, None, False, True]
    n_opt, n = hiprag.count_optimal_steps(optimal)
    assert (n_opt, n) == (2, 3)
    assert hiprag.hierarchical_reward(1, 1, n, n_opt) == pytest.approx(1 + 0.4 * 2 / 3)
    assert hiprag.hierarchical_reward(1, 1, *reversed(hiprag.count_optimal_steps([None, None]))) == 1.0


def test_hiprag_detector_ablations():
    flags = ([True, False], [True, None], [None, True])  # search step over-searched; non-search under-searched
    assert hiprag.step_optimality(*flags) == [False, False]
    assert hiprag.step_optimality(*flags, over_search_detector=False) == [True, False]  # "under-search only"
    assert hiprag.step_optimality(*flags, under_search_detector=False) == [False, True]  # "over-search only"


# ---- Multi-stage (docs/methods/multistage.md) -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("correct", "rc", "stage", "expected"),
    [
        (True, 3, 1, 1.0),  # stage 1 correct: 1.0
        (False, 3, 1, -0.1),  # -1 + 0.3*3
        (False, 0, 1, -1.0),
        (True, 3, 2, 0.1),  # 1 - 0.3*3
        (True, 0, 2, 1.0),
        (False, 3, 2, -1.0),
    ],
)
def test_multistage_answer_reward(correct, rc, stage, expected):
    assert multistage.answer_reward(correct, rc, stage) == pytest.approx(expected)


def test_multistage_search_reward_eq9_and_eq8_halving():
    e = [[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]]
    # cosines: (0,1)=0.6, (0,2)=0, (1,2)=0.8 -> sum 1.4 ; mean over 3 pairs 0.4667 ; Eq. 8 literal 1.4/6 = 0.2333
    assert multistage.search_reward(["a", "b", "c"], e) == pytest.approx(-1.4 / 3)
    assert multistage.search_reward(["a", "b", "c"], e, pairwise="eq8") == pytest.approx(-1.4 / 6)
    assert multistage.search_reward([]) == 0.0  # RC = 0 counts as concise
    assert multistage.search_reward(["Barack Obama birthplace"]) == 0.0
    assert multistage.search_reward(["Where was Barack Obama born?"]) == -1.0
    assert multistage.search_reward(["x"], concise=lambda q: False) == -1.0
    with pytest.raises(ValueError, match="embedding per query"):
        multistage.search_reward(["a", "b"], None)


def test_multistage_conciseness_rules_configurable():
    long_query = " ".join(f"w{i}" for i in range(13))  # 13 words > default 12
    assert not multistage.is_concise(long_query)
    assert multistage.is_concise(long_query, multistage.ConcisenessRules(max_query_words=20))
    assert not multistage.is_concise("of the in Paris")  # 3/4 stopwords > 0.5


def test_multistage_total_and_format():
    # stage 2, correct, RC 2, queries 0.5 similar, valid format: (1 - 0.6) - 0.5 + 1 = 0.9
    r_a = multistage.answer_reward(True, 2, 2)
    r_s = multistage.search_reward(["a", "b"], [[1.0, 0.0], [0.5, 0.75**0.5]])
    assert multistage.total_reward(r_a, r_s, multistage.format_reward(True)) == pytest.approx(0.9)
    assert multistage.total_reward(r_a, r_s, -1.0, use_search_reward=False) == pytest.approx(-0.6)


def test_multistage_stage_schedule():
    assert [multistage.stage_for_step(s, None, 3) for s in (0, 2, 3, 10)] == [1, 1, 2, 2]
    assert multistage.stage_for_step(10, 1, 3) == 1  # fixed stage (two-run schedule) wins
    assert multistage.stage_for_step(None, None, 3) == 1
    with pytest.raises(ValueError, match="choose 1 or 2"):
        multistage.answer_reward(True, 1, 3)


# ---- Search-P1 (docs/methods/searchp1.md) ---------------------------------------------------------------------

EV = {
    "planner_score": 1.0,
    "model_plan_steps": 4,
    "effective_steps_self": 3,
    "effective_steps_ref": 2,
    "outcome_accuracy_score": 0.5,
    "outcome_reasoning_score": 0.8,
}


def test_searchp1_eq6_eq7_vs_alg3():
    # Eq. 6: 1.0 * 3/4 * 3/5 = 0.45 ; Eq. 7: 2/3 * 2/5 = 0.2667 -> R_path 0.45
    assert searchp1.path_reward(EV, n_ref_steps=3, n_actions=5) == pytest.approx(0.45)
    # Alg. 3 (no efficiency factor): S_self = 0.75, S_ref = 2/3 -> 0.75
    assert searchp1.path_reward(EV, 3, 5, efficiency=False) == pytest.approx(0.75)
    # ablations: w/o self-consistency -> S_ref ; w/o reference alignment -> S_self
    assert searchp1.path_reward(EV, 3, 5, self_track=False) == pytest.approx(4 / 15)
    assert searchp1.path_reward(EV, 3, 5, ref_track=False) == pytest.approx(0.45)


def test_searchp1_clipping_and_guards():
    ev = dict(EV, effective_steps_self=6, model_plan_steps=4, planner_score=1.2)
    # n_exec/n_plan clipped to 1, n_exec/n_actions clipped to 1 (n_actions 0 -> 1): 1.2
    assert searchp1.path_reward(ev, 0, 0) == pytest.approx(1.2)
    # no reference path: S_ref = 0
    assert searchp1.track_scores(EV, 0, 3)[1] == 0.0


def test_searchp1_outcome_eq8_and_total_eq4():
    assert searchp1.outcome_reward(False, 0.5, 0.8) == pytest.approx(0.56)  # 0.8*0.5 + 0.2*0.8
    assert searchp1.outcome_reward(False, 0.5, 0.8, alpha=0.5) == pytest.approx(0.65)
    assert searchp1.outcome_reward(False, 1.0, 1.0, soft=False) == 0.0  # binary ablation
    # FULL: 0.3*0.45 + 0.6*0.56 + 0.1*1 = 0.135 + 0.336 + 0.1 = 0.571
    assert searchp1.total_reward(1.0, 0.45, 0.56) == pytest.approx(0.571)
    # HALF: r_f contributes 0.05 (Alg. 3 l. 5) ; INVALID: whole reward 0 (Alg. 3 l. 7)
    assert searchp1.total_reward(0.5, 0.0, 0.0) == pytest.approx(0.05)
    assert searchp1.total_reward(0.0, 1.2, 1.0) == 0.0


def test_searchp1_accepts_alg3_names_and_evaluation_dataclass():
    from agentrag_verl.methods.searchp1.judge import SearchP1Evaluation

    alg3 = {"planner_score": 1.0, "model_plan_steps": 4, "eff_steps_self": 3, "eff_steps_ref": 2}
    assert searchp1.path_reward(alg3, 3, 5) == pytest.approx(0.45)
    ev = SearchP1Evaluation(1.0, 4, 3, 2, 0.5, 0.8)
    assert searchp1.path_reward(ev, 3, 5) == pytest.approx(0.45)


# ---- AutoSearch (docs/methods/autosearch.md) -----------------------------------------------------------------


def test_autosearch_three_retrievals_correct_at_two():
    # T = 4: three retrieval steps, t_c = 2 (first EM at step 2), all valid, final EM 1.
    # efficiency: 0.4/2 - 0.05 = 0.15 (t=1,2), -0.1 (t=3); quality: F1 0.4, 1.0, 1.0 -> 0.4, 0.6, 0.0
    r = autosearch.step_rewards([True, True, True], True, 1, [0, 1, 1], [0.4, 1.0, 1.0])
    assert r == pytest.approx([0.55, 0.75, -0.1, 1.1], abs=1e-5)


def test_autosearch_under_search_and_invalid():
    # t_c = -1: +0.025 each; invalid retrieval -0.05 (repeated query); invalid answer -0.5, EM 0
    r = autosearch.step_rewards([True, False], False, 0, [0, 0], [0.0, 0.5])
    assert r == pytest.approx([0.025, -0.05 + 0.025 + 0.5, -0.5], abs=1e-5)


def test_autosearch_no_retrieval_and_quality_decrease():
    assert autosearch.step_rewards([], True, 1, [], []) == pytest.approx([1.1], abs=1e-5)
    assert autosearch.quality_rewards([0.8, 0.3, 0.9]) == pytest.approx([0.8, -0.5, 0.1], abs=1e-5)  # vs best so far
    clipped = autosearch.AutoSearchRewardConfig(clip_quality=(0.0, 1.0))
    assert autosearch.quality_rewards([0.8, 0.3], clipped) == pytest.approx([0.8, 0.0], abs=1e-5)


def test_autosearch_ablation_switches():
    args = ([True, True], True, 1, [1, 1], [1.0, 1.0])
    cfg = autosearch.AutoSearchRewardConfig
    # full: t_c = 1 -> eff 0.35, -0.1 ; quality 1.0, 0.0 ; answer 0.1 + 1
    assert autosearch.step_rewards(*args) == pytest.approx([1.35, -0.1, 1.1], abs=1e-5)
    assert autosearch.step_rewards(*args, cfg(use_quality=False)) == pytest.approx([0.35, -0.1, 1.1], abs=1e-5)
    assert autosearch.step_rewards(*args, cfg(use_efficiency=False)) == pytest.approx([1.0, 0.0, 1.1], abs=1e-5)
    assert autosearch.step_rewards(*args, cfg(use_base=False)) == pytest.approx([1.35, -0.1, 1.0], abs=1e-5)
    assert autosearch.step_rewards(*args, cfg(use_outcome=False)) == pytest.approx([1.35, -0.1, 0.1], abs=1e-5)
    with pytest.raises(ValueError, match="one intermediate answer per retrieval step"):
        autosearch.step_rewards([True], True, 1, [], [])
