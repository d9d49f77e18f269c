"""LLM judges shared by every reward: one async, cached, fault-tolerant client and the helpers every judge uses.

- :class:`JudgeConfig` / :class:`JudgeClient` (``judges.config``, ``judges.client``): any OpenAI-compatible
  endpoint; bounded concurrency, timeouts, retries with backoff, in-flight dedup, memory/disk cache, metrics.
- ``judges.prompts``: the chat :data:`~agentrag_verl.judges.prompts.Message`, template slots, gold-answer formatting.
- ``judges.parsers``: :class:`ParseError`, ``strip_reasoning`` (``<think>`` blocks), lenient JSON loading.
- ``judges.policy``: ``choose_policy``, reading a failure-policy option against its enum.

Each paper's judge (its prompts by figure number, verdict parser, :class:`JudgeRequest` builder and what a failed
verdict means) is in its method folder, ``agentrag_verl/methods/<paper>/judge.py``; this package imports no method.
Importing it imports neither ``openai`` nor torch; the client imports ``openai`` when constructed.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "JudgeConfig": "config",
    "JudgeConfigError": "config",
    "JudgeClient": "client",
    "JudgeRequest": "client",
    "JudgeUnavailableError": "client",
    "Verdict": "client",
    "ERROR_KINDS": "client",
    "ParseError": "parsers",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
