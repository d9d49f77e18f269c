"""Does training with agentrag-verl make a better search agent? Warm start, then GRPO, on one CPU machine.

SmolLM2-135M-Instruct, HiPRAG format and reward ("over-search only" with the rule-based stand-in judge; the
policy's over-search re-answers greedy, as in eval), the mini-wiki corpus behind the real retriever. Stages
(:mod:`agentrag_verl.demo.pipeline`, cached in ``--work-dir``): eval of the warm start (SFT on the scripted stand-in
teacher's demonstrations), ``--steps`` GRPO steps through verl's ``main_ppo`` (``agentrag-verl train-local``), eval
after RL. Not part of CI (about 50 min on 2 cores with the warm start cached; latest figures in
``benchmarks/README.md``).

Prints, per GRPO step, the training reward and how many trajectories searched on common-knowledge and on corpus
questions (from verl's dump of every trajectory, ``<work-dir>/grpo_bench/rollouts/<step>.jsonl``); the held-out
metrics before and after RL with 95% confidence intervals; then the checks of the learning claim:

1. the mean training reward of the last 5 steps exceeds that of the first 5 by more than 2 standard errors;
2. held-out CEM after RL is not below CEM after the warm start (within the CIs);
3. the share of common-knowledge test questions answered with a search (over-search) is lower after RL, CEM holding.

Usage (after ``make demo``, whose warm start it reuses; otherwise it builds it first)::

    python benchmarks/learning.py
    python benchmarks/learning.py --steps 24 --batch-size 8 --rollout-n 4 --lr 2e-6
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error of the mean."""
    n = len(values)
    m = sum(values) / n
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return m, sd / math.sqrt(n)


def demo_parser(doc: str) -> argparse.ArgumentParser:
    """The options of a benchmark that continues from the demo's warm start (``doc``: the script's docstring):
    ``--work-dir``, shared with ``make demo``, and ``--data-dir``; the script adds its own."""
    from agentrag_verl.eval.data import MINI_WIKI_DIR

    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--work-dir", default="outputs/demo", help="Shared with `make demo`: its warm start is reused.")
    p.add_argument("--data-dir", default=str(MINI_WIKI_DIR))
    return p


def parse_demo_args(p: argparse.ArgumentParser) -> tuple[argparse.Namespace, Any]:
    """Parse ``p`` with the warm start's options added last, set the offline environment of a local run, and return
    the options and the demo's settings for the shared stages (setup, demonstrations, SFT: reused from `make demo`
    when cached) with the warm-start options applied; the benchmark sets its own for evaluation and GRPO."""
    from agentrag_verl.demo.main import add_warm_start_args, apply_warm_start_args, settings_for

    add_warm_start_args(p)
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    s = settings_for(False, Path(args.work_dir).resolve(), Path(args.data_dir).resolve())
    apply_warm_start_args(s, args)
    return args, s


