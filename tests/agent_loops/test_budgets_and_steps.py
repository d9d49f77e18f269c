"""The papers' rollout algorithms end to end: budgets as HiPRAG Alg. 1 / Search-P1 Alg. 2 / Search-R1 run them, and
the one step indexing (AutoSearch retrieval steps, HiPRAG re-answers) from the agent loop to the reward.

Each trajectory is rolled out by verl's real ``AgentLoopWorker`` with a scripted policy, then scored with the
reward manager's own composition. Expected rewards are computed by hand from the papers' equations (comments).
"""

from __future__ import annotations

from typing import Any

import pytest
from omegaconf import OmegaConf

from agentrag_verl.agent_loops import fields as F
from agentrag_verl.agent_loops.steps import search_step_reanswers
from agentrag_verl.formats import get_format
from agentrag_verl.judges import Verdict
from agentrag_verl.methods.hiprag.parts import HipragStepOptimality
from agentrag_verl.methods.searchp1.judge import SearchP1Evaluation
from agentrag_verl.registry import reward_manager_class
from agentrag_verl.rewards.parts import RewardContext
from agentrag_verl.rewards.record import Sample

from .test_search_agent_loop import TurnScript, answer_turn, run, run_forced, search_turn, spans, unpad

GOLDS = ["1934"]


class Judge:
    """Scripted judge for every use: HiPRAG over-search (Figure 5) says "equivalent" iff the two statements are equal,
    the under-search verifier (Figure 6) says "correct" unless the reasoning says WRONG, the Search-P1 evaluator
    (Figure 9) returns ``evaluation``."""

    def __init__(self, evaluation: SearchP1Evaluation | None = None) -> None:
        self.evaluation = evaluation
        self.requests: list[Any] = []

    async def judge(self, request: Any) -> Any:
        self.requests.append(request)
        text = " ".join(str(m.get("content", "")) for m in request.messages)
        if "Dual-Track" in text or "Model Trajectory" in text:
            return Verdict(self.evaluation, "{}", True, None, None)
        if "Statement 1" in text:
            first = text.split("Statement 1:", 1)[1].split("Statement 2:", 1)[0].strip()
            second = text.split("Statement 2:", 1)[1].strip().split("\n", 1)[0].strip()
            return Verdict(first == second, "", True, None, None)
        return Verdict("WRONG" not in text, "", True, None, None)

    async def judge_many(self, requests: Any) -> list[Any]:
        return [await self.judge(r) for r in requests]


def manager(name: str, tokenizer: Any, **kwargs: Any) -> Any:
    config = OmegaConf.create({"reward": {"reward_kwargs": kwargs}})
    return reward_manager_class(name)(config=config, tokenizer=tokenizer)


async def score(mgr: Any, sample: Sample, judge: Judge | None = None) -> Any:
    async def provider(name: str, cfg: Any) -> Any:
        return judge

    return await mgr.reward.score(sample, judge=provider if judge else None)


def sample_of(out: Any, tok: Any, **kwargs: Any) -> tuple[Sample, list[int], list[int]]:
    ids, mask = unpad(out)
    fields = {k: out.non_tensor_batch[k][0] for k in F.ALL_KEYS}
    text = tok.decode(ids, skip_special_tokens=True)
    return Sample(text, GOLDS, extra_fields=fields, response_length=len(ids), **kwargs), ids, mask


# ---------------------------------------------------------------------------------------------------- item 2: budgets


