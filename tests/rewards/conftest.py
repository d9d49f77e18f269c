"""Fixtures of the reward-manager integration tests.

Samples reach a manager exactly as in training: an ``AgentLoopOutput`` (scripted response, ``extra_fields`` per the
issue-7 contract) goes through verl's own ``AgentLoopWorker._agent_loop_postprocess`` -> ``_compute_score``
(which builds the one-sample reward ``DataProto``) -> verl's ``RewardLoopWorker.compute_score`` -> the manager
loaded by verl's ``load_reward_manager`` from a composed ``ppo_trainer`` config. Then ``AgentLoopWorker._postprocess``
stacks the batch (it fails if ``reward_extra_info`` keys differ between samples).
"""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tests.support import trainer_config

EXTRA_FIELD_KEYS = (
    "agentrag_format",
    "agentrag_steps",
    "agentrag_num_searches",
    "agentrag_budget_exhausted",
    "agentrag_retriever_errors",
    "agentrag_reanswers",
    "agentrag_intermediate_answers",
    "agentrag_aux_cost",
    "agentrag_timings",
)


def extra_fields(**values: Any) -> dict[str, Any]:
    """Contract ``extra_fields`` with defaults for every key."""
    out: dict[str, Any] = {
        "agentrag_format": "searchr1",
        "agentrag_steps": [],
        "agentrag_num_searches": 0,
        "agentrag_budget_exhausted": False,
        "agentrag_retriever_errors": 0,
        "agentrag_reanswers": [],
        "agentrag_intermediate_answers": [],
        "agentrag_aux_cost": {},
        "agentrag_timings": {},
    }
    out.update({f"agentrag_{k}": v for k, v in values.items()})
    return out


class Scorer:
    """Scores scripted responses through verl's agent-loop postprocess and reward loop."""

    def __init__(self, model_dir: Any, reward_overrides: list[str], **config: Any) -> None:
        """``config``: where the trainer config comes from (:func:`tests.support.trainer_config`'s ``config_dir``
        and ``config_name``; verl's plain ``ppo_trainer`` by default)."""
        from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
        from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

        self.config = trainer_config(model_dir, *reward_overrides, prompt_length=256, response_length=512, **config)
        self.reward_worker = RewardLoopWorker(self.config)
        self.manager = self.reward_worker.reward_manager
        self.worker = AgentLoopWorker(self.config, llm_client=None)
        remote = SimpleNamespace(remote=self.reward_worker.compute_score)  # awaitable like a Ray call
        self.worker.reward_loop_worker_handles = [SimpleNamespace(compute_score=remote)]
        self.tokenizer = self.worker.tokenizer

    def output(self, response: str, fields: dict[str, Any] | None, mask: list[int] | None = None) -> Any:
        """An ``AgentLoopOutput`` whose response tokens decode to ``response``."""
        from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

        ids = self.tokenizer.encode(response, add_special_tokens=False) or [0]
        return AgentLoopOutput(
            prompt_ids=self.tokenizer.encode("Question: q\n", add_special_tokens=False),
            response_ids=ids,
            response_mask=mask if mask is not None else [1] * len(ids),
            num_turns=2,
            metrics=AgentLoopMetrics(),
            extra_fields=dict(fields) if fields is not None else {},
        )

    async def score(self, samples: list[dict[str, Any]], global_steps: int = 1) -> Any:
        """``samples``: dicts with ``response``, ``golds`` and optional ``fields``, ``question``, ``id``.

        Returns:
            verl's stacked ``DataProto`` (``non_tensor_batch`` holds the reward_extra_info columns) and the
            per-sample ``(reward_score, reward_extra_info)``.
        """
        internals, results = [], []
        for s in samples:
            out = self.output(s["response"], s.get("fields"), s.get("mask"))
            kwargs = {
                "raw_prompt": [{"role": "user", "content": s.get("question", "q")}],
                "data_source": "nq",
                "reward_model": {"style": "rule", "ground_truth": {"target": s["golds"]}},
                "extra_info": {"index": s.get("id", 0), "question": s.get("question", "q"), **s.get("extra_info", {})},
                "index": s.get("id", 0),
                "uid": str(uuid.uuid4()),
                "global_steps": global_steps,
            }
            internal = await self.worker._agent_loop_postprocess(out, validate=False, **kwargs)
            internals.append(internal)
            results.append((internal.reward_score, internal.extra_fields["reward_extra_info"]))
        batch = self.worker._postprocess(internals)
        return batch, results


@pytest.fixture(scope="session")
def make_scorer(tiny_model_dir):
    """``make_scorer(overrides) -> Scorer`` (one per override list, cached)."""
    cache: dict[tuple[str, ...], Scorer] = {}

    def make(overrides: list[str]) -> Scorer:
        key = tuple(overrides)
        if key not in cache:
            cache[key] = Scorer(tiny_model_dir, overrides)
        return cache[key]

    return make


def np_column(batch: Any, key: str) -> np.ndarray:
    """A reward_extra_info column of a stacked batch."""
    return np.asarray(batch.non_tensor_batch[key])


def tokenize_segments(tokenizer: Any, segments: list[tuple[str, int]]) -> tuple[list[int], list[int], list[int]]:
    """Token ids, loss mask and step ends of a trajectory written as ``(text, mask)`` segments: each segment's tokens
    get its mask, and each model segment (mask 1) ends a step at its last token."""
    ids: list[int] = []
    mask: list[int] = []
    ends: list[int] = []
    for text, m in segments:
        seg = tokenizer.encode(text, add_special_tokens=False)
        ids += seg
        mask += [m] * len(seg)
        if m:
            ends.append(len(ids) - 1)
    return ids, mask, ends


def scored_output(info: dict[str, Any], mask: list[int], score: float = 1.5, response_ids: list[int] | None = None):
    """One sample's unpadded ``AgentLoopOutput`` after verl's ``_compute_score`` (``reward_extra_info`` = ``info``;
    prompt ``[1, 2]``, response ids ``10, 11, ...`` unless given), as the step-reward worker
    (``StepRewardAgentLoopWorkerImpl._agent_loop_postprocess``) receives it."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

    return AgentLoopOutput(
        prompt_ids=[1, 2],
        response_ids=list(range(10, 10 + len(mask))) if response_ids is None else response_ids,
        response_mask=mask,
        reward_score=score,
        metrics=AgentLoopMetrics(),
        extra_fields={"reward_extra_info": dict(info)},
    )


def gae_returns(token_rewards: Any, mask: list[int]) -> Any:
    """verl's GAE returns of one response with gamma = lam = 1 and zero values: at each position, the rewards to go
    over model tokens (mask 1)."""
    import torch
    from verl.trainer.ppo.core_algos import compute_gae_advantage_return

    r = token_rewards.unsqueeze(0)
    m = torch.tensor(mask, dtype=torch.float32).unsqueeze(0)
    _, returns = compute_gae_advantage_return(r, torch.zeros_like(r), m, gamma=1.0, lam=1.0)
    return returns[0]
