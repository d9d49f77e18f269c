"""SearchAgentLoop run by verl's real AgentLoopWorker in-process, with a scripted policy: exact token layout."""

from __future__ import annotations

from typing import Any

import pytest

from agentrag_verl.agent_loops import agent_name
from agentrag_verl.agent_loops import fields as F
from agentrag_verl.agent_loops.local_clients import ScriptedLLMClient
from agentrag_verl.formats import format_docs, get_format

from .conftest import make_batch, set_options

# Closing text of each format's observation: counting it in the prompt tells the script which turn it is.
OBS_CLOSE = {
    "searchr1": "</information>",
    "autosearch": "</information>",
    "multistage": "</information>",
    "hiprag": "</context>",
    "searchp1": "</tool_response>",
}
QUESTION = "In what year did Orla Brennick found Marrow & Tilde Instruments?"


def search_turn(fmt: str, query: str) -> str:
    """A model turn that issues ``query`` in the format's own syntax."""
    if fmt == "hiprag":
        return f"<think><step><reasoning>I need {query}.</reasoning><search>{query}</search>"
    if fmt == "searchp1":
        return f"Plan: look up {query}.</reasoning>\n<tool_call>{query}</tool_call>"
    if fmt == "multistage":
        return f"<think>I need {query}.</think>\n<search>{query}</search>"
    return f"<think>I need {query}.</think>\n<search> {query} </search>"


def answer_turn(fmt: str, answer: str) -> str:
    if fmt == "hiprag":
        return f"I found it.</conclusion></step></think>\n<answer>{answer}</answer><|im_end|>"
    if fmt == "multistage":
        return f"<reflect>Found.</reflect>\n<answer>{answer}</answer><|im_end|>"
    return f"<think>Found.</think>\n<answer>{answer}</answer><|im_end|>"


class TurnScript:
    """Replies turn by turn: turn i is chosen by how many observations the prompt already holds (a turn cut at a
    stop string inside it, e.g. HiPRAG's ``</conclusion>``, is continued by the scripted client).

    Auxiliary prompts (HiPRAG re-answer, AutoSearch Prompt 1) get ``aux_reply``; a prompt that ends with the
    forced-answer prefix gets ``forced``.
    """

    def __init__(
        self,
        fmt: str,
        turns: list[str],
        forced: str = " 1934</answer><|im_end|>",
        aux_reply: str = "<think>aux</think><answer>1934</answer>",
    ) -> None:
        self.fmt, self.turns, self.forced, self.aux_reply = fmt, turns, forced, aux_reply
        self.spec = get_format(fmt).action_spec

    def __call__(self, prompt: str, params: dict[str, Any]) -> str:
        if "Please answer the following question" in prompt or "Search trajectory:" in prompt:
            return self.aux_reply
        assistant = prompt.rsplit("<|im_start|>assistant", 1)[-1]
        if assistant.endswith(self.spec.force_answer_prefix):
            return self.forced
        turn = assistant.count(OBS_CLOSE[self.fmt])
        return self.turns[min(turn, len(self.turns) - 1)]


def spans(mask: list[int]) -> list[tuple[int, int, int]]:
    """(value, start, end) runs of a 0/1 mask."""
    out, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            out.append((mask[start], start, i))
            start = i
    return out


async def run(worker, fmt: str, script: TurnScript | list[str], questions: list[str] | None = None, **options):
    """Roll ``questions`` (default: :data:`QUESTION`) out with ``fmt``'s agent loop and run-wide ``options``; the
    policy is ``script`` (a list of turns: ``TurnScript(fmt, turns)``). Returns the batch and the scripted client."""
    if isinstance(script, list):
        script = TurnScript(fmt, script)
    set_options(worker, **options)
    client = ScriptedLLMClient(worker.tokenizer, script)
    worker.llm_client = client
    batch = make_batch(questions or [QUESTION], agent_name(fmt), "searchr1" if fmt == "autosearch" else fmt)
    return await worker.generate_sequences(batch), client


async def run_forced(worker, fmt: str, turns: list[str], budget: int, retriever_url: str):
    """``run`` with a search ``budget``, the policy answering 1934 once the environment forces the answer."""
    script = TurnScript(fmt, turns, forced="1934</answer><|im_end|>")
    return await run(worker, fmt, script, retriever_url=retriever_url, budget=budget)


