"""Fixtures of the agent-loop tests: verl's real ``AgentLoopWorker`` built in-process (no Ray, no GPU; only
``LLMServerClient.generate`` is replaced). The retrievers (``retriever``, the real server on 127.0.0.1, and
``keyword_retriever``, a scripted one for faults) are tests/conftest.py's."""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import pytest

from tests.support import trainer_config


@pytest.fixture(scope="session")
def make_worker(tiny_model_dir):
    """``make_worker(response_length=1024) -> AgentLoopWorker`` built from verl's composed ``ppo_trainer`` config
    with our agent-loop YAML; cached per response length (compose + tokenizer load take ~10 s)."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    from agentrag_verl.agent_loops import AGENT_LOOP_CONFIG

    cache: dict[int, Any] = {}

    def make(response_length: int = 1024) -> Any:
        if response_length not in cache:
            cfg = trainer_config(
                tiny_model_dir,
                prompt_length=1024,
                response_length=response_length,
                agent_loops=AGENT_LOOP_CONFIG,
                agentrag={"retriever_url": "http://127.0.0.1:9/retrieve"},
            )
            cache[response_length] = AgentLoopWorker(cfg, llm_client=None)
        return cache[response_length]

    return make


def set_options(worker: Any, **options: Any) -> None:
    """Set run-wide agent-loop options (``actor_rollout_ref.rollout.custom.agentrag``) on a worker."""
    from omegaconf import OmegaConf

    OmegaConf.update(worker.config, "actor_rollout_ref.rollout.custom.agentrag", options, merge=False, force_add=True)


def make_batch(questions: list[str], agent_name: str, format_name: str) -> Any:
    """A verl batch of dataset rows (``raw_prompt`` = the format's prompt, ``agent_name``, ``extra_info``)."""
    from verl import DataProto

    from agentrag_verl.formats import get_format

    fmt = get_format(format_name)
    raw_prompts = np.empty(len(questions), dtype=object)
    raw_prompts[:] = [fmt.prompt.messages(q) for q in questions]
    return DataProto.from_dict(
        non_tensors={
            "raw_prompt": raw_prompts,
            "agent_name": np.array([agent_name] * len(questions), dtype=object),
            "extra_info": np.array([{"question": q, "index": i} for i, q in enumerate(questions)], dtype=object),
            "index": np.arange(len(questions)),
        },
        meta_info={"global_steps": 1, "validate": False, "request_id": uuid.uuid4().hex},
    )