async def test_searchr1_final_turn_search_is_cut_and_full_reward(make_worker, retriever):
    """Search-R1 (B = 2): two searches, then the final turn; the model opens a third search there, which is not run:
    it is cut before ``<search>`` and ``<answer>`` is forced, so no unexecuted search stays in the response."""
    worker = make_worker()
    tok = worker.tokenizer
    fmt = "searchr1"
    turns = [
        search_turn(fmt, "Orla Brennick"),
        search_turn(fmt, "Marrow & Tilde founded"),
        "<think>One more.</think>\n<search>Asvik</search>",
    ]
    out, client = await run(worker, fmt, turns, retriever_url=retriever.url, budget=2)
    sample, ids, mask = sample_of(out, tok)
    assert len(retriever.requests) == 2 and "Asvik" not in sample.response
    assert sample.response.count("<search>") == 2 and sample.response.rstrip().endswith("<answer> 1934</answer>")
    steps = out.non_tensor_batch[F.STEPS][0]
    assert [s[F.STEP_KIND] for s in steps] == ["search", "search", "answer"]
    assert out.non_tensor_batch[F.BUDGET_EXHAUSTED][0] is True
    # the final turn stopped at the search's opening tag (its query was never generated)
    final_turn = [c for c in client.calls if "stop" in c.sampling_params][2]
    assert final_turn.sampling_params["stop"] == ["<search>", "</answer>"]
    # Search-R1 v0.3 (HiPRAG Eq. 1 with λp = 0): A(1-λf) + λf·F = 0.8·1 + 0.2·1 = 1.0 (valid: T S I T S I T A)
    assert get_format(fmt).check_format(sample.response)
    scored = await score(manager("searchr1", tok), sample)
    assert scored.score == pytest.approx(1.0) and scored.info["n_search"] == 2.0


async def test_searchr1_final_turn_answer_is_untouched(make_worker, retriever):
    worker = make_worker()
    fmt = "searchr1"
    turns = [search_turn(fmt, "Orla Brennick"), search_turn(fmt, "Marrow"), answer_turn(fmt, "1934")]
    out, _ = await run(worker, fmt, turns, retriever_url=retriever.url, budget=2)
    sample, _, _ = sample_of(out, worker.tokenizer)
    # the model answered in its final turn by itself: nothing was forced
    assert out.non_tensor_batch[F.BUDGET_EXHAUSTED][0] is False
    assert sample.response.rstrip().endswith("<think>Found.</think>\n<answer>1934</answer>")
    scored = await score(manager("searchr1", worker.tokenizer), sample)
    assert scored.score == pytest.approx(1.0)  # 0.8 + 0.2


async def test_searchp1_forces_answer_after_the_bth_response_full_reward(make_worker, retriever):
    """Search-P1 Alg. 2 (B = 2): right after the second <tool_response> the environment appends <answer> (l. 15-16),
    so a trajectory that uses its whole budget is FULL with exactly B actions."""
    worker = make_worker()
    tok = worker.tokenizer
    fmt = "searchp1"
    turns = [
        search_turn(fmt, "Bang Bang Rock & Roll album"),
        "<reasoning>Now the singer.</reasoning>\n<tool_call>lead singer of Art Brut</tool_call>",
        "<reasoning>More.</reasoning>\n<tool_call>Art Brut members</tool_call>",  # never generated
    ]
    out, client = await run_forced(worker, fmt, turns, 2, retriever.url)
    ids, mask = unpad(out)
    path = ["Bang Bang Rock & Roll album", "lead singer of Art Brut"]
    plan = {"ref_planner": "find the band, then its singer", "ref_reasoning_path": path}
    sample, _, _ = sample_of(out, tok, extra_info=plan)
    assert len(retriever.requests) == 2 and "Art Brut members" not in sample.response
    assert len([c for c in client.calls if "stop" in c.sampling_params]) == 3  # 2 turns + the forced answer
    zero_runs = [tok.decode(ids[s:e]) for v, s, e in spans(mask) if v == 0]
    # forced right after the B-th tool response: one masked run, the observation then the prefix
    assert zero_runs[-1].endswith("</tool_response>\n<answer>")
    assert get_format(fmt).check_format(sample.response).name == "FULL"
    # Scripted evaluator: r_planner 1.0, n_plan 2, n_exec 2, n_cov 2; |R_ref| = 2, n_actions = 2.
    # Eq. 6: S_self = 1.0 · (2/2) · (2/2) = 1; Eq. 7: S_ref = (2/2) · (2/2) = 1; R_path = max = 1.
    # Eq. 8: exact match -> R_outcome = 1. Alg. 3: FULL -> r_f = 1 (0.1 after λf).
    # Eq. 4: 0.3 · 1 + 0.6 · 1 + 0.1 · 1 = 1.0
    judge = Judge(SearchP1Evaluation(1.0, 2, 2, 2, 0.0, 0.0))
    sample.question = "Who is the lead singer of the band performing Bang Bang Rock & Roll?"
    scored = await score(manager("searchp1", tok), sample, judge)
    assert scored.info["sp1_n_actions"] == 2.0 and scored.info["sp1_format_level"] == 1.0
    assert scored.score == pytest.approx(1.0)


