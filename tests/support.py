"""Plain helpers that tests in several folders share (their fixtures live in the conftest.py files)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

CONSOLE = str(Path(sys.executable).with_name("agentrag-verl"))
"""The package's console script in the test venv (what a user runs as ``agentrag-verl``)."""


def corpus_documents() -> list[dict[str, str]]:
    """The fixture corpus as wiki-18 documents (``contents`` = ``"Title"\\ntext``), what the scripted retriever
    (:class:`~agentrag_verl.testing.FakeRetriever`) serves."""
    from agentrag_verl.testing import load_corpus

    return [{"id": p.id, "contents": f'"{p.title}"\n{p.text}'} for p in load_corpus()]


def trainer_config(
    model_dir: Any,
    *overrides: str,
    prompt_length: int | None = None,
    response_length: int | None = None,
    agent_loops: Any = None,
    agentrag: dict[str, Any] | None = None,
    config_dir: Any = None,
    config_name: str = "ppo_trainer",
) -> Any:
    """A trainer config as verl's in-process ``AgentLoopWorker`` and ``RewardLoopWorker`` read it.

    ``config_name`` is composed by Hydra from verl's installed ``verl.trainer.config`` (or from ``config_dir``, a
    recipe's folder) with ``model_dir`` as the policy and the ``vllm`` rollout, then the rollout's
    ``prompt_length`` and ``response_length``, ``agent_loops`` (an agent-loop YAML) and ``agentrag`` (run-wide
    options, ``actor_rollout_ref.rollout.custom.agentrag``) where given, then ``overrides``.
    """
    from hydra import compose, initialize_config_dir, initialize_config_module

    lines = [f"actor_rollout_ref.model.path={model_dir}", "actor_rollout_ref.rollout.name=vllm"]
    if prompt_length is not None:
        lines.append(f"actor_rollout_ref.rollout.prompt_length={prompt_length}")
    if response_length is not None:
        lines.append(f"actor_rollout_ref.rollout.response_length={response_length}")
    if agent_loops is not None:
        lines.append(f"actor_rollout_ref.rollout.agent.agent_loop_config_path={agent_loops}")
    lines += [f"+actor_rollout_ref.rollout.custom.agentrag.{key}={value}" for key, value in (agentrag or {}).items()]
    if config_dir is None:
        context = initialize_config_module(config_module="verl.trainer.config", version_base=None)
    else:
        context = initialize_config_dir(config_dir=str(config_dir), version_base=None)
    with context:
        return compose(config_name=config_name, overrides=[*lines, *overrides])
