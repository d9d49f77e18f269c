"""Does skipping the search pay on common-knowledge questions? The warm start's two paths, sampled as in GRPO.

For the over-search claim of ``benchmarks/learning.py``: HiPRAG's reward favours answering a common-knowledge question
without a search only where that path is right *and well-formed* about as often as a search is (the process bonus
needs A = F = 1). This samples the demo's warm start on the common-knowledge training questions that GRPO draws
from (``--samples`` per question, at each ``--temperatures`` value; over-search re-answers greedy, as in the GRPO
stage), scores every trajectory with the pipeline's HiPRAG reward, and prints per temperature and path (search / no
search): trajectories, well-formed ones, right ones (CEM), right searching ones judged over-search, and the mean
reward. Not part of CI (about 4 min per temperature on 2 cores); figures in docs/warmstart.md, section 5.

Usage (after ``make demo``, whose warm start it evaluates)::

    python benchmarks/common_paths.py --temperatures 1.0,0.6
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from contextlib import ExitStack
from pathlib import Path


def main() -> int:
    from agentrag_verl.demo import pipeline as P
    from agentrag_verl.demo.main import settings_for
    from agentrag_verl.eval.data import MINI_WIKI_DIR
    from agentrag_verl.eval.harness import read_results

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work-dir", default="outputs/demo", help="The demo's work dir (its warm start: sft/model).")
    p.add_argument("--temperatures", default="1.0,0.6", help="Comma-separated sampling temperatures.")
    p.add_argument("--samples", type=int, default=2, help="Samples per question.")
    p.add_argument(
        "--questions", type=int, default=50, help="Common-knowledge training questions (the demo's GRPO set: 50)."
    )
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    s = settings_for(False, Path(args.work_dir).resolve(), MINI_WIKI_DIR)
    model = s.work_dir / "sft" / "model"
    if not (model / "config.json").exists():
        sys.exit(f"No warm start at {model}: run `make demo` (or benchmarks/learning.py) first.")
    questions = P.load_split(s, "train", args.questions)[P.COMMON_SET]
    data = {P.COMMON_SET: [dataclasses.replace(q, id=f"{q.id}#{k}") for q in questions for k in range(args.samples)]}
    rows = []
    with ExitStack() as stack:
        _, url, judge_url = P.start_services(s, stack)
        for t in [float(x) for x in args.temperatures.split(",")]:
            name = f"common_paths_t{t}"
            P.eval_stage(name, model, s, url, judge_url, datasets=data, temperature=t)
            records = list(read_results(P.eval_results(s, name)).values())
            for path, searched in (("search", True), ("no search", False)):
                rs = [r for r in records if bool(r["n_search"]) == searched]
                scores = [r["rewards"][s.format] for r in rs]
                rows.append({
                    "temperature": t, "path": path, "trajectories": len(rs),
                    "well_formed": sum(bool(r["format_ok"]) for r in rs), "right": int(sum(r["cem"] for r in rs)),
                    "right_judged_over_search": sum(1 for r, x in zip(rs, scores, strict=True)
                                                    if r["cem"] and x.get("hiprag_over_search", 0) > 0),
                    "mean_reward": round(sum(x["score"] for x in scores) / len(rs), 3) if rs else None,
                })  # fmt: skip
    print("| temperature | path | trajectories | well-formed | right (CEM) | right, judged over-search | mean reward |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['temperature']} | {r['path']} | {r['trajectories']} | {r['well_formed']} | {r['right']} | "
              f"{r['right_judged_over_search']} | {r['mean_reward']} |")  # fmt: skip
    (s.work_dir / "common_paths.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
