"""Data prep end to end: the fixture QA jsonl -> ``agentrag-verl data prepare`` -> parquet that verl's own
``RLHFDataset`` loads -> verl's ``collate_fn`` / ``DataProto`` batch -> verl's real ``AgentLoopWorker`` running our
agent loop (scripted policy, the real retriever server over HTTP) -> verl's reward loop with our reward manager.

Only the policy (``LLMServerClient.generate``) is scripted; the judge of HiPRAG is the fake OpenAI server over HTTP.
"""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from agentrag_verl.agent_loops import AGENT_LOOP_CONFIG
from agentrag_verl.agent_loops.local_clients import ScriptedLLMClient
from agentrag_verl.cli import main
from agentrag_verl.data.corpus import QA_PATH, load_qa
from tests.support import trainer_config

QA = {q["question"]: q for q in load_qa()}


class Policy:
    """Scripted policy: search once for the question, then answer the gold answer for even-indexed questions and a
    wrong one for odd-indexed questions (``wrong`` set)."""

    def __init__(self, fmt: str, wrong: set[str]) -> None:
        self.fmt, self.wrong = fmt, wrong

    def question(self, prompt: str) -> str:
        return next(q for q in QA if q in prompt)

    def __call__(self, prompt: str, params: dict[str, Any]) -> str:
        q = self.question(prompt)
        answer = "no idea" if q in self.wrong else QA[q]["golden_answers"][0]
        assistant = prompt.rsplit("<|im_start|>assistant", 1)[-1]
        if self.fmt == "searchr1":
            if "</information>" not in assistant:
                return f"<think>I should look this up.</think>\n<search> {q} </search>"
            return f"<think>Found it.</think>\n<answer>{answer}</answer><|im_end|>"
        # hiprag: one search step, then the answer
        if "</context>" not in assistant:
            return f"<think><step><reasoning>I need facts.</reasoning><search>{q}</search>"
        return f"The passages say so.</conclusion></step></think>\n<answer>{answer}</answer><|im_end|>"


async def run_pipeline(tmp_path, tiny_model_dir, retriever_url: str, fmt: str, reward: list[str]) -> tuple:
    from verl import DataProto
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    out = tmp_path / fmt
    assert main(["data", "prepare", "--input", str(QA_PATH), "--name", "mini", "--format", fmt, "--out", str(out)]) == 0
    config = trainer_config(
        tiny_model_dir,
        "data.max_prompt_length=1024",
        "data.max_response_length=512",
        *reward,
        agent_loops=AGENT_LOOP_CONFIG,
        agentrag={"retriever_url": retriever_url},
    )
    worker = AgentLoopWorker(config, llm_client=None)
    # verl's own dataset class reads the parquet with the trainer's data config
    dataset = RLHFDataset(str(out / "train.parquet"), worker.tokenizer, config.data)
    assert len(dataset) == 30
    items = [dataset[i] for i in range(6)]
    batch = DataProto.from_single_dict(collate_fn(items))
    batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in items], dtype=object)
    batch.meta_info.update(global_steps=1, validate=False)
    questions = [it["extra_info"]["question"] for it in items]
    wrong = set(questions[1::2])
    worker.llm_client = ScriptedLLMClient(worker.tokenizer, Policy(fmt, wrong))
    reward_worker = RewardLoopWorker(config)
    worker.reward_loop_worker_handles = [
        SimpleNamespace(compute_score=SimpleNamespace(remote=reward_worker.compute_score))
    ]
    # the dataset's columns are what the trainer hands the agent loop
    assert set(batch.non_tensor_batch) >= {"raw_prompt", "agent_name", "data_source", "reward_model", "extra_info"}
    assert list(batch.non_tensor_batch["agent_name"]) == [f"{fmt}_agent"] * 6
    output = await worker.generate_sequences(batch)
    return output, questions, wrong, items


@pytest.mark.timeout(300)
async def test_searchr1_rows_run_through_agent_loop_and_reward_manager(tmp_path, tiny_model_dir, retriever_service):
    retriever_service.requests.clear()
    output, questions, wrong, items = await run_pipeline(
        tmp_path, tiny_model_dir, retriever_service.url, "searchr1", ["reward.reward_manager.name=searchr1"]
    )
    nt = output.non_tensor_batch
    # the rows' agent_name selected our loop (its extra_fields are present)
    assert list(nt["agentrag_format"]) == ["searchr1"] * 6
    assert [it["extra_info"]["id"] for it in items] == [f"mini/test_{i}" for i in range(6)]
    # each question searched once, through the real retriever over HTTP
    assert sorted(r["queries"][0] for r in retriever_service.requests) == sorted(questions)
    assert list(nt["agentrag_num_searches"]) == [1] * 6
    # Search-R1 v0.3 reward (docs/methods/searchr1.md): correct & valid = 1, wrong & valid = lambda_f = 0.2
    expected = [0.2 if q in wrong else 1.0 for q in questions]
    scores = output.batch["rm_scores"].sum(dim=-1).tolist()
    assert scores == pytest.approx(expected)
    assert list(nt["em"]) == [0.0 if q in wrong else 1.0 for q in questions]
    assert list(nt["format_ok"]) == [1.0] * 6


@pytest.mark.timeout(300)
async def test_hiprag_rows_with_judge_over_http(tmp_path, tiny_model_dir, retriever_service, fake_openai_server):
    # the judge says "equivalent" (over-search) for every step: Ncorr = 0 -> no process bonus (HiPRAG Eq. 1)
    fake_openai_server.reset(replies="<answer>True</answer>")
    reward = [
        "reward.reward_manager.name=hiprag",
        f"+reward.reward_kwargs.judge.base_url={fake_openai_server.base_url}",
        "+reward.reward_kwargs.judge.model=fake-model",
        "+reward.reward_kwargs.judge.api_key_env=null",
    ]
    output, questions, wrong, _ = await run_pipeline(tmp_path, tiny_model_dir, retriever_service.url, "hiprag", reward)
    nt = output.non_tensor_batch
    assert list(nt["agentrag_format"]) == ["hiprag"] * 6
    # Eq. 1 with A = CEM, F = 1, lambda_f = 0.2, lambda_p = 0.4, Ncorr/N = 0/1: R = A*0.8 + 0.2
    expected = [0.2 if q in wrong else 1.0 for q in questions]
    assert output.batch["rm_scores"].sum(dim=-1).tolist() == pytest.approx(expected)
    # judges were called only for correct trajectories (A = F = 1): 3 of 6
    judged = [r for r in fake_openai_server.requests if r.path.endswith("/chat/completions")]
    assert len(judged) == 3
