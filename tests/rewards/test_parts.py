"""Reward parts and their composition (the numbers of docs/methods/), and the check that each paper formula lives in
one place."""

from __future__ import annotations

import ast
import asyncio
import doctest
import importlib
from pathlib import Path

import pytest

from agentrag_verl.methods.autosearch.parts import (
    AutoSearchEfficiency,
    AutoSearchOutcome,
    AutoSearchQuality,
    AutoSearchStepFormat,
    AutoSearchStepRewards,
    AutoSearchSteps,
    over_search_penalty,
)
from agentrag_verl.methods.hiprag.parts import HipragProcessBonus, HipragStepOptimality
from agentrag_verl.methods.searchp1.parts import SearchP1Evaluator
from agentrag_verl.methods.searchr1.parts import OutcomeFormat
from agentrag_verl.rewards import parts as P
from agentrag_verl.rewards.record import Sample

from .test_managers_integration import HIPRAG_OK

REWARDS = Path(__file__).resolve().parents[2] / "agentrag_verl" / "rewards"
METHODS = REWARDS.parent / "methods"


class ScriptedJudge:
    """Over-search True iff the step conclusion says REDUNDANT; under-search False iff the reasoning says WRONG."""

    def __init__(self) -> None:
        self.requests: list = []

    async def judge_many(self, requests):
        from agentrag_verl.judges import Verdict

        out = []
        for r in requests:
            self.requests.append(r)
            text = " ".join(str(m.get("content", "")) for m in r.messages) if hasattr(r, "messages") else str(r)
            flag = "REDUNDANT" in text if "Statement 1" in text else "WRONG" not in text
            out.append(Verdict(flag, str(flag), True, None, None))
        return out


def run(reward: P.Reward, sample: Sample, judge: ScriptedJudge | None = None) -> P.ScoredRecord:
    async def provider(name, cfg):
        return judge

    return asyncio.run(reward.score(sample, judge=provider if judge else None))


@pytest.mark.parametrize("module", ["core", "common", "searchr1", "autosearch", ""])
def test_parts_examples(module):
    if module in ("searchr1", "autosearch"):
        mod = importlib.import_module(f"agentrag_verl.methods.{module}.parts")
    else:
        mod = importlib.import_module("agentrag_verl.rewards.parts" + (f".{module}" if module else ""))
    result = doctest.testmod(mod)
    assert result.attempted > 0 and result.failed == 0


def test_hiprag_eq1_from_parts_with_shared_judge_calls():
    answer, fmt = P.AnswerMetrics("hiprag", metric="cem"), P.FormatCheck("hiprag")
    steps = HipragStepOptimality()
    reward = P.Reward(
        terms=[OutcomeFormat(answer, fmt), HipragProcessBonus(answer, fmt, steps)], acc="cem", report=[answer]
    )
    judge = ScriptedJudge()
    fields = {"agentrag_reanswers": [{"step": 0, "query": "capital of France", "text": "Paris"}]}
    scored = run(reward, Sample(HIPRAG_OK, ["Paris"], extra_fields=fields), judge)
    # 3 steps: search REDUNDANT (over-search), WRONG reasoning (under-search), optimal -> 0.8 + 0.2 + 0.4 * 1/3;
    # one over-search request (the search step) and two under-search requests (the non-search steps)
    assert scored.score == pytest.approx(1 + 0.4 / 3)
    assert scored.info["hiprag_optimal"] == 1 and scored.info["judge_requests"] == 3 == len(judge.requests)
    assert scored.info["acc"] == 1.0 and scored.placements is None
    # wrong answer: the bonus gate is closed, no judge call at all (HiPRAG: judges only for A = F = 1)
    judge = ScriptedJudge()
    scored = run(reward, Sample(HIPRAG_OK.replace(">Paris</answer>", ">Lyon</answer>"), ["Paris"]), judge)
    assert scored.score == pytest.approx(0.2) and judge.requests == [] and "hiprag_judged" not in scored.info


