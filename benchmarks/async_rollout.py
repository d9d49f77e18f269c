"""Synchronous against partial-rollout training on one CPU machine: verl's ``sync`` and ``colocate_async`` trainer
modes, the same GRPO run from the demo's warm start.

SmolLM2-135M-Instruct warm-started by ``make demo`` (cached in ``--work-dir``; built first when absent), HiPRAG's
format and reward with the stand-in judge, the mini-wiki corpus behind the real retriever: the learning benchmark's
GRPO stage (:mod:`agentrag_verl.demo.pipeline`, ``agentrag-verl train-local``), run once per trainer mode with the
same prompts, steps and seed. ``colocate_async`` takes the recipes' settings for it
(``agentrag_verl/config/trainer_mode/colocate_async.yaml``: one warm-up batch, at most two weight versions per
trajectory, token-level importance weights).

Per step and mode it prints: the step's wall time and its generation phase (``timing_s/gen``), the training reward,
the mean and longest response, the tail share of the generation phase (``1 - mean / longest`` response length:
with tokens coming at a steady rate per trajectory, the share of the slowest trajectory's generation time that the
average other trajectory has already finished; what partial rollout can hand to the next step), the share of
trajectories aborted and resumed, and their staleness; then the reward against the cumulative wall time.
Not part of CI (about 25 min on 2 cores with the warm start cached); figures in ``benchmarks/README.md``.

Usage::

    python benchmarks/async_rollout.py
    python benchmarks/async_rollout.py --steps 6 --batch-size 6 --rollout-n 4
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import ExitStack
from pathlib import Path

MODES = ("sync", "colocate_async")


def step_rows(summary: dict) -> list[dict]:
    """Per training step: wall time and the metrics this comparison reads from ``train-local``'s summary."""
    rows, elapsed = [], 0.0
    walls = {int(k): v for k, v in summary.get("step_wall_s", {}).items()}
    for step in sorted(summary.get("steps", {}), key=int):
        m = summary["steps"][step]
        wall = walls.get(int(step), m.get("timing_s/step"))
        elapsed += float(wall or 0.0)
        mean, longest = m.get("response_length/mean"), m.get("response_length/max")
        rows.append(
            {
                "step": int(step),
                "wall_s": wall,
                "elapsed_s": round(elapsed, 1),
                "gen_s": m.get("timing_s/gen"),
                "reward": m.get("critic/score/mean"),
                "response_mean": mean,
                "response_max": longest,
                "tail_share": round(1 - mean / longest, 3) if mean and longest else None,
                "aborted": m.get("response/aborted_ratio"),
                "staleness_max": m.get("training/off_policy/trajectory_staleness/max"),
                "spans_max": m.get("training/off_policy/trajectory_spans/max"),
            }
        )
    return rows


def main() -> int:
    from learning import demo_parser, parse_demo_args  # benchmarks/learning.py: the same warm start

    from agentrag_verl.demo import pipeline as P

    p = demo_parser(__doc__)
    p.add_argument("--steps", type=int, default=4, help="GRPO steps per mode.")
    p.add_argument("--batch-size", type=int, default=6, help="Prompts per step (the learning benchmark's).")
    p.add_argument("--rollout-n", type=int, default=4, help="GRPO group size.")
    p.add_argument("--lr", type=float, default=3e-6)
    args, s = parse_demo_args(p)
    s.grpo_steps, s.grpo_batch_size, s.grpo_rollout_n, s.grpo_lr = args.steps, args.batch_size, args.rollout_n, args.lr
    s.grpo_val_limit = 0  # the comparison is the training steps; no validation inside main_ppo
    results: dict[str, dict] = {}
    with ExitStack() as stack:
        base, url, judge_url = P.start_services(s, stack)
        P.demos_stage(s, base, url)
        sft = P.sft_stage(s, base)
        for mode in MODES:
            s.grpo_trainer_mode = mode
            t = time.perf_counter()
            summary = P.grpo_stage(s, Path(sft["model"]), url, judge_url, name=f"async_bench_{mode}")
            results[mode] = {
                "wall_s": round(time.perf_counter() - t, 1),
                "until_training_starts_s": summary.get("until_training_starts_s"),
                "steps": step_rows(summary),
                "settings": summary.get("settings"),
            }

    columns = ("step", "wall_s", "elapsed_s", "gen_s", "reward", "response_mean", "response_max", "tail_share",
               "aborted", "staleness_max")  # fmt: skip
    for mode, r in results.items():
        print(f"\n{mode}: {len(r['steps'])} steps, start-up {r['until_training_starts_s']} s, stage {r['wall_s']} s")
        print("  ".join(f"{c:>13}" for c in columns))
        for row in r["steps"]:
            print("  ".join(f"{_fmt(row[c]):>13}" for c in columns))
        walls = [row["wall_s"] for row in r["steps"] if row["wall_s"]]
        gens = [row["gen_s"] for row in r["steps"] if row["gen_s"] is not None]
        print(
            f"  mean step {sum(walls) / len(walls):.1f} s (first step excluded: "
            f"{sum(walls[1:]) / max(1, len(walls) - 1):.1f} s), mean generation phase {sum(gens) / len(gens):.1f} s"
        )
    out = Path(s.work_dir) / "async_rollout.json"
    out.write_text(json.dumps(results, indent=1, default=str))
    print(f"\nresults: {out}")
    return 0


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 100 else f"{value:.1f}"
    return "-" if value is None else str(value)


if __name__ == "__main__":
    sys.exit(main())
