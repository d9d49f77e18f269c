"""LLM judges shared by every reward: one async, cached, fault-tolerant client and the helpers every judge uses.

- :class:`JudgeConfig` / :class:`JudgeClient` (``judges.config``, ``judges.client``): any OpenAI-compatible
  endpoint; bounded concurrency, timeouts, retries with backoff, in-flight dedup, memory/disk cache, metrics.
- ``judges.prompts``: the chat :data:`~agentrag_verl.judges.prompts.Message`, template slots, gold-answer formatting.
- ``judges.parsers``: :class:`ParseError`, ``strip_reasoning`` (``<think>`` blocks), lenient JSON loading.
- ``judges.policy``: ``choose_policy``, reading a failure-policy option against its enum.

Each paper's judge (its prompts by figure number, verdict parser, :class:`JudgeRequest` builder and what a failed
verdict means) is in its method folder, ``agentrag_verl/methods/<paper>/judge.py``; this package imports no method.
Importing it imports neither aiohttp nor torch; the client imports aiohttp when it first sends.
"""

from __future__ import annotations

from agentrag_verl._lazy import lazy_exports

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

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