def test_keys_are_fixed_and_conflicts_rejected():
    answer = P.AnswerMetrics("searchr1")
    reward = P.Reward(terms=[OutcomeFormat(answer, P.FormatCheck("searchr1"))], acc="em")
    assert reward.keys() == ("acc", "em", "cem", "f1", "format_ok")
    with pytest.raises(ValueError, match="'em' is emitted by both"):
        P.Reward(terms=[answer, P.AnswerMetrics("searchr1", metric="cem")])
    with pytest.raises(ValueError, match="names no key"):
        P.Reward(terms=[answer], acc="hiprag_bonus")
    with pytest.raises(TypeError, match="Part instances"):
        P.Reward(terms=[0.5])  # type: ignore[list-item]
    # summed counters may come from several parts: two judged parts each count their calls
    assert P.Reward(terms=[HipragStepOptimality(), SearchP1Evaluator()], acc=answer).keys().count("judge_requests") == 1


def test_per_step_placement_sums_to_score_and_scaled_weights():
    # AutoSearch view of a Search-R1 trajectory: two retrieval steps ending at tokens 3 and 9, answer at 14
    resp = (
        "<think>a</think><search>first query</search><information>d</information>"
        "<think>b</think><search>another topic</search><information>d</information>"
        "<think>c</think><answer>Paris</answer>"
    )
    fields = {
        "agentrag_steps": [
            {"kind": "search", "end_token_index": 3},
            {"kind": "search", "end_token_index": 9},
            {"kind": "answer", "end_token_index": 14},
        ],
        "agentrag_intermediate_answers": [{"step": 0, "answer": "Lyon"}, {"step": 1, "answer": "Paris"}],
    }
    sample = Sample(resp, ["Paris"], extra_fields=fields)
    answer, view = P.AnswerMetrics("searchr1"), AutoSearchSteps()
    parts = [AutoSearchEfficiency(view), AutoSearchQuality(view), AutoSearchOutcome(view, answer)]
    scored = run(P.Reward(terms=[*parts, P.Scaled(P.FormatCheck("searchr1"), 0.5)], per_step=True), sample)
    # t_c = 2: Eq. 7 0.4/2 - 0.05 = 0.15 at both retrieval steps; Eq. 9 F1 gains 0, 1; Eq. 2 EM 1 at 14;
    # the scaled scalar term (0.5 x valid format 1.0) lands on the last token (-1)
    expected = [(3, 0.15), (9, 0.15), (3, 0.0), (9, 1.0), (14, 1.0), (-1, 0.5)]
    assert [p for p, _ in scored.placements] == [p for p, _ in expected]
    assert [r for _, r in scored.placements] == pytest.approx([r for _, r in expected], abs=1e-5)
    assert sum(r for _, r in scored.placements) == pytest.approx(scored.score)
    assert scored.info["as_t_c"] == 2 and scored.info["acc"] == 1.0  # acc defaults to em
    # The full AutoSearch step reward equals the sum of its separately composed pieces (+ Eq. 1, all valid: 0, 0.1)
    full = run(P.Reward(terms=[AutoSearchStepRewards(view, answer)], per_step=True), sample)
    assert full.score == pytest.approx(scored.score - 0.5 + 0.1, abs=1e-5)


def test_over_search_penalty_on_hiprag_steps():
    fields = {
        "agentrag_steps": [{"kind": "search", "end_token_index": 5}, {"kind": "answer", "end_token_index": 20}],
        "agentrag_intermediate_answers": [{"step": 0, "answer": "Paris"}],
    }
    two_search = HIPRAG_OK.replace(
        "<step><reasoning>WRONG",
        "<step><reasoning>again</reasoning><search>France capital</search><context>d</context>"
        "<conclusion>Paris</conclusion></step><step><reasoning>WRONG",
    )
    fields["agentrag_steps"].insert(1, {"kind": "search", "end_token_index": 12})
    view = AutoSearchSteps("hiprag")
    scored = run(
        P.Reward(terms=[AutoSearchEfficiency(view, over_search_penalty(-0.1))], per_step=True),
        Sample(two_search, ["Paris"], extra_fields=fields),
    )
    # the first search already had the answer (t_c = 1): the second search (t = 2 > t_c) costs -0.1
    assert scored.placements == [(5, 0.0), (12, -0.1)] and scored.info["as_over_search"] == 1.0
    with pytest.raises(ValueError, match="Search-R1 grammar only"):
        AutoSearchStepFormat(view)