def unpad(out, i: int = 0) -> tuple[list[int], list[int]]:
    """Response ids and mask of sample ``i`` without padding."""
    n = int(out.batch["attention_mask"][i, -out.batch["responses"].shape[1] :].sum())
    return out.batch["responses"][i, :n].tolist(), out.batch["response_mask"][i, :n].tolist()


async def test_searchr1_two_searches_exact_tokens(make_worker, retriever):
    worker = make_worker()
    tok = worker.tokenizer
    fmt, spec = "searchr1", get_format("searchr1").action_spec
    turns = [search_turn(fmt, "Orla Brennick"), search_turn(fmt, "Marrow & Tilde founded"), answer_turn(fmt, "1934")]
    out, client = await run(worker, fmt, turns, retriever_url=retriever.url)
    ids, mask = unpad(out)

    def enc(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False)

    obs = [spec.render_observation(retriever.search(q, 3)) for q in ("Orla Brennick", "Marrow & Tilde founded")]
    # The stop string </answer> ends the last generation before the model's EOS (vLLM semantics).
    gens = [enc(turns[0]), enc(turns[1]), enc(turns[2].removesuffix("<|im_end|>"))]
    expected = gens[0] + enc(obs[0]) + gens[1] + enc(obs[1]) + gens[2]
    assert ids == expected
    expected_mask = [1] * len(gens[0]) + [0] * len(enc(obs[0])) + [1] * len(gens[1]) + [0] * len(enc(obs[1]))
    assert mask == expected_mask + [1] * len(gens[2])
    # Each observation (its <information> tags included) is exactly one mask-0 run.
    zero_runs = [tok.decode(ids[s:e]) for v, s, e in spans(mask) if v == 0]
    assert zero_runs == obs
    extra = out.non_tensor_batch
    for key in F.ALL_KEYS:
        assert key in extra, key
    steps = extra[F.STEPS][0]
    assert [s[F.STEP_KIND] for s in steps] == ["search", "search", "answer"]
    assert [s[F.STEP_QUERY] for s in steps] == ["Orla Brennick", "Marrow & Tilde founded", None]
    ends = [len(gens[0]) - 1, len(gens[0]) + len(enc(obs[0])) + len(gens[1]) - 1, len(expected) - 1]
    assert [s[F.STEP_END_TOKEN_INDEX] for s in steps] == ends
    assert all(mask[i] == 1 for i in ends)
    assert steps[0][F.STEP_DOC_IDS] == [h["document"]["id"] for h in retriever.search("Orla Brennick", 3)]
    assert extra[F.NUM_SEARCHES][0] == 2 and extra[F.BUDGET_EXHAUSTED][0] is False
    assert extra[F.RETRIEVER_ERRORS][0] == 0 and extra[F.REANSWERS][0] == []
    assert extra[F.FORMAT][0] == "searchr1"
    # Wire format: one query per request, top-k and scores (Search-R1's retrieval server API).
    assert retriever.requests[0] == {"queries": ["Orla Brennick"], "topk": 3, "return_scores": True}
    # Every trajectory generation continues the same token sequence (prompt + response so far).
    assert client.calls[1].prompt_ids[-len(enc(obs[0])) :] == enc(obs[0])
    assert out.non_tensor_batch["__num_turns__"][0] == 1 + 3 + 2


