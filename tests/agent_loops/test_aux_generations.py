"""Auxiliary policy generations: HiPRAG over-search re-answers and AutoSearch intermediate answers."""

from __future__ import annotations

import pytest

from agentrag_verl.agent_loops import fields as F
from agentrag_verl.formats import get_format
from agentrag_verl.methods.hiprag.agent_loop import NO_ANSWER

from .test_search_agent_loop import QUESTION, TurnScript, answer_turn, run, search_turn, unpad

REANSWER = "REANSWER-TEXT Orla Brennick founded it."
INTERMEDIATE = "<think>so far</think><answer>INTERMEDIATE 1934</answer>"


async def test_hiprag_reanswers_recorded_deduplicated_and_not_trained(make_worker, retriever):
    worker = make_worker()
    tok = worker.tokenizer
    turns = [
        search_turn("hiprag", "Orla Brennick"),
        "c</conclusion></step><step><reasoning>r</reasoning><search>Marrow Tilde</search>",
        answer_turn("hiprag", "1934"),
    ]
    # Two samples of the same question in one worker batch issue the same two queries.
    out, client = await run(
        worker,
        "hiprag",
        TurnScript("hiprag", turns, aux_reply=REANSWER),
        questions=[QUESTION, QUESTION],
        retriever_url=retriever.url,
    )
    reanswer_calls = [c for c in client.calls if "Please answer the following question" in c.prompt_text]
    # Identical queries across the batch are re-answered once: 2 unique queries -> 2 calls, not 4.
    assert len(reanswer_calls) == 2
    assert "Please answer the following question or provide relevant information to the statement: Orla Brennick" in (
        reanswer_calls[0].prompt_text
    )
    total_cost = {k: 0 for k in (F.COST_CALLS, F.COST_PROMPT_TOKENS, F.COST_COMPLETION_TOKENS)}
    for i in range(2):
        records = out.non_tensor_batch[F.REANSWERS][i]
        steps = out.non_tensor_batch[F.STEPS][i]
        assert [(r[F.AUX_STEP], r[F.AUX_QUERY], r[F.AUX_TEXT]) for r in records] == [
            (0, "Orla Brennick", REANSWER),
            (1, "Marrow Tilde", REANSWER),
        ]
        assert all(steps[r[F.AUX_STEP]][F.STEP_QUERY] == r[F.AUX_QUERY] for r in records)
        ids, _ = unpad(out, i)
        assert "REANSWER" not in tok.decode(ids) and "Please answer" not in tok.decode(ids)
        for k, v in out.non_tensor_batch[F.AUX_COST][i].items():
            total_cost[k] += v
        assert out.non_tensor_batch[F.INTERMEDIATE_ANSWERS][i] == []
    assert total_cost[F.COST_CALLS] == 2
    assert total_cost[F.COST_PROMPT_TOKENS] == sum(len(c.prompt_ids) for c in reanswer_calls)
    assert total_cost[F.COST_COMPLETION_TOKENS] == sum(len(c.token_ids) for c in reanswer_calls)
    # Re-answers are not trained on: never requested with logprobs, capped by reanswer_max_tokens.
    assert all(c.sampling_params["max_tokens"] == 128 and not c.sampling_params["logprobs"] for c in reanswer_calls)


async def test_reanswers_off(make_worker, retriever):
    worker = make_worker()
    turns = [search_turn("hiprag", "Orla Brennick"), answer_turn("hiprag", "1934")]
    out, client = await run(worker, "hiprag", turns, retriever_url=retriever.url, reanswers=False)
    assert out.non_tensor_batch[F.REANSWERS][0] == []
    assert out.non_tensor_batch[F.AUX_COST][0] == {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}
    # the trajectory's own generations only: the search turn, its conclusion (HiPRAG Alg. 1 stops at </conclusion>),
    # then the answer; no re-answer
    assert len(client.calls) == 3


