"""Score evaluated trajectories with the papers' reward designs, through the same verl reward managers training uses.

Each trajectory reaches :meth:`RewardManagerBase.run_single` as the one-sample ``DataProto`` verl's
``AgentLoopWorker._compute_score`` builds (``prompts`` / ``responses`` / ``attention_mask``, the dataset columns,
``tool_extra_fields`` = the loop's ``extra_fields``), so the numbers are the rewards a training run would give.

A design is a method with a reward manager; it scores the trajectories of the formats its reward is defined on
(:attr:`agentrag_verl.registry.Method.scored_formats`: its own grammar, and any other whose trajectories it reads
too). Scoring a trajectory with the reward of another grammar would only measure that it is not in that format.

Each method gives its manager's ``reward.reward_kwargs`` in evaluation
(:attr:`~agentrag_verl.registry.Method.eval_reward_kwargs`: the judge endpoint, the retriever's ``POST /encode``, a
string option where no judge is given). A method whose reward cannot be computed without a judge
(:attr:`~agentrag_verl.registry.Method.reward_needs_judge`) is refused without one, with an error that says so.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

__all__ = ["design_formats", "RewardScorer", "designs_for_format", "reward_data"]


def design_formats() -> dict[str, tuple[str, ...]]:
    """Reward design (``reward.reward_manager.name``: a method with a reward manager) -> the formats whose
    trajectories it scores, in method order."""
    from agentrag_verl.registry import methods

    return {m.name: m.scored_formats for m in methods() if m.reward_manager}


def designs_for_format(format_name: str, designs: list[str]) -> list[str]:
    """The designs of ``designs`` that score ``format_name`` trajectories.

    >>> designs_for_format("autosearch", ["searchr1", "autosearch", "hiprag"])
    ['searchr1', 'autosearch']
    """
    formats = design_formats()
    return [d for d in designs if format_name in formats.get(d, ())]


def reward_data(trajectory: Any, question: Any, format_name: str) -> Any:
    """The one-sample reward ``DataProto`` of a trajectory, as verl's ``_compute_score`` builds it."""
    import numpy as np
    import torch
    from tensordict import TensorDict
    from verl import DataProto

    from agentrag_verl.formats import get_format

    prompts = torch.tensor([trajectory.prompt_ids], dtype=torch.int64)
    responses = torch.tensor([trajectory.response_ids or [0]], dtype=torch.int64)
    attention = torch.ones(1, prompts.shape[1] + responses.shape[1], dtype=torch.int64)
    if not trajectory.response_ids:
        attention[0, -1] = 0

    def column(value: Any) -> np.ndarray:
        arr = np.empty(1, dtype=object)
        arr[0] = value
        return arr

    batch = TensorDict({"prompts": prompts, "responses": responses, "attention_mask": attention}, batch_size=1)
    non_tensor = {
        "data_source": column(question.dataset),
        "raw_prompt": column(get_format(format_name).prompt.messages(question.question)),
        "reward_model": column({"style": "rule", "ground_truth": {"target": list(question.golden_answers)}}),
        "extra_info": column({"question": question.question, "id": question.id, "index": 0}),
        "index": np.array([0]),
        "__num_turns__": np.array([trajectory.num_turns]),
        "tool_extra_fields": column(dict(trajectory.extra_fields)),
    }
    return DataProto(batch=batch, non_tensor_batch=non_tensor)


class RewardScorer:
    """The reward managers of some designs, built once and shared by all trajectories.

    Args:
        designs: Design names (keys of :func:`design_formats`).
        tokenizer: The policy's tokenizer (managers decode responses with it).
        judge: JudgeConfig mapping (``base_url``, ``model``, ``api_key_env``, ...) or None.
        retriever_root: The retriever's root URL (``/encode`` for the multi-stage search reward).
        reward_kwargs: Per-design overrides of ``reward.reward_kwargs``, e.g. ``{"<design>": {"lambda_p": 0.6}}``.

    Raises:
        ValueError: Unknown design, or a judged design without ``judge``.
    """

    def __init__(
        self,
        designs: list[str],
        tokenizer: Any,
        *,
        judge: Mapping[str, Any] | None = None,
        retriever_root: str | None = None,
        reward_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        from omegaconf import OmegaConf

        from agentrag_verl.registry import get_method, reward_manager_class

        known = list(design_formats())
        unknown = [d for d in designs if d not in known]
        if unknown:
            raise ValueError(f"Unknown reward design(s) {unknown}; choose from {known} (--rewards).")
        needs_judge = [d for d in designs if get_method(d).reward_needs_judge]
        if needs_judge and not judge:
            raise ValueError(
                f"Reward design(s) {needs_judge} call an LLM judge; give one with --judge-base-url/--judge-model "
                "(any OpenAI-compatible endpoint), or leave them out of --rewards."
            )
        self.designs = list(designs)
        self.managers: dict[str, Any] = {}
        overrides = {k: dict(v) for k, v in (reward_kwargs or {}).items()}
        for design in designs:
            kwargs = self.default_kwargs(design, judge, retriever_root)
            kwargs.update(overrides.get(design, {}))
            config = OmegaConf.create({"reward": {"reward_kwargs": kwargs}})
            self.managers[design] = reward_manager_class(design)(config=config, tokenizer=tokenizer)

    @staticmethod
    def default_kwargs(design: str, judge: Mapping[str, Any] | None, retriever_root: str | None) -> dict[str, Any]:
        """``reward.reward_kwargs`` of a design in evaluation (the paper's constants stay the managers' defaults)."""
        from agentrag_verl.registry import get_method

        build = get_method(design).eval_reward_kwargs
        return dict(build(copy.deepcopy(dict(judge)) if judge else None, retriever_root)) if build else {}

    async def score(self, trajectory: Any, question: Any, format_name: str) -> dict[str, dict[str, float]]:
        """``{design: reward_extra_info}`` (``score`` is the reward) for every design that scores this format."""
        out: dict[str, dict[str, float]] = {}
        for design in designs_for_format(format_name, self.designs):
            result = await self.managers[design].run_single(reward_data(trajectory, question, format_name))
            info = {k: v for k, v in result["reward_extra_info"].items() if not k.startswith("_")}
            info["score"] = float(result["reward_score"])
            out[design] = info
        return out

    async def aclose(self) -> None:
        """Close the managers' judge clients."""
        for manager in self.managers.values():
            await manager.aclose()

    def judge_metrics(self) -> dict[str, float]:
        """``judge/<design>/<judge>/...`` counters of the managers' judge clients."""
        out: dict[str, float] = {}
        for design, manager in self.managers.items():
            for k, v in manager.judge_metrics().items():
                out[f"{design}/{k}"] = v
        return out