@pytest.mark.parametrize("fmt", ["searchr1", "autosearch", "hiprag", "multistage", "searchp1"])
async def test_every_format_masks_observations_and_injected_tags(make_worker, retriever, fmt):
    worker = make_worker()
    tok = worker.tokenizer
    spec = get_format(fmt).action_spec
    turns = [search_turn(fmt, "Orla Brennick"), answer_turn(fmt, "1934")]
    out, _ = await run(worker, fmt, turns, retriever_url=retriever.url)
    ids, mask = unpad(out)
    zero_runs = [tok.decode(ids[s:e]) for v, s, e in spans(mask) if v == 0]
    one_runs = [tok.decode(ids[s:e]) for v, s, e in spans(mask) if v == 1]
    topk = 5 if fmt == "multistage" else 3  # the YAML entry sets the multi-stage paper's top-5 (Table 5)
    observation = spec.observation_template.replace("{docs}", format_docs(retriever.search("Orla Brennick", topk)))
    assert retriever.requests[0]["topk"] == topk
    # The environment's text (prefix, observation with its tags) is mask 0; the model's turns are mask 1.
    assert zero_runs == ([spec.response_prefix] if spec.response_prefix else []) + [observation]
    assert one_runs == [turns[0], turns[1].removesuffix("<|im_end|>")]
    if fmt == "hiprag":
        assert observation.startswith("<context>") and observation.endswith("</context>\n<conclusion>")
    if fmt == "searchp1":
        assert ids[: len(tok.encode("<reasoning>", add_special_tokens=False))] == tok.encode(
            "<reasoning>", add_special_tokens=False
        )
        assert mask[0] == 0
    steps = out.non_tensor_batch[F.STEPS][0]
    assert [s[F.STEP_KIND] for s in steps] == ["search", "answer"]
    assert steps[0][F.STEP_QUERY] == "Orla Brennick"
    assert mask[steps[0][F.STEP_END_TOKEN_INDEX]] == 1 and mask[steps[0][F.STEP_END_TOKEN_INDEX] + 1] == 0
    # The whole response parses back with the format's own grammar (the loop writes what the format reads).
    text = tok.decode(ids, skip_special_tokens=True)
    assert get_format(fmt).parse(text).queries == ["Orla Brennick"]
    assert get_format(fmt).parse(text).answer == "1934"


async def test_hiprag_budget_counts_steps_and_forces_answer(make_worker, retriever):
    worker = make_worker()
    tok = worker.tokenizer
    fmt = "hiprag"
    spec = get_format(fmt).action_spec
    # HiPRAG Alg. 1 with B = 2 steps: the model would open a third step and search again, but after the second
    # </conclusion> the environment appends </step></think><answer> (l. 15, 22-24) and the model only answers.
    turns = [
        search_turn(fmt, "Orla Brennick"),
        "c</conclusion></step><step><reasoning>r</reasoning><search>Velda</search>",
        "c</conclusion></step><step><reasoning>r</reasoning><search>Asvik</search>",
    ]
    out, client = await run_forced(worker, fmt, turns, 2, retriever.url)
    ids, mask = unpad(out)
    extra = out.non_tensor_batch
    assert len(retriever.requests) == 2  # both searches of the two steps ran; "Asvik" was never generated
    assert extra[F.NUM_SEARCHES][0] == 2 and extra[F.BUDGET_EXHAUSTED][0] is True
    steps = extra[F.STEPS][0]
    assert [s[F.STEP_KIND] for s in steps] == ["search", "search", "answer"]
    assert [s[F.STEP_OBSERVED] for s in steps] == [True, True, False]
    # The forced prefix is environment text (mask 0) right after the second conclusion.
    zero_runs = [tok.decode(ids[s:e]) for v, s, e in spans(mask) if v == 0]
    assert zero_runs[-1] == spec.force_answer_prefix == "</step>\n</think>\n<answer>"
    text = tok.decode(ids, skip_special_tokens=True)
    assert "Asvik" not in text and text.endswith("c</conclusion></step>\n</think>\n<answer>1934</answer>")
    # The trajectory is well formed: F(T) = (1, N = 2) (Alg. 2-3), so Eq. 1 can give it the full reward.
    assert get_format(fmt).check_format(text) == (1, 2)
    # The forced generation stops at the answer's closing tag only; the others also at </conclusion> (Alg. 1 l. 5).
    trajectory_calls = [c for c in client.calls if "stop" in c.sampling_params]  # not the HiPRAG re-answers
    assert trajectory_calls[-1].sampling_params["stop"] == ["</answer>"]
    assert trajectory_calls[0].sampling_params["stop"] == ["</search>", "</answer>", "</conclusion>"]


async def test_malformed_action_ends_episode(make_worker, retriever):
    worker = make_worker()
    out, _ = await run(worker, "searchr1", ["I think it is 1934.<|im_end|>"], retriever_url=retriever.url)
    ids, mask = unpad(out)
    steps = out.non_tensor_batch[F.STEPS][0]
    assert [s[F.STEP_KIND] for s in steps] == ["invalid"]
    assert steps[0][F.STEP_END_TOKEN_INDEX] == len(ids) - 1 and ids[-1] == worker.tokenizer.eos_token_id
    assert set(mask) == {1} and retriever.requests == []