async def test_autosearch_intermediate_answers_after_each_retrieval(make_worker, retriever):
    worker = make_worker()
    tok = worker.tokenizer
    turns = [
        search_turn("autosearch", "Orla Brennick"),
        search_turn("autosearch", "Marrow Tilde"),
        answer_turn("autosearch", "1934"),
    ]
    out, client = await run(
        worker, "autosearch", TurnScript("autosearch", turns, aux_reply=INTERMEDIATE), retriever_url=retriever.url
    )
    records = out.non_tensor_batch[F.INTERMEDIATE_ANSWERS][0]
    assert [(r[F.AUX_STEP], r[F.AUX_ANSWER]) for r in records] == [(0, "INTERMEDIATE 1934"), (1, "INTERMEDIATE 1934")]
    prompts = [c.prompt_text for c in client.calls if "Search trajectory:" in c.prompt_text]
    assert len(prompts) == 2
    # Prompt 1 holds the question and the trajectory up to the step's observation (x_t of Eq. 4).
    assert f"Question: {QUESTION}." in prompts[0] and "<search> Orla Brennick </search>" in prompts[0]
    assert "</information>" in prompts[0] and "Marrow Tilde" not in prompts[0].split("Search trajectory:")[1]
    ids, _ = unpad(out)
    assert "INTERMEDIATE" not in tok.decode(ids)
    assert out.non_tensor_batch[F.AUX_COST][0][F.COST_CALLS] == 2
    assert out.non_tensor_batch[F.REANSWERS][0] == []


@pytest.mark.parametrize(
    ("answer", "reanswer"), [("CLOSED-BOOK 1902", "CLOSED-BOOK 1902"), ("Brennick, Orla", NO_ANSWER)]
)
async def test_hiprag_closed_book_reanswer_goes_through_the_no_search_path(make_worker, retriever, answer, reanswer):
    """``reanswer_mode=closed_book``: the query is asked as the row's question in the row's own prompt; a search the
    policy opens there is cut and the answer forced; the re-answer is that answer, never in the trajectory, or
    NO_ANSWER when the answer only restates the query."""
    worker = make_worker()
    tok = worker.tokenizer
    script = TurnScript("hiprag", [search_turn("hiprag", "Orla Brennick"), answer_turn("hiprag", "1934")])
    forced_prefix = get_format("hiprag").action_spec.force_answer_prefix

    def policy(prompt: str, params: dict) -> str:
        if "Question: Orla Brennick<|im_end|>" not in prompt:
            return script(prompt, params)
        if prompt.endswith(forced_prefix):
            return f"{answer}</answer><|im_end|>"
        return "<think><step><reasoning>I do not know.</reasoning><search>Orla Brennick</search>"

    out, client = await run(
        worker, "hiprag", policy, retriever_url=retriever.url, reanswer_mode="closed_book", reanswer_max_tokens=64
    )
    record = {F.AUX_STEP: 0, F.AUX_QUERY: "Orla Brennick", F.AUX_TEXT: reanswer}
    assert out.non_tensor_batch[F.REANSWERS][0] == [record]
    calls = [c for c in client.calls if "Question: Orla Brennick<|im_end|>" in c.prompt_text]
    assert len(calls) == 2  # the turn that opened a search (cut), then the forced answer
    assert "Please answer" not in "".join(c.prompt_text for c in client.calls)
    row_prompt = get_format("hiprag").prompt.messages(QUESTION)[0]["content"]
    assert all(row_prompt in c.prompt_text for c in calls)  # the row's own system prompt
    assert calls[1].prompt_text.endswith(forced_prefix)
    assert "<search>Orla Brennick</search>" not in calls[1].prompt_text
    assert "<search>" in calls[0].sampling_params["stop"]  # closed book: every turn is a final turn
    assert not any(c.sampling_params["logprobs"] for c in calls)
    assert all(c.sampling_params["max_tokens"] <= 64 for c in calls)
    assert out.non_tensor_batch[F.NUM_SEARCHES][0] == 1  # the re-answer ran no search
    ids, _ = unpad(out)
    assert answer not in tok.decode(ids)
    cost = out.non_tensor_batch[F.AUX_COST][0]
    assert cost[F.COST_CALLS] == 2
    assert cost[F.COST_PROMPT_TOKENS] == len(calls[0].prompt_ids)
    assert cost[F.COST_COMPLETION_TOKENS] == sum(len(c.token_ids) for c in calls)


async def test_unknown_reanswer_mode_is_refused(make_worker, retriever):
    worker = make_worker()
    with pytest.raises(Exception, match="reanswer_mode"):
        await run(worker, "hiprag", [answer_turn("hiprag", "1934")], retriever_url=retriever.url, reanswer_mode="judge")
