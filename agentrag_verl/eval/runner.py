"""Run our agent loops outside training: verl's real :class:`AgentLoopWorker`, in-process, with an
OpenAI-compatible completions endpoint as its ``LLMServerClient``.

:class:`AgentLoopRunner` composes verl's ``ppo_trainer`` config from the installed package (only the rollout and
model keys matter here), points ``agent_loop_config_path`` at :data:`agentrag_verl.agent_loops.AGENT_LOOP_CONFIG`,
and gives the worker :class:`~agentrag_verl.agent_loops.openai_client.OpenAICompletionsClient`. Each question runs
as its own one-row batch through ``AgentLoopWorker.generate_sequences`` (the method the trainer calls), so a result
is available, and can be saved, as soon as its trajectory ends; many questions run concurrently in one event loop.
Batches are marked ``validate=True``: verl then samples with ``rollout.val_kwargs`` (temperature 0 = greedy by
default, as the papers evaluate).

The tokenizer must be the served model's (the loops work on token ids: prompt ids go out, generated ids come back
with vLLM's ``return_token_ids``).

>>> runner = AgentLoopRunner(RunnerConfig(tokenizer="Qwen/Qwen2.5-3B-Instruct",  # doctest: +SKIP
...     base_url="http://127.0.0.1:8000/v1", model="policy", retriever_url="http://127.0.0.1:8001/retrieve"))
>>> rollout = await runner.run(question, "hiprag")  # doctest: +SKIP
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentrag_verl.data.flashrag import Question

__all__ = ["RunnerConfig", "AgentLoopRunner", "AgentLoopRollout"]


@dataclass(frozen=True)
class RunnerConfig:
    """Where the policy and the retriever are, and how to sample."""

    tokenizer: str
    """HF model dir or hub id of the served policy (its tokenizer and config are loaded, not its weights)."""
    base_url: str
    """OpenAI-compatible API root of the policy server, e.g. ``http://127.0.0.1:8000/v1`` (``vllm serve``)."""
    model: str
    """Model name the server serves."""
    retriever_url: str
    """Search-R1 wire-format endpoint (``POST /retrieve``)."""
    api_key_env: str | None = None
    """Environment variable holding the policy server's API key (never logged); None for no key."""
    prompt_length: int = 2048
    """Longest prompt in tokens (verl pads to it)."""
    response_length: int = 2048
    """Token budget of a whole trajectory (model text + observations), ``rollout.response_length``."""
    temperature: float = 0.0
    """Sampling temperature (``rollout.val_kwargs.temperature``); 0 = greedy."""
    top_p: float = 1.0
    """Nucleus sampling (``rollout.val_kwargs.top_p``)."""
    request_timeout_s: float = 600.0
    """Timeout of one completions request."""
    prompt_name: str | None = None
    """Named policy prompt of the format (:meth:`~agentrag_verl.formats.Format.policy_prompt`); None = the paper's.
    Use the prompt the policy was trained with."""
    loop_options: Mapping[str, Any] = field(default_factory=dict)
    """Run-wide agent-loop options (:class:`~agentrag_verl.agent_loops.config.SearchLoopConfig` keys such as
    ``retriever_topk``, ``budget``, ``max_observation_tokens``); unknown keys fail when the loop starts."""