async def test_empty_query_is_invalid_and_not_sent(make_worker, retriever):
    worker = make_worker()
    tok = worker.tokenizer
    turns = ["<think>t</think><search>   </search>", answer_turn("searchr1", "x")]
    out, _ = await run(worker, "searchr1", turns, retriever_url=retriever.url)
    ids, mask = unpad(out)
    steps = out.non_tensor_batch[F.STEPS][0]
    assert [s[F.STEP_KIND] for s in steps] == ["invalid", "answer"]
    assert steps[0][F.STEP_QUERY] == ""
    assert retriever.requests == [] and out.non_tensor_batch[F.NUM_SEARCHES][0] == 0
    zero = [tok.decode(ids[s:e]) for v, s, e in spans(mask) if v == 0]
    assert len(zero) == 1 and "query is empty" in zero[0] and zero[0].strip().startswith("<information>")


@pytest.mark.parametrize(
    ("mode", "expected_requests", "kind"),
    [
        ("down", 2, "http_5xx"),  # 1 attempt + 1 retry
        ("slow", 2, "timeout"),
        ("bad_request", 1, "http_4xx"),  # 4xx: the request is wrong, no retry
        ("garbage", 1, "bad_response"),
    ],
)
async def test_retriever_failure_becomes_observation(make_worker, keyword_retriever, mode, expected_requests, kind):
    worker = make_worker()
    tok = worker.tokenizer
    # A timeout well above a loaded machine's response time (a 4xx must not turn into a timeout), below delay_s.
    keyword_retriever.mode, keyword_retriever.delay_s = mode, 3.0
    retries = {"retriever_max_retries": 1, "retriever_backoff_s": 0.01, "retriever_timeout_s": 1.0}
    turns = [search_turn("searchr1", "Orla Brennick"), answer_turn("searchr1", "x")]
    out, _ = await run(worker, "searchr1", turns, retriever_url=keyword_retriever.url, **retries)
    ids, mask = unpad(out)
    extra = out.non_tensor_batch
    assert len(keyword_retriever.requests) == expected_requests
    assert extra[F.RETRIEVER_ERRORS][0] == 1 and extra[F.NUM_SEARCHES][0] == 1
    steps = extra[F.STEPS][0]
    assert [s[F.STEP_KIND] for s in steps] == ["search", "answer"]  # the trajectory went on
    assert steps[0][F.STEP_RETRIEVER_ERROR].startswith(kind) and steps[0][F.STEP_DOC_IDS] == []
    zero = [tok.decode(ids[s:e]) for v, s, e in spans(mask) if v == 0]
    assert zero == [f"\n\n<information>Search failed ({kind}); no documents were retrieved.</information>\n\n"]


async def test_retriever_unreachable(make_worker):
    worker = make_worker()
    turns = [search_turn("searchr1", "q"), answer_turn("searchr1", "x")]
    # Port 9 (discard) on 127.0.0.1: nothing listens, the connection is refused.
    out, _ = await run(worker, "searchr1", turns, retriever_url="http://127.0.0.1:9/retrieve", retriever_max_retries=0)
    steps = out.non_tensor_batch[F.STEPS][0]
    assert steps[0][F.STEP_RETRIEVER_ERROR].startswith("connection")
    assert out.non_tensor_batch[F.RETRIEVER_ERRORS][0] == 1


async def test_response_length_overflow(make_worker, retriever):
    # 96 tokens: the first turn (~20 tokens) fits, the ~200-token observation does not and is cut.
    worker = make_worker(96)
    turns = [search_turn("searchr1", "Orla Brennick"), answer_turn("searchr1", "1934")]
    out, client = await run(worker, "searchr1", turns, retriever_url=retriever.url, max_observation_tokens=0)
    ids, mask = unpad(out)
    assert len(ids) == 96 and out.batch["responses"].shape[1] == 96
    assert mask[-1] == 0 and len(client.calls) == 1  # no generation after the cut observation
    extra = out.non_tensor_batch
    assert extra[F.LENGTH_EXHAUSTED][0] is True and extra[F.NUM_SEARCHES][0] == 1


