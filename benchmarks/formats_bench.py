"""Throughput of the trajectory-format checkers and parsers (single core).

Builds realistic trajectories for every format: 1-5 steps, each search returning three ~100-word passages
(top-3 wiki-18 passages, as HiPRAG, Search-P1 and AutoSearch retrieve), reasoning of 20-60 words, queries of
4-10 words. Each callable runs over the same trajectories ``--repeat`` times in this process; the best pass is
reported as trajectories per second.

Usage::

    python benchmarks/formats_bench.py [--n 2000] [--repeat 3] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

from agentrag_verl.formats import Step, Trajectory, available_formats, get_format
from agentrag_verl.methods.autosearch import grammar as autosearch

_VOCAB = (
    "the of and in to was is for on as by with he at from his an were are which this also be has or had first one "
    "their its new after but who not they have her she two been other when there all during into school time may "
    "years more most only over city some world would where later up such used many can state about national out "
    "known university united then made film team season series album band song river county american president "
    "company war born died released directed founded located capital population election league government music "
    "player played award church village game history member family station group north south village published "
    "children father mother career television television director singer actor writer novel book debut record"
).split()

_PASSAGE_WORDS = 100  # wiki-18 passages are 100-word DPR chunks
_DOCS_PER_SEARCH = 3  # top-3 retrieval (HiPRAG, Search-P1, AutoSearch, ReasonRAG)
_MAX_STEPS = 5  # "realistic 1-5 step trajectories"


def _words(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choices(_VOCAB, k=rng.randint(lo, hi)))


def _docs(rng: random.Random) -> str:
    return "\n".join(
        f'Doc {i}(Title: "{_words(rng, 1, 3).title()}") {_words(rng, _PASSAGE_WORDS - 10, _PASSAGE_WORDS + 10)}'
        for i in range(1, _DOCS_PER_SEARCH + 1)
    )


def _trajectory(name: str, rng: random.Random) -> Trajectory:
    n_steps = rng.randint(1, _MAX_STEPS)
    steps: list[Step] = []

    def reasoning() -> str:
        return _words(rng, 20, 60)

    def query() -> str:
        return _words(rng, 4, 10)

    if name == "hiprag":
        for _ in range(n_steps):
            if rng.random() < 0.7:  # HiPRAG's trained models search in most steps (Figure 2b)
                steps.append(Step("search", (0, 0), reasoning(), query(), _docs(rng), conclusion=_words(rng, 5, 20)))
            else:
                steps.append(Step("non_search", (0, 0), reasoning(), conclusion=_words(rng, 5, 20)))
    elif name in ("searchr1", "autosearch"):  # the same tags
        steps = [Step("search", (0, 0), reasoning(), query(), _docs(rng)) for _ in range(n_steps - 1)]
        steps.append(Step("non_search", (0, 0), reasoning()))
    elif name == "multistage":
        steps = [
            Step("search", (0, 0), reasoning() if i == 0 else None, query(), _docs(rng), reflect=reasoning())
            for i in range(n_steps)
        ]
    elif name == "reasonrag":
        steps = [Step("search", (0, 0), reasoning(), query(), evidence=_words(rng, 10, 30)) for _ in range(n_steps - 1)]
        steps.append(Step("non_search", (0, 0), reasoning()))
    elif name == "searchp1":
        steps = [
            Step("search", (0, 0), reasoning() if i == 0 or rng.random() < 0.5 else None, query(), _docs(rng))
            for i in range(n_steps)
        ]
    else:
        raise ValueError(f"Unknown format {name!r}; choose one of {available_formats()}.")
    return Trajectory(steps=tuple(steps), answer=_words(rng, 1, 5))


def make_trajectories(name: str, n: int, seed: int = 0) -> list[str]:
    """``n`` rendered trajectories of format ``name`` (deterministic for a seed)."""
    rng = random.Random(seed)
    render = get_format(name).render
    return [render(_trajectory(name, rng)) for _ in range(n)]


def _throughput(fn: Callable[[str], object], texts: list[str], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for text in texts:
            fn(text)
        best = min(best, time.perf_counter() - start)
    return len(texts) / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="trajectories per format")
    parser.add_argument("--repeat", type=int, default=3, help="passes per callable; the best is reported")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rows = []
    for name in available_formats():
        fmt = get_format(name)
        texts = make_trajectories(name, args.n, args.seed)
        assert all(fmt.is_valid(t) for t in texts), f"benchmark trajectories of {name} must be valid"
        chars = statistics.mean(len(t) for t in texts)
        checks = [("check_format", fmt.check_format), ("parse", fmt.parse)]
        if name == "searchr1":
            checks.append(("step_validity (AutoSearch)", autosearch.step_validity))
        for label, fn in checks:
            rows.append((name, label, chars, _throughput(fn, texts, args.repeat)))

    print(f"{'format':<12} {'callable':<28} {'avg chars':>10} {'trajectories/s (1 core)':>24}")
    for name, label, chars, rate in rows:
        print(f"{name:<12} {label:<28} {chars:>10.0f} {rate:>24,.0f}")


if __name__ == "__main__":
    main()