def test_context_computes_each_part_once():
    calls = []

    class Counting(P.Part):
        async def compute(self, ctx):
            calls.append(1)
            return P.PartResult(value=2.0)

    shared = Counting()
    reward = P.Reward(terms=[P.Scaled(shared, 1.0), P.Scaled(shared, -0.5)])
    assert run(reward, Sample("", [])).score == 1.0 and len(calls) == 1
    with pytest.raises(RuntimeError, match="judge provider"):
        run(P.Reward(terms=[SearchP1Evaluator()]), Sample("", []))


# ---- each paper formula lives in one place -----------------------------------------------------------------------

PURE = ("searchr1", "hiprag", "multistage", "searchp1", "autosearch")


def _calls(path: Path, module_alias: str = "fn") -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == module_alias
    }


def test_each_formula_lives_in_one_place():
    """The pure modules hold the formulas; the parts call them; the managers only compose parts.

    Checks: (1) no manager module calls a pure reward function (only option dataclasses of the pure modules);
    (2) no part or manager does arithmetic with a float constant (a formula outside the pure modules);
    (3) every public pure function is used by a part (so the built-in managers reach it through the parts).
    """
    managers = sorted([*(REWARDS / "managers").glob("*.py"), *METHODS.glob("*/manager.py")])
    for path in managers:
        src = path.read_text()
        for name in PURE:
            imports_pure = f"from agentrag_verl.methods.{name} import reward as fn" in src
            assert not imports_pure or path.parent.name in ("autosearch", "multistage"), path
        used = _calls(path)
        allowed = {"AutoSearchRewardConfig", "ConcisenessRules"}  # option dataclasses, not formulas
        assert used <= allowed, f"{path.name} calls pure reward functions {sorted(used - allowed)}; use parts"
    part_calls: set[str] = set()
    parts = [*(REWARDS / "parts").glob("*.py"), *METHODS.glob("*/parts.py")]
    for path in [*parts, *managers]:
        part_calls |= _calls(path) if path in parts else set()
        tree = ast.parse(path.read_text())
        # no reward arithmetic with a numeric constant (a formula) outside the pure modules
        formulas = [
            ast.unparse(n)
            for n in ast.walk(tree)
            if isinstance(n, ast.BinOp)
            and any(isinstance(side, ast.Constant) and isinstance(side.value, float) for side in (n.left, n.right))
        ]
        assert not formulas, f"{path} computes {formulas}; put formulas in agentrag_verl/methods/<paper>/reward.py"
    for name in PURE:
        mod = importlib.import_module(f"agentrag_verl.methods.{name}.reward")
        public = {n for n in mod.__all__ if callable(getattr(mod, n)) and not isinstance(getattr(mod, n), type)}
        # reached = called by a part, or by a pure function that is reached (e.g. is_concise via search_reward)
        tree = ast.parse((METHODS / name / "reward.py").read_text())
        callees = {
            f.name: {c.func.id for c in ast.walk(f) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
            for f in tree.body
            if isinstance(f, ast.FunctionDef)
        }
        reached = set(part_calls) & set(callees)
        while True:
            more = set().union(*(callees[f] for f in reached)) & set(callees) - reached
            if not more:
                break
            reached |= more
        # exact_match_reward (v0.1) and hierarchical_reward (Eq. 1 in one call) are conveniences over reached parts;
        # restage rescores a logged total from one multi-stage stage to the other (benchmarks/learning.py)
        unused = public - reached - {"hierarchical_reward", "restage"}
        assert not unused, f"{name}: {sorted(unused)} not reached by any part"
    assert {"process_bonus", "outcome_format_reward", "step_rewards", "path_reward", "answer_reward"} <= part_calls
