"""Fixtures of the agent-loop tests: verl's real ``AgentLoopWorker`` built in-process (no Ray, no GPU; only
``LLMServerClient.generate`` is replaced), the real retriever server on 127.0.0.1, and a scripted one for faults."""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import pytest

from agentrag_verl.testing.fake_retriever import FakeRetriever


def corpus_documents() -> list[dict[str, str]]:
    """The fixture corpus as wiki-18 documents (``contents`` = ``"Title"\\ntext``)."""
    from agentrag_verl.testing import load_corpus

    return [{"id": p.id, "contents": f'"{p.title}"\n{p.text}'} for p in load_corpus()]


@pytest.fixture
def retriever(retriever_service):
    """The real retriever server over the fixture corpus, its request log cleared for this test."""
    retriever_service.requests.clear()
    return retriever_service


@pytest.fixture
def flaky_retriever():
    """A scripted Search-R1 retriever over the fixture corpus (set ``.mode`` to inject faults)."""
    with FakeRetriever(corpus_documents()) as server:
        yield server


@pytest.fixture(scope="session")
def make_worker(tiny_model_dir):
    """``make_worker(response_length=1024) -> AgentLoopWorker`` built from verl's composed ``ppo_trainer`` config
    with our agent-loop YAML; cached per response length (compose + tokenizer load take ~10 s)."""
    from hydra import compose, initialize_config_module
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    from agentrag_verl.agent_loops import AGENT_LOOP_CONFIG

    cache: dict[int, Any] = {}

    def make(response_length: int = 1024) -> Any:
        if response_length not in cache:
            with initialize_config_module(config_module="verl.trainer.config", version_base=None):
                cfg = compose(
                    config_name="ppo_trainer",
                    overrides=[
                        f"actor_rollout_ref.model.path={tiny_model_dir}",
                        "actor_rollout_ref.rollout.name=vllm",
                        "actor_rollout_ref.rollout.prompt_length=1024",
                        f"actor_rollout_ref.rollout.response_length={response_length}",
                        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={AGENT_LOOP_CONFIG}",
                        "+actor_rollout_ref.rollout.custom.agentrag.retriever_url=http://127.0.0.1:9/retrieve",
                    ],
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