async def test_generation_gets_remaining_budget(make_worker, retriever):
    worker = make_worker(96)
    long_turn = "<think>" + "blah " * 200
    out, client = await run(worker, "searchr1", [long_turn], retriever_url=retriever.url)
    ids, mask = unpad(out)
    assert client.calls[0].sampling_params["max_tokens"] == 96
    assert len(ids) == 96 and set(mask) == {1}
    assert [s[F.STEP_KIND] for s in out.non_tensor_batch[F.STEPS][0]] == ["invalid"]


@pytest.mark.parametrize("side", ["right", "left", "middle"])
async def test_observation_truncation(make_worker, retriever, side):
    worker = make_worker()
    tok = worker.tokenizer
    turns = [search_turn("searchr1", "Orla Brennick"), answer_turn("searchr1", "x")]
    out, _ = await run(
        worker,
        "searchr1",
        turns,
        retriever_url=retriever.url,
        max_observation_tokens=12,
        observation_truncation_side=side,
    )
    ids, mask = unpad(out)
    zero = [tok.decode(ids[s:e]) for v, s, e in spans(mask) if v == 0][0]
    docs = format_docs(retriever.search("Orla Brennick", 3))
    docs_ids = tok.encode(docs, add_special_tokens=False)
    kept = {"right": docs_ids[:12], "left": docs_ids[-12:], "middle": docs_ids[:6] + docs_ids[-6:]}[side]
    # The tags survive truncation: only the passages are cut.
    assert zero == f"\n\n<information>{tok.decode(kept)}</information>\n\n"


async def test_unknown_option_is_reported(make_worker, retriever):
    worker = make_worker()
    # hydra.utils.instantiate wraps the ValueError; the message names the valid keys.
    with pytest.raises(Exception, match=r"Unknown agent-loop option\(s\) \['retriever_top_k'\].*retriever_topk"):
        await run(worker, "searchr1", ["x"], retriever_url=retriever.url, retriever_top_k=3)


async def test_initial_search_is_masked_and_not_a_step(make_worker, retriever):
    worker = make_worker()
    tok = worker.tokenizer
    out, _ = await run(
        worker,
        "searchr1",
        [answer_turn("searchr1", "1934")],
        retriever_url=retriever.url,
        initial_search=True,
    )
    ids, mask = unpad(out)
    spec = get_format("searchr1").action_spec
    # The question itself was retrieved for, before any generation; the model then answered.
    assert retriever.requests[0]["queries"] == [QUESTION]
    first = spec.render_observation(retriever.search(QUESTION, 3))
    assert [tok.decode(ids[s:e]) for v, s, e in spans(mask) if v == 0] == [first] and mask[0] == 0
    assert [s[F.STEP_KIND] for s in out.non_tensor_batch[F.STEPS][0]] == ["answer"]
    assert out.non_tensor_batch[F.NUM_SEARCHES][0] == 0


async def test_concurrent_trajectories_do_not_mix(make_worker, retriever):
    worker = make_worker()
    tok = worker.tokenizer
    questions = ["Who is Orla Brennick?", "Where is the river Velda?", "What is Asvik known for?", "Tessaly Port"]

    def script(prompt: str, params: dict[str, Any]) -> str:
        # Each trajectory searches its own question once, then answers with it.
        question = prompt.split("Question: ")[-1].split("\n")[0]
        assistant = prompt.rsplit("<|im_start|>assistant", 1)[-1]
        if "</information>" in assistant:
            return answer_turn("searchr1", question)
        return search_turn("searchr1", question)

    out, _ = await run(worker, "searchr1", script, questions=questions, retriever_url=retriever.url)
    assert sorted(q for r in retriever.requests for q in r["queries"]) == sorted(questions)
    for i, question in enumerate(questions):
        ids, mask = unpad(out, i)
        observed = tok.decode([t for t, m in zip(ids, mask, strict=True) if m == 0])
        assert observed == get_format("searchr1").action_spec.render_observation(retriever.search(question, 3))
        assert out.non_tensor_batch[F.STEPS][i][0][F.STEP_QUERY] == question
