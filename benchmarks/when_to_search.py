"""Searching only when needed: what the warm start knows, and a warm start whose no-search path survives sampling.

Issue "searching only when needed", build items 1, 2 and 4, on one CPU machine. HiPRAG's over-search is a search on
a question the *policy* answers right without one, and its process bonus pays only for well-formed trajectories, so
RL can cut needless searches only if the warm start (a) answers its known questions without a search in a form that
survives temperature-1 sampling and (b) still searches what it does not know. The demo's warm start had 8 direct-answer
demonstrations among 58, chosen by what people know; 5 of its 31 sampled no-search trajectories were well-formed
(docs/warmstart.md, section 5). Stages, cached in ``--out-dir`` (the first warm start is the demo's, ``--work-dir``):

1. **probe** the demo's warm start on the common-knowledge training questions (:func:`pipeline.knowledge_stage`:
   greedy + ``--samples`` closed-book answers at temperature 1, the format's own no-search path, paper metric);
2. **a second warm start**: the demo's corpus demonstrations (25 + 25) and direct-answer demonstrations on the first
   ``--known-demos`` common training questions the first warm start *knows* (``PipelineSettings.demo_knowledge``),
   SFT as the demo's;
3. **probe** the second warm start on the test sets: the labelled rows give every question its bucket (known,
   common_unknown, corpus);
4. **eval** on the labelled rows (real retriever, stand-in judge): the second warm start greedy and sampled at
   temperature 1, and the first sampled at temperature 1 (the no-search path before), with metrics per bucket.

Prints the probe's counts, the per-bucket tables and the targets of build item 4: at temperature 1, at least 90% of
the sampled no-search trajectories are well-formed; corpus questions are searched at least 95% of the time (greedy
and sampled). Writes ``<out-dir>/when_to_search.json``. Not part of CI (about 45 min on 2 cores with the demo's warm
start cached); figures in docs/warmstart.md, section 7.

Usage (after ``make demo``)::

    python benchmarks/when_to_search.py
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

DIRECT_WELL_FORMED_MIN = 0.90
"""Build item 4: share of well-formed trajectories among those sampled at temperature 1 without a search."""
CORPUS_SEARCHED_MIN = 0.95
"""Build item 4: share of corpus-only questions answered with a search."""


def pooled_direct(buckets: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Well-formed share of the answers given without a search, pooled over the buckets.

    >>> pooled_direct({"known": {"direct": 3, "direct_format": 1.0}, "corpus": {"direct": 1, "direct_format": 0.0}})
    {'direct': 4, 'well_formed': 3, 'share': 0.75}
    """
    n = sum(b.get("direct") or 0 for b in buckets.values())
    ok = round(sum((b.get("direct") or 0) * (b.get("direct_format") or 0.0) for b in buckets.values()))
    return {"direct": n, "well_formed": ok, "share": round(ok / n, 4) if n else None}


