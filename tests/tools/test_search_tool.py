"""SearchTool inside verl's own ToolAgentLoop (hermes tool calls), run by the real AgentLoopWorker in-process."""

from __future__ import annotations

import uuid

import numpy as np

from agentrag_verl.agent_loops.local_clients import ScriptedLLMClient
from agentrag_verl.formats import format_docs
from agentrag_verl.tools.search_tool import SearchTool
from tests.support import trainer_config

TOOL_CALL = (
    '<tool_call>\n{"name": "search", "arguments": {"query_list": ["Orla Brennick", "Velda river"]}}\n</tool_call>'
)


async def test_execute_formats_passages_and_metrics(retriever):
    tool = SearchTool({"type": "native", "retriever_url": retriever.url, "topk": 2})
    response, reward, metrics = await tool.execute("i", {"query_list": ["Orla Brennick", "Velda river"]})
    expected = "\n---\n".join(format_docs(retriever.search(q, 2)) for q in ("Orla Brennick", "Velda river"))
    assert response.text == expected and reward == 0.0
    assert retriever.requests == [{"queries": ["Orla Brennick", "Velda river"], "topk": 2, "return_scores": True}]
    assert metrics["search/queries"] == 2 and metrics["search/errors"] == 0
    assert metrics["search/doc_ids"][0] == [h["document"]["id"] for h in retriever.search("Orla Brennick", 2)]


async def test_execute_errors_are_text(keyword_retriever):
    tool = SearchTool({"type": "native", "retriever_url": keyword_retriever.url, "max_retries": 0})
    response, _, metrics = await tool.execute("i", {"query_list": []})
    assert "query_list" in response.text and metrics["search/errors"] == 1
    keyword_retriever.mode = "down"
    response, _, metrics = await tool.execute("i", {"query_list": ["x"]})
    assert response.text == "Search failed (http_5xx); no documents were retrieved." and metrics["search/errors"] == 1


async def test_search_tool_in_verl_tool_agent_loop(tiny_model_dir, retriever, tmp_path):
    from verl import DataProto
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    tool_yaml = tmp_path / "tools.yaml"
    tool_yaml.write_text(
        "tools:\n  - class_name: agentrag_verl.tools.search_tool.SearchTool\n    config:\n      type: native\n"
        f"      retriever_url: {retriever.url}\n      topk: 2\n"
    )
    cfg = trainer_config(
        tiny_model_dir,
        "actor_rollout_ref.rollout.multi_turn.format=hermes",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tool_yaml}",
        "actor_rollout_ref.rollout.multi_turn.max_tool_response_length=4000",  # default 256 chars cuts passages
        prompt_length=1024,
        response_length=1024,
    )
    worker = AgentLoopWorker(cfg, llm_client=None)
    tok = worker.tokenizer

    def reply(prompt: str, params: dict) -> str:
        return "<answer>1934</answer><|im_end|>" if "<tool_response>" in prompt else TOOL_CALL + "<|im_end|>"

    worker.llm_client = ScriptedLLMClient(tok, reply)
    messages = np.empty(1, dtype=object)
    messages[0] = [{"role": "user", "content": "In what year did Orla Brennick found Marrow & Tilde Instruments?"}]
    batch = DataProto.from_dict(
        non_tensors={
            "raw_prompt": messages,
            "agent_name": np.array(["tool_agent"], dtype=object),
            "index": np.arange(1),
        },
        meta_info={"global_steps": 1, "validate": False, "request_id": uuid.uuid4().hex},
    )
    out = await worker.generate_sequences(batch)
    n = int(out.batch["attention_mask"][0, -1024:].sum())
    ids, mask = out.batch["responses"][0, :n].tolist(), out.batch["response_mask"][0, :n].tolist()
    observed = tok.decode([t for t, m in zip(ids, mask, strict=True) if m == 0])
    generated = tok.decode([t for t, m in zip(ids, mask, strict=True) if m == 1])
    passages = format_docs(retriever.search("Orla Brennick", 2))
    # The retrieved passages are in the response, masked out of the loss; the model's tool call and answer are not.
    assert passages in observed and passages not in generated
    assert '"query_list": ["Orla Brennick", "Velda river"]' in generated and "<answer>1934</answer>" in generated
    assert len(retriever.requests) == 1