async def test_hiprag_whole_step_budget_gets_full_reward(make_worker, retriever):
    """HiPRAG Alg. 1 (B = 2 steps): after the second </conclusion> the answer is forced; F(T) = (1, 2), A = 1, and
    both search steps are optimal (their conclusions differ from the policy's re-answers)."""
    worker = make_worker()
    tok = worker.tokenizer
    fmt = "hiprag"
    turns = [
        search_turn(fmt, "Orla Brennick"),
        "She founded it.</conclusion></step><step><reasoning>r</reasoning><search>Marrow founding</search>",
        "In 1934.</conclusion></step><step><reasoning>r</reasoning><search>Asvik</search>",
    ]
    out, _ = await run_forced(worker, fmt, turns, 2, retriever.url)
    sample, _, _ = sample_of(out, tok)
    assert get_format(fmt).check_format(sample.response) == (1, 2)
    judge = Judge()
    scored = await score(manager("hiprag", tok), sample, judge)
    # Eq. 1 with A = F = 1, N = 2, Ncorr = 2: 0.8 + 0.2 + 0.4 · 2/2 = 1.4
    assert scored.info["hiprag_optimal"] == 2.0 and scored.info["hiprag_missing_reanswers"] == 0.0
    assert scored.score == pytest.approx(1.4)


async def test_multistage_final_turn_cut_keeps_the_structure(make_worker, retriever):
    """Multi-stage (B = 1 search turn, Search-R1's rollout): the final turn reflects, then opens a search that is cut;
    the forced answer follows the reflection, so the structure holds and RC stays 1."""
    worker = make_worker()
    tok = worker.tokenizer
    fmt = "multistage"
    turns = [search_turn(fmt, "Orla Brennick founder"), "<reflect>Found it.</reflect>\n<search>Asvik</search>"]
    out, _ = await run_forced(worker, fmt, turns, 1, retriever.url)
    sample, _, _ = sample_of(out, tok)
    assert "Asvik" not in sample.response and get_format(fmt).check_format(sample.response)
    scored = await score(manager("multistage", tok, correctness="em", stage=1), sample)
    # r_a (stage 1, correct) = 1; r_s (Eq. 9, RC = 1, "Orla Brennick founder" is concise) = 0; r_f = +1 -> 2.0
    assert (scored.info["ms_r_a"], scored.info["ms_r_s"], scored.info["ms_r_f"]) == (1.0, 0.0, 1.0)
    assert scored.score == pytest.approx(2.0) and scored.info["n_search"] == 1.0


# ------------------------------------------------------------------------------------- item 1: AutoSearch alignment


class AutoSearchScript(TurnScript):
    """Intermediate answers (Prompt 1) by how many retrieval steps the trajectory holds: 1 -> wrong, 2 -> correct."""

    def __call__(self, prompt: str, params: dict[str, Any]) -> str:
        if "Search trajectory:" in prompt:
            n = prompt.count("</information>")
            return "<think>t</think><answer>1950</answer>" if n < 2 else "<think>t</think><answer>1934</answer>"
        return super().__call__(prompt, params)


