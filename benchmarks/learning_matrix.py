"""The learning matrix: one row per ``benchmarks/learning.py`` run, from the JSON summaries it writes.

Columns: the held-out questions (the mini-wiki test sets grew from 100 to 190); held-out CEM after the warm start and
after RL (mean ±95% CI); the training reward of the first 5 steps against the last 5 (ReasonRAG: DPO's reward margin
on the held-out pairs, 0 before DPO and after it, paired by pair; runs before that check: over its first and last 5
evaluations), with the standard error of the difference (on the fixed question set: the paired rise over questions,
which the check uses, beside the step means); searches per question on corpus-only and on
common-knowledge test questions, before -> after; the checks; wall time; the command.

Usage::

    python benchmarks/learning_matrix.py                        # outputs/demo and outputs/learning/*
    python benchmarks/learning_matrix.py path/to/learning_hiprag_grpo.json ...
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

DEFAULT_GLOBS = ("outputs/demo/learning_*.json", "outputs/learning/*/learning_*.json")


def _pm(value: list[Any] | None, scale: float = 100.0, digits: int = 1) -> str:
    if not value or value[0] is None:
        return "-"
    mean, half = value[0] * scale, (value[1] or 0.0) * scale
    return f"{mean:.{digits}f} ±{half:.{digits}f}"


def row(summary: dict[str, Any]) -> list[str]:
    """One table row of a learning.py summary."""
    warm, after, checks = summary["warm"], summary["after"], summary["checks"]
    rise = checks.get("reward_rises") or checks.get("margin_rises")  # DPO: the reward margin
    reward = "-"
    if rise and "first5" in rise:
        reward = f"{rise['first5'][0]:.3f} -> {rise['last5'][0]:.3f}"
        if paired := rise.get("paired"):  # the verdict's figures: the rise per question
            reward += (
                f" (paired {paired['diff']:+.3f}, {paired['diff'] / paired['se']:+.2f} SE)" if paired["se"] else ""
            )
        elif rise["se"]:
            reward += f" ({rise['diff'] / rise['se']:+.2f} SE)"
        reward = f"margin {reward}" if "margin_rises" in checks else reward
    elif rise and rise.get("pairs"):  # DPO: each held-out pair's margin, 0 before DPO, SE over pairs
        reward = (
            f"held-out margin 0 -> {rise['after']:.3f} ({rise['diff'] / rise['se']:+.2f} SE, {rise['pairs']} pairs)"
        )
    failed = [name for name, c in checks.items() if not c["pass"]]
    return [
        f"{summary['design']} ({summary['algo']})",
        str(warm.get("n", "-")),
        _pm(warm.get("cem")),
        _pm(after.get("cem")),
        reward,
        f"{_pm(warm.get('depth_corpus'), 1, 2)} -> {_pm(after.get('depth_corpus'), 1, 2)}",
        f"{_pm(warm.get('depth_common'), 1, 2)} -> {_pm(after.get('depth_common'), 1, 2)}",
        "all pass" if not failed else "FAIL: " + ", ".join(failed),
        f"{summary['walls']['total'] / 60:.0f} min",
        f"`{summary['command']}`",
    ]


HEADER = ["design", "test questions", "CEM warm start %", "CEM after %", "reward first 5 -> last 5",
          "searches/q corpus", "searches/q common", "checks", "wall", "command"]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("summaries", nargs="*", help="learning_<design>_<algo>.json files (default: the usual places).")
    args = p.parse_args(argv)
    paths = [Path(s) for s in args.summaries] or sorted(q for g in DEFAULT_GLOBS for q in Path().glob(g))
    if not paths:
        print("no learning summaries found; run benchmarks/learning.py first", file=sys.stderr)
        return 1
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(row(json.loads(path.read_text()))) + " |" for path in paths]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