@dataclass
class AgentLoopRollout:
    """One question's finished rollout, unpadded, as :meth:`AgentLoopRunner.run` returns it (what evaluation scores
    and demonstrations keep; the parsed response is a :class:`agentrag_verl.formats.Trajectory`).

    Attributes:
        prompt_ids: Prompt token ids.
        response_ids: Response token ids (model tokens and observations).
        response_mask: 1 = model-generated, 0 = environment text.
        response: The response decoded without special tokens.
        extra_fields: The agent loop's ``agentrag_*`` extra fields.
        num_turns: verl's ``__num_turns__``.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response: str
    extra_fields: dict[str, Any]
    num_turns: int


class AgentLoopRunner:
    """verl's ``AgentLoopWorker`` driving our agent loops against an OpenAI-compatible server (module docstring).

    Build it inside the running event loop (verl's loops expect that); call :meth:`aclose` at the end.
    """

    def __init__(self, config: RunnerConfig, llm_client: Any | None = None) -> None:
        import os

        from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

        from agentrag_verl.agent_loops.openai_client import OpenAICompletionsClient

        self.config = config
        cfg = self.compose(config)
        self.worker = AgentLoopWorker(cfg, llm_client=None)
        self.tokenizer = self.worker.tokenizer
        if llm_client is None:
            api_key = os.environ.get(config.api_key_env, "") if config.api_key_env else None
            llm_client = OpenAICompletionsClient(
                config.base_url,
                config.model,
                tokenizer=self.tokenizer,
                api_key=api_key or None,
                timeout_s=config.request_timeout_s,
            )
        self.llm_client = llm_client
        self.worker.llm_client = llm_client

    @staticmethod
    def overrides(config: RunnerConfig) -> list[str]:
        """Hydra overrides of verl's ``ppo_trainer`` for this runner."""
        from agentrag_verl.agent_loops import AGENT_LOOP_CONFIG

        out = [
            f"actor_rollout_ref.model.path={config.tokenizer}",
            "actor_rollout_ref.rollout.name=vllm",
            f"actor_rollout_ref.rollout.prompt_length={int(config.prompt_length)}",
            f"actor_rollout_ref.rollout.response_length={int(config.response_length)}",
            f"actor_rollout_ref.rollout.val_kwargs.temperature={float(config.temperature)}",
            f"actor_rollout_ref.rollout.val_kwargs.top_p={float(config.top_p)}",
            f"actor_rollout_ref.rollout.val_kwargs.do_sample={str(config.temperature > 0).lower()}",
            "actor_rollout_ref.rollout.calculate_log_probs=false",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={AGENT_LOOP_CONFIG}",
        ]
        return out

    @classmethod
    def compose(cls, config: RunnerConfig) -> Any:
        """verl's composed trainer config with the runner's overrides and ``rollout.custom.agentrag`` options."""
        from hydra import compose, initialize_config_module
        from omegaconf import OmegaConf

        with initialize_config_module(config_module="verl.trainer.config", version_base=None):
            cfg = compose(config_name="ppo_trainer", overrides=cls.overrides(config))
        options = {"retriever_url": config.retriever_url, **dict(config.loop_options)}
        OmegaConf.update(cfg, "actor_rollout_ref.rollout.custom.agentrag", options, merge=False, force_add=True)
        return cfg

    def batch(self, question: Question, format_name: str, index: int = 0) -> Any:
        """The one-row verl batch of ``question`` (the columns a training parquet row gives the agent loop)."""
        import numpy as np
        from verl import DataProto

        from agentrag_verl.formats import get_format
        from agentrag_verl.registry import get_method

        key = str(format_name).strip().lower()
        agent = get_method(key).agent_name  # raises naming the methods
        raw_prompt = np.empty(1, dtype=object)
        raw_prompt[0] = get_format(key).policy_prompt(self.config.prompt_name).messages(question.question)

        def column(value: Any) -> np.ndarray:
            arr = np.empty(1, dtype=object)
            arr[0] = value
            return arr

        return DataProto.from_dict(
            non_tensors={
                "raw_prompt": raw_prompt,
                "agent_name": column(agent),
                "data_source": column(question.dataset),
                "reward_model": column({"style": "rule", "ground_truth": {"target": list(question.golden_answers)}}),
                "extra_info": column({"question": question.question, "index": index, "id": question.id}),
                "index": np.array([index]),
            },
            meta_info={"global_steps": -1, "validate": True, "request_id": uuid.uuid4().hex},
        )

    async def run(self, question: Question, format_name: str, index: int = 0) -> AgentLoopRollout:
        """Roll out one question with the format's agent loop.

        Raises:
            RuntimeError: The policy server failed after the client's retries (the message says which URL).
        """
        from agentrag_verl.agent_loops import fields as F

        out = await self.worker.generate_sequences(self.batch(question, format_name, index))
        n_resp = out.batch["responses"].shape[1]
        attention = out.batch["attention_mask"][0]
        n_prompt = int(attention[:-n_resp].sum())
        n = int(attention[-n_resp:].sum())
        prompts = out.batch["prompts"][0]
        prompt_ids = prompts[prompts.shape[0] - n_prompt :].tolist()
        response_ids = out.batch["responses"][0, :n].tolist()
        response_mask = out.batch["response_mask"][0, :n].tolist()
        extra = {k: _plain(out.non_tensor_batch[k][0]) for k in F.ALL_KEYS if k in out.non_tensor_batch}
        return AgentLoopRollout(
            prompt_ids=prompt_ids,
            response_ids=response_ids,
            response_mask=response_mask,
            response=self.tokenizer.decode(response_ids, skip_special_tokens=True),
            extra_fields=extra,
            num_turns=int(out.non_tensor_batch["__num_turns__"][0]),
        )

    async def aclose(self) -> None:
        """Close the policy client's connections."""
        close = getattr(self.llm_client, "aclose", None)
        if close is not None:
            await close()


def _plain(value: Any) -> Any:
    """numpy scalars / arrays inside extra fields as plain JSON types."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