def targets(greedy: dict[str, Any], sampled: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Build item 4's checks on the second warm start's eval rows (greedy and at temperature 1)."""
    direct = pooled_direct(sampled["buckets"])
    out = {"direct_path_survives_sampling": {**direct, "min": DIRECT_WELL_FORMED_MIN,
                                             "pass": (direct["share"] or 0.0) >= DIRECT_WELL_FORMED_MIN}}  # fmt: skip
    for name, row in (("greedy", greedy), ("sampled", sampled)):
        searched = row["buckets"].get("corpus", {}).get("searched")
        out[f"corpus_searched_{name}"] = {"searched": searched, "min": CORPUS_SEARCHED_MIN,
                                          "pass": (searched or 0.0) >= CORPUS_SEARCHED_MIN}  # fmt: skip
    return out


def main() -> int:
    from learning import demo_parser, parse_demo_args

    from agentrag_verl.demo import pipeline as P
    from agentrag_verl.eval.data import load_datasets
    from agentrag_verl.eval.report import BUCKET_NOTE, bucket_table

    p = demo_parser(__doc__)
    p.add_argument("--out-dir", default="outputs/when_to_search", help="The second warm start, probes and evals.")
    p.add_argument(
        "--known-demos",
        type=int,
        default=30,
        help="Direct-answer demonstrations: the first N common training questions the first warm start knows.",
    )
    p.add_argument("--samples", type=int, default=4, help="Probe: sampled closed-book answers per question.")
    p.add_argument("--eval-limit", type=int, default=None, help="Test questions per set (default: all).")
    args, s = parse_demo_args(p)
    s.eval_limit = args.eval_limit
    s2 = dataclasses.replace(s, work_dir=Path(args.out_dir).resolve(), train_limit=None,
                             demo_limits={**s.demo_limits, P.COMMON_SET: args.known_demos})  # fmt: skip
    walls: dict[str, float] = {}
    t0 = time.perf_counter()

    def mark(name: str, t: float) -> None:
        walls[name] = round(time.perf_counter() - t, 1)
        print(f"[{name}: {walls[name]} s]", flush=True)

    with ExitStack() as stack:
        t = time.perf_counter()
        base, url, judge_url = P.start_services(s, stack)
        P.demos_stage(s, base, url)
        warm1 = Path(P.sft_stage(s, base)["model"])
        mark("first warm start", t)
        t = time.perf_counter()
        probe1 = P.knowledge_stage(s2, warm1, "train", "warm1_train", sets=[P.COMMON_SET], samples=args.samples)
        mark("probe first warm start (train)", t)
        s2.demo_knowledge = probe1["out"]
        t = time.perf_counter()
        demos = P.demos_stage(s2, base, url)
        sft2 = P.sft_stage(s2, base)
        warm2 = Path(sft2["model"])
        mark("second warm start", t)
        t = time.perf_counter()
        probe2 = P.knowledge_stage(s2, warm2, "test", "warm2_test", limit=s2.eval_limit, samples=args.samples)
        mark("probe second warm start (test)", t)
        labelled = load_datasets([probe2["out"]], split="test")
        rows = {}
        for name, model, temperature in (("warm2_greedy", warm2, 0.0), ("warm2_t1", warm2, 1.0),
                                         ("warm1_t1", warm1, 1.0)):  # fmt: skip
            t = time.perf_counter()
            rows[name] = P.eval_stage(name, model, s2, url, judge_url, datasets=labelled, temperature=temperature)
            mark(f"eval {name}", t)
    walls["total"] = round(time.perf_counter() - t0, 1)

    print("\nKnowledge probe, first warm start, common training questions:", json.dumps(probe1["datasets"]))
    print("Knowledge probe, second warm start, test sets:", json.dumps(probe2["datasets"]))
    n_demos = {ds: len(qs) for ds, qs in P.demo_questions(s2).items()}
    print(f"Second warm start: demonstrations per set {n_demos}; kept {demos['kept']} of {demos['trajectories']}")
    print(f"\nBy bucket (labels of the second warm start's probe). {BUCKET_NOTE}")
    print(bucket_table({name: row["buckets"] for name, row in rows.items()}, label="eval"))
    checks = targets(rows["warm2_greedy"], rows["warm2_t1"])
    before = pooled_direct(rows["warm1_t1"]["buckets"])
    print(
        f"\nFirst warm start at T=1: {before['well_formed']} of {before['direct']} no-search trajectories well-formed"
    )
    print("Checks (second warm start):")
    for name, c in checks.items():
        print(f"  {name}: {'PASS' if c['pass'] else 'FAIL'}  {json.dumps({k: v for k, v in c.items() if k != 'pass'})}")
    buckets = {b: m["n"] for b, m in rows["warm2_greedy"]["buckets"].items()}
    print(f"bucket sizes: {buckets} (the experiment needs at least 30 each)")
    print("wall time (s):", json.dumps(walls))
    out = {"command": "python benchmarks/when_to_search.py " + " ".join(sys.argv[1:]), "probe_warm1_train": probe1,
           "probe_warm2_test": probe2, "demonstrations": n_demos, "evals": rows, "checks": checks,
           "warm1_t1_direct": before, "bucket_sizes": buckets, "walls": walls}  # fmt: skip
    path = s2.work_dir / "when_to_search.json"
    path.write_text(json.dumps(out, indent=1, default=str))
    print(f"results: {path}")
    return 0 if all(c["pass"] for c in checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
