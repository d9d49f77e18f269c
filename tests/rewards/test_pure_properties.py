"""Property tests: the pure rewards stay in their documented ranges for any input."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agentrag_verl.methods.autosearch import reward as autosearch
from agentrag_verl.methods.hiprag import reward as hiprag
from agentrag_verl.methods.multistage import reward as multistage
from agentrag_verl.methods.searchp1 import reward as searchp1
from agentrag_verl.methods.searchr1 import reward as searchr1

bools = st.booleans()
unit = st.floats(0.0, 1.0)


@given(bools, bools, st.floats(0.0, 1.0))
def test_searchr1_range(a, f, lam):
    assert 0.0 <= searchr1.outcome_format_reward(a, f, lam) <= 1.0 + 1e-12


@given(bools, bools, st.integers(0, 20), st.integers(0, 20), st.sampled_from([0.0, 0.2, 0.4, 0.6]))
def test_hiprag_range(a, f, n, k, lam_p):
    k = min(k, n)
    r = hiprag.hierarchical_reward(a, f, n, k, lambda_p=lam_p)
    assert 0.0 <= r <= 1.0 + lam_p + 1e-12
    if not (a and f):
        assert r <= 0.8 + 1e-12  # bonus only for A = F = 1


@given(bools, st.integers(0, 10), st.sampled_from([1, 2]))
def test_multistage_answer_range(correct, rc, stage):
    r = multistage.answer_reward(correct, rc, stage)
    assert (r <= 1.0) if correct else (-1.0 <= r)
    assert (r == 1.0) if (correct and stage == 1) else True
    assert (r == -1.0) if (not correct and stage == 2) else True


@settings(max_examples=50)
@given(
    st.lists(st.lists(st.floats(0.01, 1.0), min_size=3, max_size=3), min_size=2, max_size=6),
    st.sampled_from(["mean", "eq8"]),
)
def test_multistage_search_range(embs, mode):
    r = multistage.search_reward(["q"] * len(embs), embs, pairwise=mode)
    assert -1.0 - 1e-9 <= r <= 0.0  # non-negative embeddings: cosine in [0, 1]


@given(st.text(max_size=80))
def test_multistage_concise_never_raises(q):
    assert multistage.search_reward([q]) in (0.0, -1.0)


@given(
    st.sampled_from([0.2, 0.6, 1.0, 1.2]),
    st.integers(0, 8),
    st.integers(0, 8),
    st.integers(0, 8),
    st.integers(0, 8),
    st.integers(0, 8),
    bools,
    bools,
    bools,
)
def test_searchp1_ranges(r_planner, n_plan, n_exec, n_cov, n_ref, n_act, eff, s_on, r_on):
    ev = {
        "planner_score": r_planner,
        "model_plan_steps": n_plan,
        "effective_steps_self": n_exec,
        "effective_steps_ref": n_cov,
    }
    p = searchp1.path_reward(ev, n_ref, n_act, self_track=s_on, ref_track=r_on, efficiency=eff)
    assert 0.0 <= p <= 1.2 + 1e-12


@given(
    bools,
    st.sampled_from([0.0, 0.5, 1.0]),
    st.sampled_from([0.0, 0.5, 0.8, 1.0]),
    st.sampled_from([0.0, 0.5, 1.0]),
    st.floats(0, 1.2),
)
def test_searchp1_total_range(correct, acc, reason, level, path):
    o = searchp1.outcome_reward(correct, acc, reason)
    assert 0.0 <= o <= 1.0
    t = searchp1.total_reward(level, path, o)
    assert 0.0 <= t <= 0.3 * 1.2 + 0.6 + 0.1 + 1e-12
    assert level > 0 or t == 0.0


@given(st.lists(st.tuples(bools, bools, unit), max_size=6), bools, bools)
def test_autosearch_length_and_range(steps, final_valid, final_em):
    valid = [s[0] for s in steps]
    ems = [s[1] for s in steps]
    f1s = [s[2] for s in steps]
    r = autosearch.step_rewards(valid, final_valid, final_em, ems, f1s)
    assert len(r) == len(steps) + 1
    assert -0.5 <= r[-1] <= 1.1 + 1e-12
    for x in r[:-1]:
        assert -0.05 - 0.1 - 1.0 - 1e-9 <= x <= 0.35 + 1.0 + 1e-6
    # Eq. 9: each quality reward is the gain over the best earlier F1, so it never exceeds 1 - best-so-far
    best = 0.0
    for f1, q in zip(f1s, autosearch.quality_rewards(f1s), strict=True):
        assert abs(q - (f1 - best)) < 1e-12
        best = max(best, f1)
