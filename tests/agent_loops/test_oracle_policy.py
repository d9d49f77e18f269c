"""The scripted oracle policy (``agentrag_verl.testing.oracle_policy``) inside verl's real AgentLoopWorker: every
trajectory is well-formed, searches once through the real retriever, and answers the row's gold answer."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from agentrag_verl.agent_loops import fields as F
from agentrag_verl.formats import get_format
from tests.support import trainer_config

from .conftest import set_options
from .test_search_agent_loop import unpad

ORACLE_YAML = """
- name: oracle_hiprag
  _target_: agentrag_verl.testing.oracle_policy.OracleAgentLoop
  format: hiprag
  reanswers: true
  oracle_aux: true
- name: oracle_autosearch
  _target_: agentrag_verl.testing.oracle_policy.OracleAgentLoop
  format: autosearch
  intermediate_answers: true
  oracle_aux: true
"""


@pytest.fixture(scope="module")
def oracle_worker(tiny_model_dir, tmp_path_factory):
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    yaml_path = tmp_path_factory.mktemp("oracle") / "agent_loops.yaml"
    yaml_path.write_text(ORACLE_YAML)
    cfg = trainer_config(tiny_model_dir, prompt_length=1024, response_length=512, agent_loops=yaml_path)
    return AgentLoopWorker(cfg, llm_client=None)


def batch(agent_name: str, fmt: str, rows: list[tuple[str, str]]):
    from verl import DataProto

    prompts = np.empty(len(rows), dtype=object)
    prompts[:] = [get_format(fmt).prompt.messages(q) for q, _ in rows]
    return DataProto.from_dict(
        non_tensors={
            "raw_prompt": prompts,
            "agent_name": np.array([agent_name] * len(rows), dtype=object),
            "extra_info": np.array([{"question": q, "index": i} for i, (q, _) in enumerate(rows)], dtype=object),
            "reward_model": np.array([{"ground_truth": {"target": [a]}} for _, a in rows], dtype=object),
            "index": np.arange(len(rows)),
        },
        meta_info={"global_steps": 1, "validate": False, "request_id": uuid.uuid4().hex},
    )


ROWS = [("Who founded Marrow & Tilde Instruments?", "Orla Brennick"), ("What is the capital of France?", "Paris")]


@pytest.mark.parametrize(
    ("agent_name", "fmt", "parse_as"),
    [("oracle_hiprag", "hiprag", "hiprag"), ("oracle_autosearch", "autosearch", "searchr1")],
)
async def test_oracle_writes_valid_correct_trajectories(oracle_worker, retriever, agent_name, fmt, parse_as):
    set_options(oracle_worker, retriever_url=retriever.url)
    out = await oracle_worker.generate_sequences(batch(agent_name, parse_as, ROWS))
    grammar = get_format(parse_as)
    for i, (question, gold) in enumerate(ROWS):
        ids, mask = unpad(out, i)
        text = oracle_worker.tokenizer.decode(ids, skip_special_tokens=True)
        trajectory = grammar.parse(text)
        assert trajectory.answer == gold and trajectory.num_searches == 1 and grammar.is_valid(text), text
        assert trajectory.steps[0].query.strip() == question
        assert 0 in mask  # the retrieved passages were injected (masked)
        extra = out.non_tensor_batch
        assert extra[F.NUM_SEARCHES][i] == 1 and extra[F.RETRIEVER_ERRORS][i] == 0
        aux = extra[F.REANSWERS][i] if fmt == "hiprag" else extra[F.INTERMEDIATE_ANSWERS][i]
        assert len(aux) == 1 and gold in aux[0][F.AUX_TEXT]
    assert {q for r in retriever.requests for q in r["queries"]} == {q for q, _ in ROWS}
