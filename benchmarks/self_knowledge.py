"""Does the policy know what it knows? What its first choice, its confidence and its hidden state say about it.

Issue "searching only when needed" asks, where the effect does not appear, what stops it. HiPRAG's bonus can cut
only the searches the policy could have left out, and the policy can leave them out only if something in it tells
the questions it knows from those it does not, at the point where it chooses whether to search. This benchmark
measures that on a warm start and its knowledge probe (``agentrag-verl data knowledge``, the labels
``benchmarks/when_to_search.py`` makes), over the common-knowledge questions, known (closed-book rate at or above the
probe's threshold) against not known, by the area under the ROC curve (AUROC: 0.5 is chance, 1 a perfect split;
± 95% CI, Hanley and McNeil's standard error) of three scores:

1. **the choice**: :func:`when_to_search.first_choice`, the probability of the direct opening over the searching
   one: what the policy does;
2. **the confidence**: the log-probability of its own greedy closed-book answer (the probe's greedy record, the
   answer's tokens under teacher forcing): a signal a policy could use without knowing the gold;
3. **the representation**: a linear probe (L2-regularised logistic regression) on the hidden state of the last
   token before the choice (:func:`when_to_search.decisions`), one layer, scored out of fold (5 folds,
   stratified; the layer and the L2 weight chosen by 4-fold CV inside each training part, never on the scored
   fold): whether what it knows is readable, linearly, where it decides. With it, a learning curve: the same probe
   fitted on 18, 35, 70 or 140 labelled questions (5 draws each), the sizes SFT's common demonstrations come in.

Each score is also read on the clear cases alone (closed-book rate at least 0.8 against at most 0.2), since a rate
from 5 answers puts 0.4 and 0.6 on either side of the threshold by chance; and the linear probe on the kind of
question (common against corpus), which it should separate, as a check of the probe itself.

Usage (after ``benchmarks/when_to_search.py``)::

    python benchmarks/self_knowledge.py --model outputs/when_to_search_r10/sft/model \\
        --probe outputs/when_to_search_r10/knowledge/warm2_train outputs/when_to_search_r10/knowledge/warm2_test \\
        --out outputs/when_to_search_r10/self_knowledge.json

Writes ``--out``. Not part of CI (a few minutes on 2 cores for 450
questions); figures in docs/warmstart.md, section 7.16.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from when_to_search import SharedPrefixLM, decisions

from agentrag_verl.data.knowledge import KNOWLEDGE_KEY

COMMON = "common"
CLEAR = (0.8, 0.2)
"""Closed-book rates of the clear cases: known at or above the first, not known at or below the second."""
LAYER_STRIDE = 3
"""Every third layer is a candidate of the linear probe (and the last)."""
L2_GRID = (1e-3, 1e-2, 1e-1, 1.0)
LEARNING_CURVE = (18, 35, 70, 140)
FOLDS, INNER_FOLDS, DRAWS = 5, 4, 5


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """The probability that a random positive scores above a random negative, ties counting one half
    (Mann-Whitney U / (n_pos n_neg)).

    >>> auroc([0.9, 0.8, 0.3, 0.1], [True, False, True, False])
    0.75
    >>> auroc([0.5, 0.5], [True, False])
    0.5
    """
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    if not pos or not neg:
        raise ValueError(f"AUROC needs both classes: {len(pos)} positive, {len(neg)} negative")
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def auroc_ci(scores: Sequence[float], labels: Sequence[bool]) -> dict[str, Any]:
    """AUROC with Hanley and McNeil's (1982) standard error, its 95% CI half-width, and the class sizes.

    >>> auroc_ci([0.9, 0.8, 0.3, 0.1], [True, False, True, False])["se"]
    0.2574
    """
    a, n_pos = auroc(scores, labels), sum(map(bool, labels))
    n_neg = len(labels) - n_pos
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    se = math.sqrt((a * (1 - a) + (n_pos - 1) * (q1 - a * a) + (n_neg - 1) * (q2 - a * a)) / (n_pos * n_neg))
    return {"auroc": round(a, 4), "se": round(se, 4), "ci95": round(1.96 * se, 4), "positive": n_pos, "negative": n_neg}


def fit_logistic(x: Any, y: Any, l2: float) -> tuple[Any, Any]:
    """L2-regularised logistic regression (mean log-loss + ``l2`` |w|^2) on standardised ``x`` [n, d] (torch), by
    L-BFGS; returns (w, b)."""
    import torch

    w = torch.zeros(x.shape[1], dtype=x.dtype, requires_grad=True)
    b = torch.zeros((), dtype=x.dtype, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=100, line_search_fn="strong_wolfe")

    def closure() -> Any:
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(x @ w + b, y) + l2 * (w * w).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach(), b.detach()


def probe_scores(x: Any, y: Any, train: Sequence[int], test: Sequence[int], l2: float) -> list[float]:
    """Fit on rows ``train`` of ``x`` (standardised by their mean and std), return the logits of rows ``test``."""
    xt = x[list(train)]
    mu, sd = xt.mean(0), xt.std(0) + 1e-6
    w, b = fit_logistic((xt - mu) / sd, y[list(train)], l2)
    return (((x[list(test)] - mu) / sd) @ w + b).tolist()


def stratified_folds(labels: Sequence[bool], k: int, seed: int) -> list[list[int]]:
    """``k`` folds of the indices of ``labels``, each class dealt round-robin after a seeded shuffle.

    >>> [sorted(f) for f in stratified_folds([True, True, False, False, False, False], 2, 0)]
    [[0, 2, 5], [1, 3, 4]]
    """
    rng = random.Random(seed)
    folds: list[list[int]] = [[] for _ in range(k)]
    offset = 0
    for cls in (True, False):
        idx = [i for i, y in enumerate(labels) if bool(y) == cls]
        rng.shuffle(idx)
        for j, i in enumerate(idx):
            folds[(offset + j) % k].append(i)
        offset += len(idx)
    return folds


def choose(hidden: Any, y: Any, rows: Sequence[int], layers: Sequence[int], seed: int) -> tuple[int, float]:
    """The (layer, l2) with the best mean inner-CV AUROC over ``rows`` only."""
    labels = [bool(y[i]) for i in rows]
    inner = [[rows[j] for j in f] for f in stratified_folds(labels, INNER_FOLDS, seed)]
    best, best_auc = (layers[-1], L2_GRID[0]), -1.0
    splits = [([i for i in rows if i not in set(f)], f) for f in inner]
    for layer in layers:
        for l2 in L2_GRID:
            aucs = []
            for train, f in splits:
                aucs.append(auroc(probe_scores(hidden[layer], y, train, f, l2), [bool(y[i]) for i in f]))
            if sum(aucs) / len(aucs) > best_auc:
                best, best_auc = (layer, l2), sum(aucs) / len(aucs)
    return best


def linear_probe(hidden: Any, labels: Sequence[bool], seed: int = 0) -> dict[str, Any]:
    """Out-of-fold logits of the nested-CV linear probe (module docstring, score 3) on ``hidden`` [layers, n, d], the
    configurations each fold chose, and the learning curve at the one chosen most often (ties: the earliest fold's)."""
    import torch

    y = torch.tensor([float(v) for v in labels], dtype=hidden.dtype)
    layers = sorted({*range(0, hidden.shape[0], LAYER_STRIDE), hidden.shape[0] - 1})
    n = len(labels)
    scores = [0.0] * n
    chosen = []
    folds = stratified_folds(labels, FOLDS, seed)
    for k, fold in enumerate(folds):
        rows = [i for i in range(n) if i not in set(fold)]
        layer, l2 = choose(hidden, y, rows, layers, seed + 1 + k)
        chosen.append((layer, l2))
        for i, s in zip(fold, probe_scores(hidden[layer], y, rows, fold, l2), strict=True):
            scores[i] = s
    (layer, l2), _ = Counter(chosen).most_common(1)[0]  # ties: the earliest fold's
    curve = {}
    rng = random.Random(seed)
    for size in LEARNING_CURVE:
        aucs = []
        for _ in range(DRAWS):
            draw = [0.0] * n
            for fold in folds:
                rows = [i for i in range(n) if i not in set(fold)]
                if size >= len(rows):
                    break
                pos = [i for i in rows if labels[i]]
                k_pos = max(1, round(size * len(pos) / len(rows)))
                sub = rng.sample(pos, k_pos) + rng.sample([i for i in rows if not labels[i]], size - k_pos)
                for i, s in zip(fold, probe_scores(hidden[layer], y, sub, fold, l2), strict=True):
                    draw[i] = s
            else:
                aucs.append(auroc(draw, labels))
        if aucs:
            curve[str(size)] = {"auroc_mean": round(sum(aucs) / len(aucs), 4), "draws": [round(a, 4) for a in aucs]}
    return {"scores": scores, "chosen": [{"layer": a, "l2": b} for a, b in chosen], "curve_at": {"layer": layer,
            "l2": l2}, "learning_curve": curve}  # fmt: skip


def answer_confidence(model: Path, records: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Per greedy closed-book record, the log-probability of the answer's tokens (between the last ``<answer>`` and
    the next ``</answer>`` in its response ids) given the exact ids before them; ``-inf`` without an answer."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    open_ids, close_ids = (tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("<answer>", "</answer>"))

    def find(seq: list[int], sub: list[int], start: int = 0, last: bool = False) -> int:
        hits = [i for i in range(start, len(seq) - len(sub) + 1) if seq[i : i + len(sub)] == sub]
        return (hits[-1] if last else hits[0]) if hits else -1

    spans = {}  # key: (ids up to the answer's end, index of its first token)
    for key, r in records.items():
        prompt, response = list(r["prompt_ids"]), list(r["response_ids"])
        a = find(response, open_ids, last=True)
        z = find(response, close_ids, a + len(open_ids)) if a >= 0 else -1
        if a >= 0 and z > a + len(open_ids):
            spans[key] = (prompt + response[:z], len(prompt) + a + len(open_ids))
    lm = SharedPrefixLM(model, [ids for ids, _ in spans.values()]) if spans else None
    out = {}
    for key in records:
        if key not in spans:
            out[key] = -math.inf
            continue
        ids, start = spans[key]
        logp = lm(ids).logits[0, start - len(lm.prefix) - 1 : -1].log_softmax(-1)
        out[key] = logp.gather(1, lm.torch.tensor(ids[start:])[:, None]).sum().item()
    return out


def load_probe(dirs: Sequence[Path], format_name: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The labelled questions of every dataset of the probe folders (``<dir>/<dataset>/<split>.jsonl``, read by
    :func:`~agentrag_verl.data.flashrag.read_questions`), and their greedy closed-book records
    (``<dir>/greedy/<format>/demos.jsonl``), both by ``dataset/id``."""
    from agentrag_verl.data.flashrag import read_questions

    rows, greedy = {}, {}
    for d in dirs:
        for path in sorted(d.glob("*/*.jsonl")):
            for q in read_questions(path, dataset=path.parent.name, split=path.stem):
                if KNOWLEDGE_KEY not in (q.metadata.get("metadata") or {}):
                    raise ValueError(
                        f"{path}: row {q.id} has no metadata.{KNOWLEDGE_KEY}; give folders written by `agentrag-verl "
                        "data knowledge` (or benchmarks/when_to_search.py's probes)"
                    )
                rows[q.key] = q
        demos = d / "greedy" / format_name / "demos.jsonl"
        if not demos.exists():
            raise FileNotFoundError(f"{demos}: the probe's greedy answers; is --format the probe's ({format_name})?")
        for line in demos.read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            greedy[f"{r['dataset']}/{r['id']}"] = r
    if not any(k.startswith(f"{COMMON}/") for k in rows):
        raise ValueError(f"no {COMMON!r} rows in {[str(d) for d in dirs]}: the probe must cover common questions")
    return rows, greedy


def label(question: Any) -> dict[str, Any]:
    """A probed question's knowledge label (``rate``, ``known``, ...)."""
    return question.metadata["metadata"][KNOWLEDGE_KEY]


def read_scores(scores: dict[str, Sequence[float]], keys: Sequence[str], rows: dict[str, Any]) -> dict:
    """AUROC ± CI of each score for known against not known on ``keys``, and on the clear cases alone."""
    rate = [label(rows[k])["rate"] for k in keys]
    known = [label(rows[k])["known"] for k in keys]
    clear = [i for i, r in enumerate(rate) if r >= CLEAR[0] or r <= CLEAR[1]]
    return {
        name: {"all": auroc_ci(s, known), "clear": auroc_ci([s[i] for i in clear], [known[i] for i in clear])}
        for name, s in scores.items()
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, required=True, help="the policy the probe labelled (a HF model folder)")
    p.add_argument("--probe", type=Path, nargs="+", required=True, help="knowledge probe output folders")
    p.add_argument("--format", default="hiprag", help="the probe's format (default hiprag)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True, help="output JSON")
    args = p.parse_args(argv)
    rows, greedy = load_probe(args.probe, args.format)
    keys = sorted(rows)
    common = [k for k in keys if k.startswith(f"{COMMON}/")]
    missing = [k for k in common if k not in greedy]
    if missing:
        raise ValueError(f"{len(missing)} common questions lack a greedy record (first: {missing[0]}): rerun the probe")
    questions = {k: rows[k].question for k in keys}
    print(f"{len(common)} common questions ({sum(label(rows[k])['known'] for k in common)} known), "
          f"{len(keys) - len(common)} corpus questions; model {args.model}", flush=True)  # fmt: skip
    import torch

    decided = decisions(args.model, questions, args.format)
    hidden = torch.stack([decided[k][1] for k in keys], 1)  # [layers + 1, questions, hidden size]
    choice = {k: decided[k][0] for k in common}
    confidence = answer_confidence(args.model, {k: greedy[k] for k in common})
    ci = [keys.index(k) for k in common]
    known = [bool(label(rows[k])["known"]) for k in common]
    is_common = [k.startswith(f"{COMMON}/") for k in keys]
    probe = linear_probe(hidden[:, ci], known, args.seed)
    kind = linear_probe(hidden, is_common, args.seed)
    result = {
        "model": str(args.model),
        "probe": [str(d) for d in args.probe],
        "questions": {"common": len(common), "known": sum(known), "corpus": len(keys) - len(common)},
        "known_vs_not": read_scores(
            {
                "choice": [choice[k] for k in common],
                "confidence": [confidence[k] for k in common],
                "linear_probe": probe["scores"],
            },
            common,
            rows,
        ),
        "linear_probe": {k: v for k, v in probe.items() if k != "scores"},
        "kind_linear_probe": auroc_ci(kind["scores"], is_common),
    }
    args.out.write_text(json.dumps(result, indent=1))
    print("| score | AUROC, known vs not (all) | clear cases only |\n|---|---|---|")
    for name, r in result["known_vs_not"].items():
        a, c = r["all"], r["clear"]
        print(f"| {name} | {a['auroc']} ± {a['ci95']} ({a['positive']}/{a['negative']}) | "
              f"{c['auroc']} ± {c['ci95']} ({c['positive']}/{c['negative']}) |")  # fmt: skip
    print(f"linear probe, common vs corpus: {result['kind_linear_probe']['auroc']}; folds chose "
          f"{probe['chosen']}; learning curve at {probe['curve_at']}: "
          + ", ".join(f"{n}: {v['auroc_mean']}" for n, v in probe["learning_curve"].items()))  # fmt: skip
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
