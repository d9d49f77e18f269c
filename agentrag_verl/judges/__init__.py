"""LLM judges shared by every reward: one async, cached, fault-tolerant client, the papers' prompts and parsers.

- :class:`JudgeConfig` / :class:`JudgeClient` (``judges.config``, ``judges.client``): any OpenAI-compatible
  endpoint; bounded concurrency, timeouts, retries with backoff, in-flight dedup, memory/disk cache, metrics.
- ``judges.prompts``: HiPRAG Figures 5-6, the multi-stage judge instruction (B.4), ReasonRAG Figure 14,
  Search-P1 Figures 8-9.
- ``judges.parsers``: ``<answer>True|False</answer>``, YES/NO, ``So the score is X``, Search-P1 JSON and planner.
- ``judges.uses``: a :class:`JudgeRequest` builder per paper use (prompt + parser).
- ``judges.policy``: what a failed verdict means per use (HiPRAG ``exclude`` / ``optimal`` / ``suboptimal``, ...).

Importing this package imports neither aiohttp nor torch; the client imports aiohttp when it first sends.
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
    "SearchP1Evaluation": "parsers",
    "ReferencePlan": "parsers",
    "HipragErrorPolicy": "policy",
    "CorrectnessFallback": "policy",
    "ProcessScoreFallback": "policy",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
