"""Per-step rewards into ``rm_scores``: a custom agent-loop manager/worker for verl's V1 trainer (AutoSearch Eq. 10-12:
each step's reward on its last model-generated token).

Select it with ``+actor_rollout_ref.rollout.agent.agent_loop_manager_class=
agentrag_verl.rewards.managers.step_rewards.StepRewardAgentLoopManager``. The worker scores each trajectory
through verl's reward loop as usual; if the reward manager returned a per-token placement
(:data:`~agentrag_verl.rewards.managers.composed.TOKEN_REWARDS_KEY`, written by per-step managers) it
removes it from ``reward_extra_info`` and writes the rewards at those response positions of ``rm_scores``
(:func:`place_token_rewards`), which the V1 trainer copies to ``token_level_scores``. A position on an observation
token (``response_mask = 0``) moves back to the step's last model-generated token, since GAE ignores mask-0
positions. Other managers' samples keep verl's behaviour (the scalar on the last token).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from typing import Any

import ray
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ, AgentLoopWorkerTQ

from agentrag_verl.rewards.managers.composed import TOKEN_REWARDS_KEY

logger = logging.getLogger(__name__)

_WorkerTQ = AgentLoopWorkerTQ.__ray_actor_class__  # verl decorates the worker with @ray.remote

__all__ = [
    "PLACEMENT_ERRORS_KEY",
    "decode_placement",
    "place_token_rewards",
    "StepRewardAgentLoopWorker",
    "StepRewardAgentLoopWorkerImpl",
    "StepRewardAgentLoopManager",
    "StepRewardOutput",
    "with_token_rewards",
]


PLACEMENT_ERRORS_KEY = "step_placement_errors"
"""``reward_extra_info`` key set on every sample that carries a per-step placement: 1.0 when the placement could
not be decoded (the scalar reward then sits on the last token, as verl places it) or held entries that could not be
placed as given (an index outside the response: moved to the last token), else 0.0. Failures are also logged."""


def place_token_rewards(response_mask: Sequence[int], placements: Sequence[Sequence[float]]) -> list[float]:
    """A per-token reward vector from ``[(index, reward), ...]``.

    Index ``-1`` (or any index past the end) means the last model-generated token; an index on a mask-0 token
    moves back to the nearest earlier mask-1 token (forward if none); rewards at the same token add up.

    >>> place_token_rewards([1, 1, 0, 0, 1, 1], [(1, 0.5), (3, 0.25), (-1, 1.0)])
    [0.0, 0.75, 0.0, 0.0, 0.0, 1.0]
    """
    n = len(response_mask)
    out = [0.0] * n
    ones = [i for i, m in enumerate(response_mask) if m]
    if n == 0:
        return out
    last = ones[-1] if ones else n - 1
    for index, reward in placements:
        i = int(index)
        if i < 0 or i >= n:
            i = last
        elif not response_mask[i]:
            earlier = [j for j in ones if j <= i]
            later = [j for j in ones if j > i]
            i = earlier[-1] if earlier else (later[0] if later else last)
        out[i] += float(reward)
    return out


class StepRewardOutput(AgentLoopOutput):
    """``AgentLoopOutput`` whose ``rm_scores`` is a per-token vector instead of the scalar on the last token."""

    token_rewards: list[float] | None = None

    def as_dict(self) -> dict[str, Any]:
        """verl's dict, with ``rm_scores`` replaced by :attr:`token_rewards`."""
        import torch

        out = super().as_dict()
        rewards = out.pop("token_rewards", None)
        if self.token_rewards is not None:
            out["rm_scores"] = torch.tensor(self.token_rewards, dtype=torch.float32)
        elif rewards is not None:
            out["rm_scores"] = torch.tensor(rewards, dtype=torch.float32)
        return out


