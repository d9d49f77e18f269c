"""ReasonRAG's staged workflow (Reasoning / Grounding prompts as separate chats) through verl's AgentLoopWorker."""

from __future__ import annotations

from typing import Any

from agentrag_verl.agent_loops import fields as F
from agentrag_verl.methods.reasonrag import grammar as reasonrag

from .test_search_agent_loop import run, spans, unpad

R1 = "I need the founder. So the next query is <query>Orla Brennick</query>"
G1 = "Based on the query, the relevant evidence is <evidence>She founded it in 1934.</evidence>"
R2 = "So the answer is <answer>1934</answer>"


class StageScript:
    """Replies by stage: the system prompt tells Reasoning (Figure 12) from Grounding (Figure 13)."""

    def __init__(self, reasoning: list[str], grounding: str = G1, forced: str = " 1934</answer>") -> None:
        self.reasoning, self.grounding, self.forced = reasoning, grounding, forced
        self.prompts: list[str] = []

    def __call__(self, prompt: str, params: dict[str, Any]) -> str:
        self.prompts.append(prompt)
        if "information retrieval assistant" in prompt:
            return self.grounding
        if prompt.endswith(reasonrag.ANSWER_PHRASE + " <answer>"):
            return self.forced
        # One "So the next query is" per earlier Reasoning stage that searched (the system prompt quotes it too).
        done = (
            prompt.split("Previous Thoughts:")[1].count("So the next query is") if "Previous Thoughts:" in prompt else 0
        )
        return self.reasoning[min(done, len(self.reasoning) - 1)]


async def test_reasonrag_stages_transcript_and_masks(make_worker, retriever):
    worker = make_worker()
    tok = worker.tokenizer
    script = StageScript([R1, R2])
    out, _ = await run(worker, "reasonrag", script, retriever_url=retriever.url)
    ids, mask = unpad(out)
    text = tok.decode(ids)
    # The response is the transcript R G R joined by single (masked) spaces; it parses and passes the check.
    assert text == f"{R1} {G1} {R2}"
    assert [v for v, _, _ in spans(mask)] == [1, 0, 1, 0, 1]
    assert reasonrag.check_format(text) and reasonrag.parse(text).answer == "1934"
    # Grounding saw the retrieved passages in its own prompt (Figure 13 <reference>), the transcript did not.
    grounding_prompt = next(p for p in script.prompts if "information retrieval assistant" in p)
    assert "<reference>Doc 1(Title: " in grounding_prompt and "Doc 1(Title" not in text
    second_reasoning = script.prompts[-1]
    assert f"Previous Thoughts: {R1} {G1}" in second_reasoning
    steps = out.non_tensor_batch[F.STEPS][0]
    assert [s[F.STEP_KIND] for s in steps] == ["search", "answer"]
    assert steps[0][F.STEP_END_TOKEN_INDEX] == len(tok.encode(R1, add_special_tokens=False)) - 1
    assert steps[1][F.STEP_END_TOKEN_INDEX] == len(ids) - 1
    assert steps[0][F.STEP_DOC_IDS] == [h["document"]["id"] for h in retriever.search("Orla Brennick", 3)]
    # each stage: the prompt it was generated from and its span of model tokens (what the warm start trains on)
    stages = out.non_tensor_batch[F.STAGES][0]
    assert [tok.decode(ids[st["start"] : st["end"]]) for st in stages] == [R1, G1, R2]
    assert [tok.decode(st["prompt_ids"]) for st in stages] == script.prompts


async def test_reasonrag_budget_forces_answer(make_worker, retriever):
    worker = make_worker()
    tok = worker.tokenizer
    out, _ = await run(worker, "reasonrag", StageScript([R1]), retriever_url=retriever.url, budget=1)
    ids, mask = unpad(out)
    extra = out.non_tensor_batch
    assert extra[F.NUM_SEARCHES][0] == 1 and extra[F.BUDGET_EXHAUSTED][0] is True
    # The second query (past B = 1) is not run and does not stay in the transcript: R1 G1, then the forced answer.
    assert [s[F.STEP_KIND] for s in extra[F.STEPS][0]] == ["search", "answer"]
    assert tok.decode(ids) == f"{R1} {G1} {reasonrag.ANSWER_PHRASE} <answer> 1934</answer>"
    # The forced prefix is masked; the transcript ends with a complete answer.
    zero_runs = [tok.decode(ids[s:e]) for v, s, e in spans(mask) if v == 0]
    assert zero_runs[-1] == " " + reasonrag.ANSWER_PHRASE + " <answer>"  # separator + forced prefix
    assert reasonrag.parse(tok.decode(ids)).answer == "1934"
    # the dropped query's stage is gone with its tokens; the forced answer's prompt ends with the prefix
    stages = extra[F.STAGES][0]
    assert [tok.decode(ids[st["start"] : st["end"]]) for st in stages] == [R1, G1, " 1934</answer>"]
    assert tok.decode(stages[-1]["prompt_ids"]).endswith(reasonrag.ANSWER_PHRASE + " <answer>")


async def test_reasonrag_closed_book_forces_the_answer_without_a_search(make_worker, retriever):
    """The knowledge probe's no-search path: the first query is not run, the answer is forced at once."""
    worker = make_worker()
    out, _ = await run(worker, "reasonrag", StageScript([R1]), retriever_url=retriever.url, closed_book=True)
    ids, _ = unpad(out)
    assert out.non_tensor_batch[F.NUM_SEARCHES][0] == 0
    assert worker.tokenizer.decode(ids) == f"{reasonrag.ANSWER_PHRASE} <answer> 1934</answer>"
