"""Property tests: managers never raise on fuzzed responses and extra fields; scores stay in documented ranges;
``reward_extra_info`` keys are the same for every sample."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

TAGS = [
    "<think>", "</think>", "<search>", "</search>", "<information>", "</information>", "<answer>", "</answer>",
    "<step>", "</step>", "<reasoning>", "</reasoning>", "<conclusion>", "</conclusion>", "<context>", "</context>",
    "<reflect>", "</reflect>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
]  # fmt: skip
responses = st.lists(st.one_of(st.sampled_from(TAGS), st.sampled_from(["Paris", "q", " ", "x y"]), st.text(max_size=5)),
                     max_size=25).map("".join)  # fmt: skip
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-3, 50), st.text(max_size=4)),
    lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.sampled_from(["kind", "step", "query", "text",
                        "answer", "end_token_index"]), c, max_size=4)),
    max_leaves=8,
)  # fmt: skip
field_names = st.sampled_from(
    ["agentrag_steps", "agentrag_reanswers", "agentrag_intermediate_answers", "agentrag_num_searches", "junk"]
)
extra = st.one_of(st.none(), st.dictionaries(field_names, json_values, max_size=4))

# Documented score ranges (with default options): see each pure function's docstring.
RANGES = {
    "SearchR1RewardManager": (0.0, 1.0),
    "HipragRewardManager": (0.0, 1.4),
    "MultistageRewardManager": (-3.0, 3.0),  # r_a in [-1, 1 + 0.3 RC], r_s in [-1, 1], r_f +-1 (RC small here)
    "SearchP1RewardManager": (0.0, 1.06),
    "AutoSearchRewardManager": (-50.0, 50.0),  # sum of per-step values, each bounded (see step_rewards)
}


class CharTokenizer:
    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(int(i)) for i in ids)


class FailingJudge:
    """Every verdict fails: exercises the judge-failure policies."""

    async def judge(self, request):
        from agentrag_verl.judges import Verdict

        return Verdict(None, None, False, "timeout", "scripted failure")

    async def judge_many(self, requests):
        return [await self.judge(r) for r in requests]


def make_manager(name: str, embedding_url: str):
    from omegaconf import OmegaConf

    from agentrag_verl.registry import reward_manager_class, reward_manager_names, reward_manager_target

    # Multi-stage needs query embeddings once a response has 2+ searches: the real retriever's /encode.
    kwargs = {"correctness": "em", "embedding": {"url": embedding_url}} if name == "MultistageRewardManager" else {}
    config = OmegaConf.create({"reward": {"reward_kwargs": kwargs}})
    (design,) = [n for n in reward_manager_names() if reward_manager_target(n).endswith(f":{name}")]
    manager = reward_manager_class(design)(config=config, tokenizer=CharTokenizer(), compute_score=None)

    async def judge(*_):
        return FailingJudge()

    manager.judge = judge
    return manager


def make_data(response: str, fields, golds=("Paris",)):
    from verl import DataProto

    ids = [ord(c) for c in response] or [32]
    responses = torch.tensor([ids])
    prompts = torch.tensor([[1, 2]])
    nt = {
        "data_source": np.array(["nq"], dtype=object),
        "reward_model": np.array([{"ground_truth": {"target": list(golds)}}], dtype=object),
        "extra_info": np.array([{"index": 3}], dtype=object),
        "global_steps": np.array([2]),
    }
    if fields is not None:
        arr = np.empty(1, dtype=object)
        arr[0] = fields
        nt["tool_extra_fields"] = arr
    batch = {
        "prompts": prompts,
        "responses": responses,
        "attention_mask": torch.ones(1, 2 + len(ids), dtype=torch.long),
    }
    return DataProto.from_dict(tensors=batch, non_tensors=nt)


@pytest.mark.parametrize("name", list(RANGES))
def test_managers_never_raise_and_keep_keys(name, retriever_service):
    manager = make_manager(name, retriever_service.base_url)
    loop = asyncio.new_event_loop()
    low, high = RANGES[name]
    seen_keys = set()

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(responses, extra)
    def check(response, fields):
        out = loop.run_until_complete(manager.run_single(make_data(response, fields)))
        info = out["reward_extra_info"]
        public = tuple(k for k in info if not k.startswith("_"))
        seen_keys.add(public)
        assert public == manager.keys
        assert all(isinstance(info[k], float) and math.isfinite(info[k]) for k in public)
        assert info["reward_error"] == 0.0, "a fuzzed sample hit the catch-all"
        assert low - 1e-9 <= out["reward_score"] <= high + 1e-9

    try:
        check()
    finally:
        loop.close()
    assert len(seen_keys) == 1