def main() -> int:
    from agentrag_verl.demo import pipeline as P
    from agentrag_verl.demo.main import markdown, reward_curve, stage_table

    p = demo_parser(__doc__)
    p.add_argument("--steps", type=int, default=20, help="GRPO steps (at least 10 for the 5-vs-5 check).")
    p.add_argument(
        "--batch-size",
        type=int,
        default=6,
        help="Prompts per GRPO step (default 6: 24 trajectories, whose mean reward is the per-step figure the "
        "5-vs-5 check compares; at 4 prompts the standard error of that difference was 0.12).",
    )
    p.add_argument("--rollout-n", type=int, default=4, help="GRPO group size.")
    p.add_argument(
        "--lr",
        type=float,
        default=3e-6,
        help="Actor learning rate (default 3e-6; at 1e-5 the warm start stopped searching within 2 steps: "
        "docs/warmstart.md, section 5).",
    )
    p.add_argument(
        "--temperature",
        type=float,
        default=1.0,
        help="Rollout temperature (default 1.0, HiPRAG's; docs/warmstart.md section 5 measures 0.6).",
    )
    p.add_argument("--kl-coef", type=float, default=0.0)
    p.add_argument("--eval-limit", type=int, default=None, help="Test questions per set (default: all).")
    args, s = parse_demo_args(p)
    s.eval_limit = args.eval_limit
    s.grpo_steps, s.grpo_batch_size, s.grpo_rollout_n = args.steps, args.batch_size, args.rollout_n
    s.grpo_lr, s.grpo_kl_coef, s.grpo_temperature = args.lr, args.kl_coef, args.temperature
    walls: dict[str, float] = {}
    t0 = time.perf_counter()

    def mark(name: str, t: float) -> None:
        walls[name] = round(time.perf_counter() - t, 1)
        print(f"[{name}: {walls[name]} s]", flush=True)

    with ExitStack() as stack:
        t = time.perf_counter()
        base, url, judge_url = P.start_services(s, stack)
        mark("setup", t)
        t = time.perf_counter()
        demos = P.demos_stage(s, base, url)
        print(f"demonstrations: kept {demos['kept']} of {demos['trajectories']}; rejected {demos['rejected']}")
        mark("demonstrations", t)
        t = time.perf_counter()
        sft = P.sft_stage(s, base)
        mark("sft", t)
        t = time.perf_counter()
        warm = P.eval_stage("warm_start_bench", Path(sft["model"]), s, url, judge_url)
        mark("eval warm start", t)
        t = time.perf_counter()
        grpo = P.grpo_stage(s, Path(sft["model"]), url, judge_url, name="grpo_bench")
        mark("grpo", t)
        t = time.perf_counter()
        after = P.eval_stage("grpo_bench", Path(grpo["model"]), s, url, judge_url)
        mark("eval after GRPO", t)
    walls["total"] = round(time.perf_counter() - t0, 1)

    curve = reward_curve(grpo)
    rewards = [c["mean"] for c in curve if c["mean"] is not None]
    searches = {r["step"]: r for r in P.rollout_searches(s, "grpo_bench")}

    def searched(r: dict | None, key: str) -> str:
        return f"{r[key][0]}/{r[key][1]}" if r and r[key][1] else "-"

    print("\nGRPO settings:", json.dumps(grpo.get("settings")))
    print("(common right: right answers on common-knowledge questions with / without a search; judged over-search:")
    print(" right, searching ones paid less than the full HiPRAG bonus)")
    print("step  reward_mean  reward_min  reward_max  response_len  searched(common)  searched(corpus)  "
          "common right  judged over-search  wall_s")  # fmt: skip
    for c in curve:
        wall = grpo.get("step_wall_s", {}).get(str(c["step"]), grpo.get("step_wall_s", {}).get(c["step"], "-"))
        r = searches.get(c["step"])
        right = f"{r['right_common'][0]} / {r['right_common'][1]}" if r else "-"
        over = r["over_search_common"] if r else "-"
        print(f"{c['step']:>4}  {c['mean']:>11.4f}  {c['min']:>10.4f}  {c['max']:>10.4f}  "
              f"{c['response_length']:>12.1f}  {searched(r, 'searched_common'):>16}  "
              f"{searched(r, 'searched_corpus'):>16}  {right:>12}  {over:>18}  {wall}")  # fmt: skip
    header, rows = stage_table([warm, after])
    print("\nHeld-out mini-wiki test sets (greedy; mean ±95% CI):")
    print(markdown(header, rows))
    print("CEM by set:", {r["stage"]: r["cem_by_set"] for r in (warm, after)})

    checks = {}
    if len(rewards) >= 10:
        first, last = mean_se(rewards[:5]), mean_se(rewards[-5:])
        diff, se = last[0] - first[0], math.sqrt(first[1] ** 2 + last[1] ** 2)
        checks["reward_rises"] = {"first5": first, "last5": last, "diff": diff, "se": se, "pass": diff > 2 * se}
    cem_w, cem_a = warm["cem"], after["cem"]
    checks["cem_holds"] = {"warm": cem_w, "after": cem_a, "pass": cem_a[0] >= cem_w[0] - (cem_w[1] or 0)}
    os_w, os_a = warm["over_search_common"], after["over_search_common"]
    checks["over_search_drops"] = {"warm": os_w, "after": os_a, "pass": (os_a[0] or 0) < (os_w[0] or 0)}
    print("\nChecks:")
    for name, c in checks.items():
        detail = json.dumps({k: v for k, v in c.items() if k != "pass"})
        print(f"  {name}: {'PASS' if c['pass'] else 'FAIL'}  {detail}")
    print("\nwall time (s):", json.dumps(walls))
    sft_loss = [m.get("train/loss") for _, m in sorted(sft["steps"].items(), key=lambda kv: int(kv[0]))]
    out = {"walls": walls, "curve": curve, "searches": list(searches.values()), "warm": warm, "after": after,
           "checks": checks, "settings": grpo.get("settings"), "demos": demos, "sft_loss": sft_loss}  # fmt: skip
    (s.work_dir / "learning.json").write_text(json.dumps(out, indent=1, default=str))
    print(f"results: {s.work_dir / 'learning.json'}")
    return 0 if all(c["pass"] for c in checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