def decode_placement(raw: Any, n_tokens: int) -> tuple[list[tuple[int, float]] | None, str | None]:
    """``(placements, problem)`` of a :data:`TOKEN_REWARDS_KEY` value for a response of ``n_tokens`` tokens.

    ``placements`` is ``None`` when the value cannot be decoded at all (not JSON, not a list of
    ``[int index, finite reward]`` pairs); ``problem`` says what was wrong (``None`` when nothing was).

    >>> decode_placement("[[0, 0.5], [-1, 1.0]]", 3)
    ([(0, 0.5), (-1, 1.0)], None)
    >>> decode_placement("[[7, 0.5]]", 3)
    ([(7, 0.5)], 'index 7 outside the 3-token response (placed on the last model token)')
    >>> decode_placement("not json", 3)
    (None, 'not JSON: Expecting value: line 1 column 1 (char 0)')
    """
    try:
        value = json.loads(raw) if isinstance(raw, (str, bytes)) else raw
    except ValueError as exc:
        return None, f"not JSON: {exc}"
    if not isinstance(value, list):
        return None, f"expected a list of [index, reward] pairs, got {type(value).__name__}"
    out: list[tuple[int, float]] = []
    for entry in value:
        ok = isinstance(entry, (list, tuple)) and len(entry) == 2
        index, reward = (entry[0], entry[1]) if ok else (None, None)
        if not ok or isinstance(index, bool) or not isinstance(index, int) or isinstance(reward, bool):
            return None, f"malformed entry {entry!r} (expected [int index, float reward])"
        if not isinstance(reward, (int, float)) or not math.isfinite(reward):
            return None, f"reward {reward!r} at index {index} is not a finite number"
        out.append((index, float(reward)))
    outside = [i for i, _ in out if i < -1 or i >= n_tokens]
    if outside:
        return out, f"index {outside[0]} outside the {n_tokens}-token response (placed on the last model token)"
    return out, None


def with_token_rewards(output: AgentLoopOutput) -> AgentLoopOutput:
    """Replace a scored output by a :class:`StepRewardOutput` if its reward info carries a placement.

    A placement that cannot be decoded leaves verl's scalar on the last token; it is logged and counted in
    :data:`PLACEMENT_ERRORS_KEY` (set on every sample with a placement, so the key set stays the same).
    """
    info = output.extra_fields.get("reward_extra_info")
    if not isinstance(info, dict) or TOKEN_REWARDS_KEY not in info:
        return output
    raw = info.pop(TOKEN_REWARDS_KEY)
    placements, problem = decode_placement(raw, len(output.response_mask))
    info[PLACEMENT_ERRORS_KEY] = 0.0 if problem is None else 1.0
    if problem is not None:
        logger.warning(
            "per-step reward placement %s: %s (counted in reward_extra_info.%s)",
            "dropped, the scalar reward stays on the last token" if placements is None else "partly moved",
            problem,
            PLACEMENT_ERRORS_KEY,
        )
    if placements is None:
        return output
    vector = place_token_rewards(output.response_mask, placements)
    values = {name: getattr(output, name) for name in output.model_fields_set}
    values["extra_fields"] = output.extra_fields
    return StepRewardOutput(**values, token_rewards=vector)


def _build_worker_class() -> type:
    # Defined in a function on purpose: verl's ``AgentLoopWorkerTQ`` name is a Ray ActorClass, so Ray/cloudpickle
    # ships the plain worker class by value; ours must travel by value too, or the ``super()`` cell of verl's
    # ``__init__`` (the by-value copy) and our base (the imported original) differ in the actor process.
    class StepRewardAgentLoopWorkerImpl(_WorkerTQ):
        """V1 agent-loop worker that writes per-step rewards into ``rm_scores`` (plain class; the Ray actor is
        :data:`StepRewardAgentLoopWorker`)."""

        async def _agent_loop_postprocess(self, output: Any, validate: Any, **kwargs: Any) -> None:
            outputs = list(output) if isinstance(output, list) else [output]
            if outputs:
                await self._compute_score(outputs, kwargs=kwargs)
                outputs[-1] = with_token_rewards(outputs[-1])
            await super()._agent_loop_postprocess(outputs, validate, **kwargs)

    return StepRewardAgentLoopWorkerImpl


StepRewardAgentLoopWorkerImpl = _build_worker_class()


StepRewardAgentLoopWorker = ray.remote(StepRewardAgentLoopWorkerImpl)
"""The Ray actor class of :class:`StepRewardAgentLoopWorkerImpl`."""


class StepRewardAgentLoopManager(AgentLoopManagerTQ):
    """V1 agent-loop manager using :class:`StepRewardAgentLoopWorker` (verl's ``agent_loop_manager_class`` hook)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.agent_loop_workers_class = StepRewardAgentLoopWorker  # after verl's TQ manager set its own