async def test_autosearch_empty_query_is_retrieval_step_one(make_worker, retriever):
    """The issue's example: an empty query, then a valid search whose intermediate answer is correct, then the answer.
    The empty query got an <information> block, so it is retrieval step 1 (Eq. 1 counts it, invalid); t_c = 2."""
    worker = make_worker()
    tok = worker.tokenizer
    turns = [
        "<think>Search.</think>\n<search> </search>",
        search_turn("autosearch", "Marrow & Tilde founded"),
        answer_turn("autosearch", "1934"),
    ]
    out, _ = await run(worker, "autosearch", AutoSearchScript("autosearch", turns), retriever_url=retriever.url)
    sample, ids, mask = sample_of(out, tok)
    steps = out.non_tensor_batch[F.STEPS][0]
    assert [(s[F.STEP_KIND], s[F.STEP_OBSERVED]) for s in steps] == [
        ("invalid", True),
        ("search", True),
        ("answer", False),
    ]
    ends = [s[F.STEP_END_TOKEN_INDEX] for s in steps]
    # each step ends on its own turn's last model token
    assert all(mask[e] == 1 for e in ends) and len(set(ends)) == 3 and ends[-1] == len(ids) - 1
    assert tok.decode(ids[: ends[0] + 1]).endswith("</search>") and mask[ends[0] + 1] == 0
    assert tok.decode(ids[: ends[1] + 1]).endswith("Marrow & Tilde founded </search>")
    # one intermediate answer per retrieval step, keyed by its step record
    inter = out.non_tensor_batch[F.INTERMEDIATE_ANSWERS][0]
    assert [(r[F.AUX_STEP], r[F.AUX_ANSWER]) for r in inter] == [(0, "1950"), (1, "1934")]

    scored = await score(manager("autosearch", tok), sample)
    # Eq. 1: step 1 invalid (empty query) -0.05, step 2 valid 0, answer step valid +0.1; Eq. 2: EM = 1 at T.
    # Eq. 6: a_1 = "1950" (EM 0), a_2 = "1934" (EM 1) -> t_c = 2.
    # Eq. 7: t <= t_c -> 0.4 / (2 + 1e-6) - 0.05 = 0.15 for t = 1, 2.
    # Eq. 9: F1 0 then 1 -> quality 0 - 0 = 0, 1 - 0 = 1.
    # r_1 = -0.05 + 0.15 + 0 = 0.10; r_2 = 0 + 0.15 + 1 = 1.15; r_3 = 0.1 + 1 = 1.1
    assert scored.info["as_t_c"] == 2.0 and scored.info["as_fallback_placement"] == 0.0
    assert [p for p, _ in scored.placements] == ends
    assert [r for _, r in scored.placements] == pytest.approx([0.10, 1.15, 1.1], abs=1e-6)
    # the eval reads the same steps: SD = 2 retrieval steps, t_c = 2 is the last one (no over-search)
    from agentrag_verl.eval.metrics import question_metrics

    m = question_metrics("autosearch", sample.response, GOLDS, dict(sample.extra_fields))
    assert m["n_search"] == 2 and m["autosearch"] == {"intermediate_em": [0.0, 1.0], "t_c": 2, "over_search": False}


# ------------------------------------------------------------------------------------------ item 3: HiPRAG re-answers


class ReanswerScript(TurnScript):
    """The policy's standalone re-answer (HiPRAG §3.2) names its query, so a pairing mistake shows."""

    def __call__(self, prompt: str, params: dict[str, Any]) -> str:
        if "Please answer the following question" in prompt:
            query = prompt.split("statement:", 1)[1].split("<|im_end|>", 1)[0].strip()
            return "Founded in 1934." if "Marrow" in query else f"About {query}."
        return super().__call__(prompt, params)


async def test_hiprag_reanswer_pairs_with_its_own_search_step(make_worker, retriever):
    """A non-search step and an invalid (empty-query) turn precede the search step, and the recorded query text does
    not match the parsed one: the search step is still paired with its own re-answer, in the reward and the eval."""
    worker = make_worker()
    tok = worker.tokenizer
    fmt = "hiprag"
    turns = [
        "<think><step><reasoning>Known.</reasoning><conclusion>Orla Brennick founded a firm.</conclusion></step>"
        "<step><reasoning>Look it up.</reasoning><search> </search>",
        "Nothing.</conclusion></step><step><reasoning>Again.</reasoning><search>Marrow Tilde founding</search>",
        answer_turn(fmt, "1934").replace("I found it.", "Founded in 1934."),
    ]
    out, _ = await run(worker, fmt, ReanswerScript(fmt, turns), retriever_url=retriever.url)
    sample, _, _ = sample_of(out, tok)
    steps = out.non_tensor_batch[F.STEPS][0]
    assert [(s[F.STEP_KIND], s[F.STEP_OBSERVED]) for s in steps] == [
        ("invalid", True),
        ("search", True),
        ("answer", False),
    ]
    reanswers = [dict(r) for r in out.non_tensor_batch[F.REANSWERS][0]]
    assert [(r[F.AUX_STEP], r[F.AUX_TEXT]) for r in reanswers] == [(1, "Founded in 1934.")]
    # the recorded query differs from the parsed one (e.g. normalized elsewhere): pairing must not need it
    reanswers[0][F.AUX_QUERY] = "marrow & tilde: founding year?"
    fields = {**sample.extra_fields, F.REANSWERS: reanswers}
    parsed = get_format(fmt).parse(sample.response).steps
    assert [s.kind for s in parsed] == ["non_search", "search", "search"]
    assert search_step_reanswers(parsed, fields) == [None, None, "Founded in 1934."]

    # the reward's detector judges the third step's conclusion against its own re-answer: equivalent -> over-search
    judge = Judge()

    async def provider(name: str, cfg: Any) -> Any:
        return judge

    part = HipragStepOptimality()
    result = await RewardContext(Sample(sample.response, GOLDS, extra_fields=fields), provider).get(part)
    assert result.info["hiprag_over_search"] == 1.0 and result.info["hiprag_missing_reanswers"] == 1.0
    # (the empty-query step has no re-answer: missing, excluded under the default policy; the non-search step is
    # verified correct) -> Ncorr = 1 of N = 2 judged
    assert (result.data.n_optimal, result.data.n_judged) == (1, 2)

    # the eval pairs them the same way
    from agentrag_verl.methods.hiprag.evaluation import step_judgements as hiprag_step_judgements

    counts = await hiprag_step_judgements(judge, judge, sample.response, fields)
    assert counts["over_search"] == 1 and counts["missing_reanswers"] == 1 and counts["judged_search"] == 1


async def test_autosearch_whole_budget_full_step_rewards(make_worker, retriever):
    """AutoSearch (Search-R1 rollout, B = 2): two valid searches, then the final turn's search is cut and the answer
    forced. Every step keeps its reward: no retrieval step is lost or added by the budget."""
    worker = make_worker()
    tok = worker.tokenizer
    turns = [
        search_turn("autosearch", "Orla Brennick"),
        search_turn("autosearch", "Marrow & Tilde founded"),
        "<think>One more.</think>\n<search>Asvik</search>",
    ]
    out, _ = await run(
        worker, "autosearch", AutoSearchScript("autosearch", turns), retriever_url=retriever.url, budget=2
    )
    sample, ids, mask = sample_of(out, tok)
    assert "Asvik" not in sample.response and out.non_tensor_batch[F.BUDGET_EXHAUSTED][0] is True
    scored = await score(manager("autosearch", tok), sample)
    # Eq. 1: two valid retrieval steps 0, 0; answer step valid +0.1; Eq. 2: EM 1. Eq. 6: a_1 = 1950, a_2 = 1934
    # -> t_c = 2; Eq. 7: 0.4/2 - 0.05 = 0.15 twice; Eq. 9: 0, 1. r = [0.15, 1.15, 1.1], total 2.4
    assert [r for _, r in scored.placements] == pytest.approx([0.15, 1.15, 1.1], abs=1e-6)
    assert scored.info["as_steps"] == 3.0 and scored.score == pytest.approx(2.4, abs=1e-6)
