"""Searching only when needed: what the warm start knows, and a warm start whose no-search path survives sampling.

Issue "searching only when needed", build items 1, 2 and 4, on one CPU machine. HiPRAG's over-search is a search on
a question the *policy* answers right without one, and its process bonus pays only for well-formed trajectories, so
RL can cut needless searches only if the warm start (a) answers its known questions without a search in a form that
survives temperature-1 sampling and (b) still searches what it does not know. The demo's warm start had 8 direct-answer
demonstrations among 58, chosen by what people know; 5 of its 31 sampled no-search trajectories were well-formed
(docs/warmstart.md, section 5). Stages, cached in ``--out-dir`` (the first warm start is the demo's, ``--work-dir``):

1. **probe** the demo's warm start on the common-knowledge training questions (:func:`pipeline.knowledge_stage`:
   greedy + ``--samples`` closed-book answers at temperature 1, the format's own no-search path, paper metric);
2. **a second warm start**: searching demonstrations on the first ``--corpus-demos`` questions of each corpus set
   (25: the demo's) and direct-answer demonstrations on the first ``--known-demos`` common training questions the
   first warm start *knows* (``PipelineSettings.demo_knowledge``), SFT as the demo's for ``--sft-epochs`` (1), the
   choice to search counted ``--choice-weight`` times in its loss (1);
3. **probe** the second warm start on the test sets: the labelled rows give every question its bucket (known,
   common_unknown, corpus);
4. **eval** on the labelled rows (real retriever, stand-in judge): the second warm start greedy and sampled at
   temperature 1, and the first sampled at temperature 1 (the no-search path before), with metrics per bucket.

Prints the probe's counts, the per-bucket tables and the targets of build item 4: at temperature 1, at least 90% of
the sampled no-search trajectories are well-formed, over at least 30 of them; corpus questions are searched at least
95% of the time (greedy and sampled); each bucket has at least 30 test questions.

With ``--rl``, build item 5 (HiPRAG's Table 2 at our size): from the second warm start, HiPRAG's recipe
(``recipes/hiprag/run_grpo.sh``, local profile, the sizes of ``benchmarks/learning.py``) twice, with the same data,
steps and seeds: the baseline reward (λp = 0) and HiPRAG's (λp = 0.4), both with both detectors (the stand-in judge's
under-search verifier on). The fixed set's common questions alternate known and unknown ones, or ``--rl-known`` of
them are known (:func:`pipeline.rl_questions`), known to the policy RL starts from: the second warm start, probed on
the common training questions too (``--rl-labels``). It prints the search rate per bucket at every step, evaluates
both on the labelled test rows (greedy, with the judged metrics: HiPRAG's OSR and USR by the stand-in judge), plots
``search_rate_per_step.png`` and ``accuracy_vs_searches.png``, and checks the issue's claims: the share of known
questions answered with a search falls below the warm start's by more than 2 SE (paired over questions); OSR below the
baseline's; CEM on known questions holds; corpus questions still searched at least 95% of the time; overall CEM not
below the baseline's; USR not above it. Each RL model is also evaluated at temperature 1, judged (one sample per
question): the share of known questions searched against the second warm start's sampled eval and the baseline's, and
OSR and USR, which sampling defines where greedy decoding takes no step without a search (a supplement, reported but
not in the exit status: :func:`sampled_checks`; ``--no-sampled`` leaves out every eval at temperature 1 and
build item 4's sampled targets). ``--rl-runs hiprag`` trains HiPRAG's run alone, a scouting run that fits one
session: it checks the claims against the warm start and fails ``every_claim_checked``. For the warm start and
each RL model it also reads the first choice itself, the probability of the direct opening over the searching
one on every labelled question (:func:`first_choice`), which shows a shift too small to flip a greedy choice, and
the same for the warm start on the questions of its own direct and searching demonstrations (whether SFT fitted
the choice where shown). ``--facts-in-corpus`` has the evals and RL runs retrieve from the mini-wiki plus a passage
for each common fact it lacks (:func:`facts_corpus`), the setting of the paper, where a search on a question the
policy knows finds the answer too; with it, ``--unknown-demos`` gives the second warm start searching
demonstrations on common training questions the first does not know as well (:func:`pipeline.searched_common`),
so that SFT shows the choice to search depending on what the policy knows, not on the kind of question. Each
run's training reward is checked as ``benchmarks/learning.py`` checks it (last 5 steps against the first 5, paired
over the fixed set's questions). ``--reanswer-mode closed_book`` has the
policy re-answer through its no-search path (``docs/methods/hiprag.md#decisions``), in HiPRAG's run and the judged
evals; the baseline trains with the paper's re-answers, which do not enter its reward at λp = 0.

Writes ``<out-dir>/when_to_search.json``. Not part of CI (about 45 min on 2 cores with the demo's warm start cached;
``--rl`` adds about 100 min per run: 20 steps of 230-280 s, then two judged evals); figures in docs/warmstart.md,
section 7.

Usage (after ``make demo``)::

    python benchmarks/when_to_search.py          # probes, second warm start, bucket evals
    python benchmarks/when_to_search.py --rl     # then λp = 0 and λp = 0.4
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from learning import (
    DESIGNS,
    Walls,
    add_rl_args,
    configure_rl,
    demo_parser,
    mean_se,
    parse_demo_args,
    print_checks,
    reward_rise,
    set_reanswers,
)

DIRECT_WELL_FORMED_MIN = 0.90
"""Build item 4: share of well-formed trajectories among those sampled at temperature 1 without a search."""
DIRECT_SAMPLED_MIN = 30
"""No-search trajectories the share above needs: fewer do not measure it (run 2 passed on 9 of 9; docs/warmstart.md
section 7.3)."""
BUCKET_MIN = 30
"""Held-out questions per bucket the experiment needs (the issue's "at least 30 questions per bucket")."""
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


def targets(greedy: dict[str, Any], sampled: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Build item 4's checks on the second warm start's eval rows (greedy and at temperature 1; without the
    sampled eval, the greedy checks only)."""
    out = {}
    if sampled:
        direct = pooled_direct(sampled["buckets"])
        survives = direct["direct"] >= DIRECT_SAMPLED_MIN and (direct["share"] or 0.0) >= DIRECT_WELL_FORMED_MIN
        out["direct_path_survives_sampling"] = {**direct, "min": DIRECT_WELL_FORMED_MIN,
                                                "min_direct": DIRECT_SAMPLED_MIN, "pass": survives}  # fmt: skip
    sizes = {b: m["n"] for b, m in greedy["buckets"].items()}
    out["buckets_of_30"] = {"sizes": sizes, "min": BUCKET_MIN,
                            "pass": len(sizes) == 3 and min(sizes.values()) >= BUCKET_MIN}  # fmt: skip
    for name, row in (("greedy", greedy), ("sampled", sampled)):
        if row is None:
            continue
        searched = row["buckets"].get("corpus", {}).get("searched")
        out[f"corpus_searched_{name}"] = {"searched": searched, "min": CORPUS_SEARCHED_MIN,
                                          "pass": (searched or 0.0) >= CORPUS_SEARCHED_MIN}  # fmt: skip
    return out


LAMBDAS = {"baseline": 0.0, "hiprag": 0.4}
"""λp of the two RL runs (HiPRAG Eq. 3; 0 = outcome and format only)."""


FACTS_TAG = "_facts"
"""With ``--facts-in-corpus``: the suffix of the eval and RL stages, plots and results file, so that they are cached
apart from those retrieving from the mini-wiki alone (same out-dir, same warm start)."""


def facts_corpus(data_dir: Path, out: Path) -> dict[str, Any]:
    """Write to ``out`` the corpus of ``data_dir`` plus one passage per common-knowledge question (training and test)
    that no passage states (empty ``supporting_ids``): titled with its first gold answer, the question and then
    "The answer is <gold>.". The mini-wiki states most common facts nowhere, so a search on them retrieves nothing
    that helps and the outcome reward alone pays for answering them directly; with every fact retrievable, as in
    Wikipedia, a search on a question the policy knows is right as often as the direct answer, and only HiPRAG's
    process bonus pays for leaving it out (docs/warmstart.md, section 7.14). Returns ``{"corpus", "passages",
    "added"}``.
    """
    from agentrag_verl.data.corpus import Passage, load_corpus, load_qa, write_corpus

    passages = load_corpus(data_dir / "corpus.jsonl")
    added = [
        Passage(id=f"fact_common_{split}_{row['id']}", title=row["golden_answers"][0],
                text=f"{row['question']} The answer is {row['golden_answers'][0]}.")
        for split in ("train", "test")
        if (data_dir / "common" / f"{split}.jsonl").is_file()
        for row in load_qa(data_dir / "common" / f"{split}.jsonl")
        if not (row.get("metadata") or {}).get("supporting_ids")
    ]  # fmt: skip
    write_corpus(passages + added, out)
    return {"corpus": str(out), "passages": len(passages) + len(added), "added": len(added)}


def training_settings(s: Any, paper_tokens: int) -> Any:
    """The settings the RL run of ``s`` (``PipelineSettings``) trains with. At λp = 0 the re-answers do not enter
    the reward, so that run trains with the paper's (``prompt``, ``paper_tokens`` long) whatever ``--reanswer-mode``:
    one cached baseline serves both modes. The evals keep ``s``'s.

    >>> from agentrag_verl.demo.pipeline import PipelineSettings
    >>> s = PipelineSettings("w", "d", reanswer_mode="closed_book", reanswer_max_tokens=96)
    >>> s.reward_kwargs = {"lambda_p": 0.0}
    >>> t = training_settings(s, 48)
    >>> (t.reanswer_mode, t.reanswer_max_tokens, s.reanswer_mode)
    ('prompt', 48, 'closed_book')
    >>> training_settings(dataclasses.replace(s, reward_kwargs={"lambda_p": 0.4}), 48).reanswer_mode
    'closed_book'
    """
    if s.reward_kwargs.get("lambda_p") != 0:  # unset: the method's λp (HiPRAG's 0.4)
        return s
    return dataclasses.replace(s, reanswer_mode="prompt", reanswer_max_tokens=paper_tokens)


def known_searched(records: dict[str, list[dict[str, Any]]], before: str, after: str) -> dict[str, Any]:
    """Change in the share of known questions answered with a search from eval ``before`` to eval ``after``, paired
    over the known questions both answered; ``pass`` when it falls by more than 2 SE."""
    from agentrag_verl.eval.metrics import bucket_of

    a, b = ({f"{r['dataset']}/{r['id']}": float(r["n_search"] > 0) for r in records[name] if bucket_of(r) == "known"}
            for name in (before, after))  # fmt: skip
    shared = sorted(set(a) & set(b))
    diff, se = mean_se([b[k] - a[k] for k in shared]) if len(shared) > 1 else (0.0, float("inf"))
    share = {name: sum(v[k] for k in shared) / len(shared) if shared else None for name, v in ((before, a), (after, b))}
    return {**share, "diff": diff, "se": se, "questions": len(shared), "pass": diff < -2 * se}


def judged_rates(records: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """HiPRAG's OSR below the baseline's and its USR not above it (Eq. 2), from the eval records of ``baseline`` and
    ``hiprag``; a rate neither eval can measure (no step of its kind) fails. Empty without both runs."""
    from agentrag_verl.eval.metrics import aggregate

    if not {"baseline", "hiprag"} <= records.keys():
        return {}
    averages = {n: aggregate(records[n])["average"] for n in ("baseline", "hiprag")}
    osr = {n: averages[n].get("hiprag_osr") for n in ("baseline", "hiprag")}
    usr = {n: averages[n].get("hiprag_usr") for n in ("baseline", "hiprag")}
    return {
        "osr_below_baseline": {**osr, "pass": None not in osr.values() and osr["hiprag"] < osr["baseline"]},
        "usr_not_above_baseline": {**usr, "pass": None not in usr.values() and usr["hiprag"] <= usr["baseline"]},
    }


EXPERIMENT_CLAIMS = ("known_searched_drops", "known_cem_holds", "corpus_still_searched", "osr_below_baseline",
                     "cem_not_below_baseline", "usr_not_above_baseline")  # fmt: skip
"""The issue's claims, as :func:`experiment_checks` names them."""


def experiment_checks(records: dict[str, list[dict[str, Any]]], rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The issue's claims from the greedy eval ``records`` and stage ``rows`` of ``warm``, ``baseline`` (λp = 0) and
    ``hiprag`` (λp = 0.4), all on the same labelled test rows. With one run (``--rl-runs``), the claims it can
    check: HiPRAG's against the warm start, or none."""
    from agentrag_verl.demo.pipeline import mean_ci
    from agentrag_verl.eval.metrics import bucket_of

    def known_cem(name: str) -> list[float]:
        return [float(r["cem"] or 0.0) for r in records[name] if bucket_of(r) == "known"]

    if "hiprag" not in records:
        return {}
    rates = judged_rates(records)
    cem_w, ci_w = mean_ci(known_cem("warm"))
    cem_h, _ = mean_ci(known_cem("hiprag"))
    corpus = rows["hiprag"]["buckets"].get("corpus", {}).get("searched")
    checks = {
        "known_searched_drops": known_searched(records, "warm", "hiprag"),
        "known_cem_holds": {"warm": [cem_w, ci_w], "hiprag": cem_h,
                            "pass": cem_h is not None and cem_w is not None and cem_h >= cem_w - (ci_w or 0.0)},
        "corpus_still_searched": {"searched": corpus, "min": CORPUS_SEARCHED_MIN,
                                  "pass": (corpus or 0.0) >= CORPUS_SEARCHED_MIN},
    }  # fmt: skip
    if rates:
        cem_b, cem_a = rows["baseline"]["cem"], rows["hiprag"]["cem"]
        checks |= {"osr_below_baseline": rates["osr_below_baseline"],
                   "cem_not_below_baseline": {"baseline": cem_b, "hiprag": cem_a,
                                              "pass": cem_a[0] >= cem_b[0] - (cem_b[1] or 0)},
                   "usr_not_above_baseline": rates["usr_not_above_baseline"]}  # fmt: skip
    return checks


def sampled_checks(records: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """A supplement to :func:`experiment_checks` at temperature 1 (one sample per question), from the eval records of
    ``warm`` (the second warm start), ``baseline`` and ``hiprag``, the RL runs' judged. Greedy decoding shows a
    change of path only where it flips the likelier opening; sampling shows the share moving below that, and it takes
    steps without a search, so USR is defined. Reported, not part of the exit status. With one run, what it can
    check (as :func:`experiment_checks`)."""
    if "hiprag" not in records:
        return {}
    checks = {"known_searched_drops": known_searched(records, "warm", "hiprag")}
    if "baseline" in records:
        checks["known_searched_below_baseline"] = known_searched(records, "baseline", "hiprag")
    return checks | judged_rates(records)


def decision_points(
    tokenizer: Any, questions: dict[str, str], format_name: str, prompt_name: str | None = None
) -> dict[str, str]:
    """Per question (``questions``: text by key), the text after which the policy chooses whether to search: the
    policy prompt through ``tokenizer``'s chat template, then the start the method's two teacher openings share
    (HiPRAG: ``"<think>\\n<step>\\n<reasoning>"``)."""
    from agentrag_verl.formats import get_format
    from agentrag_verl.warmstart.teacher import teacher_templates

    shared = teacher_templates(format_name).openings[0]
    prompt = get_format(format_name).policy_prompt(prompt_name)
    return {
        key: tokenizer.apply_chat_template(prompt.messages(q), add_generation_prompt=True, tokenize=False) + shared
        for key, q in questions.items()
    }


class SharedPrefixLM:
    """A causal LM scoring many token sequences that share a long prefix (the policy prompt before the question:
    387 of HiPRAG's 412 tokens) with that prefix's keys and values computed once, then cropped back to it before
    each sequence (about 15 times faster on a CPU than a forward pass over each whole sequence)."""

    def __init__(self, model: Path, sequences: list[list[int]]) -> None:
        import os

        import torch
        from transformers import AutoModelForCausalLM

        self.torch = torch
        self.lm = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
        prefix = os.path.commonprefix(sequences)[: min(map(len, sequences)) - 1]  # each keeps a token of its own
        self.prefix = list(prefix)
        self._held = self.prefix  # the tokens the cache holds
        with torch.no_grad():
            self.cache = self.lm(torch.tensor([self.prefix]), use_cache=True).past_key_values if prefix else None

    def __call__(self, ids: list[int], keep: int | None = None, hidden: bool = False) -> Any:
        """The model's output on ``ids`` past their first ``keep`` tokens (default: the prefix), which must be the
        cache's: ``logits[i]`` predicts ``ids[keep + i + 1]``. The cache is cropped to those ``keep`` tokens first and
        holds all of ``ids`` after, so the next call may continue this one (``keep`` up to ``len(ids)``)."""
        keep = len(self.prefix) if keep is None else keep
        if keep > len(self._held) or ids[:keep] != self._held[:keep]:
            raise ValueError(f"the sequence does not continue the {keep} cached tokens")
        if self.cache is not None:
            self.cache.crop(keep)
        with self.torch.no_grad():
            out = self.lm(self.torch.tensor([ids[keep:]]), past_key_values=self.cache, use_cache=True,
                          output_hidden_states=hidden)  # fmt: skip
        self.cache, self._held = out.past_key_values, list(ids)
        return out


def decisions(
    model: Path, questions: dict[str, str], format_name: str, prompt_name: str | None = None
) -> dict[str, tuple[float, Any]]:
    """Per question: :func:`first_choice`'s probability, and the hidden state of the last token before the choice
    at every layer, embeddings first (a tensor [layers + 1, hidden size])."""
    from transformers import AutoTokenizer

    from agentrag_verl.warmstart.teacher import teacher_templates

    _, direct, search = teacher_templates(format_name).openings
    tokenizer = AutoTokenizer.from_pretrained(model)
    texts = decision_points(tokenizer, questions, format_name, prompt_name)
    heads = {k: tokenizer(t, add_special_tokens=False)["input_ids"] for k, t in texts.items()}
    lm = SharedPrefixLM(model, list(heads.values()))
    out = {}
    for key, head in heads.items():
        first = lm(head, hidden=True)
        state = lm.torch.stack([h[0, -1] for h in first.hidden_states])
        logp = []
        for opening in (direct, search):
            ids = tokenizer(texts[key] + opening, add_special_tokens=False)["input_ids"]
            if ids[: len(head)] != head:
                raise ValueError(f"{model}: the tokenizer merges the opening {opening!r} into the prompt's last token")
            rest = ids[len(head) :]
            scores = first.logits[0, -1:].log_softmax(-1)
            if len(rest) > 1:
                scores = lm.torch.cat([scores, lm(ids[:-1], keep=len(head)).logits[0].log_softmax(-1)])
            logp.append(scores.gather(1, lm.torch.tensor(rest)[:, None]).sum().item())
        out[key] = (1.0 / (1.0 + math.exp(logp[1] - logp[0])), state)
    return out


def first_choice(
    model: Path, questions: dict[str, str], format_name: str, prompt_name: str | None = None
) -> dict[str, float]:
    """The probability that ``model`` opens a trajectory the way its direct-answer demonstrations do rather than the
    way its searching ones do, per question (``questions``: text by key): ``p_d / (p_d + p_s)``, with ``p_d`` and
    ``p_s`` the probabilities of the two openings of the method's teacher templates after their shared prefix, up to
    their first slot (HiPRAG: "This is common knowledge, ..." against "I do not know this, ..."), given the question in
    the policy prompt. Greedy decoding takes the direct path only where this exceeds one half, and a sampled eval
    sees it once per question; this is the decision itself, on every question, so a shift too small to flip a greedy
    choice shows, and a decision that does not depend on the question shows as the same value in every bucket."""
    return {key: p for key, (p, _) in decisions(model, questions, format_name, prompt_name).items()}


def first_choice_table(choices: dict[str, dict[str, float]], records: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean :func:`first_choice` per model and bucket, and each model's change from the first (the warm start),
    paired over the bucket's questions (mean, SE)."""
    from agentrag_verl.eval.metrics import bucket_of

    buckets: dict[str, list[str]] = {}
    for r in records:
        buckets.setdefault(bucket_of(r) or "unlabelled", []).append(f"{r['dataset']}/{r['id']}")
    first = next(iter(choices))
    return {
        name: {
            b: {
                "n": len(keys),
                "p_direct": round(sum(p[k] for k in keys) / len(keys), 4),
                **({} if name == first else {"change": [round(x, 4) for x in mean_se([p[k] - choices[first][k]
                                                                                        for k in keys])]}),
            }
            for b, keys in sorted(buckets.items())
        }
        for name, p in choices.items()
    }  # fmt: skip


def plot_experiment(
    curves: dict[str, list[dict[str, Any]]], rows: dict[str, dict[str, Any]], out: Path, tag: str = ""
) -> list[Path]:
    """``search_rate_per_step<tag>.png`` (per run and bucket: share of trajectories that searched, per step) and
    ``accuracy_vs_searches<tag>.png`` (per eval and bucket: CEM against searches per question)."""
    from agentrag_verl.eval.report import _pyplot

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for run, steps in curves.items():
        style = "-" if run == "hiprag" else "--"
        for bucket in ("known", "common_unknown", "corpus"):
            points = [(c["step"], c["searched_by_bucket"][bucket]) for c in steps
                      if bucket in c.get("searched_by_bucket", {})]  # fmt: skip
            if points:
                ax.plot([x for x, _ in points], [k / n for _, (k, n) in points], style, marker="o",
                        label=f"{run} (λp={LAMBDAS[run]}): {bucket}")  # fmt: skip
    ax.set(xlabel="training step", ylabel="trajectories with a search", ylim=(-0.05, 1.05))
    ax.legend(fontsize=7)
    paths = [out / f"search_rate_per_step{tag}.png"]
    fig.savefig(paths[0], dpi=120, bbox_inches="tight")
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, row in rows.items():
        for bucket, m in row["buckets"].items():
            ax.scatter(m["search_depth"], 100 * m["cem"], label=f"{name}: {bucket}")
    ax.set(xlabel="searches per question", ylabel="CEM (%)")
    ax.legend(fontsize=7)
    paths.append(out / f"accuracy_vs_searches{tag}.png")
    fig.savefig(paths[1], dpi=120, bbox_inches="tight")
    plt.close("all")
    return paths


def main() -> int:
    from agentrag_verl.cli_common import non_negative_int, positive_int
    from agentrag_verl.demo import pipeline as P
    from agentrag_verl.demo.main import reward_curve, set_count
    from agentrag_verl.eval.data import load_datasets
    from agentrag_verl.eval.harness import read_results
    from agentrag_verl.eval.report import BUCKET_NOTE, bucket_table
    from agentrag_verl.warmstart.teacher import plan_from_row

    def searching(q: Any) -> bool:  # whether a demonstration's plan searches
        return plan_from_row(q.question, q.golden_answers, q.metadata).needs_search

    p = demo_parser(__doc__)
    p.add_argument("--out-dir", default="outputs/when_to_search", help="The second warm start, probes and evals.")
    p.add_argument(
        "--known-demos",
        type=int,
        default=30,
        help="Direct-answer demonstrations: the first N common training questions the first warm start knows.",
    )
    p.add_argument(
        "--corpus-demos",
        type=non_negative_int,
        default=25,
        help="Searching demonstrations per corpus set (single-hop, multi-hop) of the second warm start.",
    )
    p.add_argument("--sft-epochs", type=positive_int, default=1, help="SFT epochs of the second warm start.")
    p.add_argument(
        "--choice-weight",
        type=positive_int,
        default=1,
        help="SFT of the second warm start: how many times each demonstration's choice to search (its direct or "
        "searching opening) counts in the loss (docs/warmstart.md, section 7.11).",
    )
    p.add_argument("--samples", type=int, default=4, help="Probe: sampled closed-book answers per question.")
    p.add_argument("--eval-limit", type=int, default=None, help="Test questions per set (default: all).")
    p.add_argument("--rl", action="store_true", help="Then the two RL runs, λp = 0 and λp = 0.4 (module docstring).")
    p.add_argument(
        "--rl-runs",
        nargs="+",
        choices=list(LAMBDAS),
        default=list(LAMBDAS),
        help="With --rl, which of the two runs to train (default both; one checks only the claims it can: HiPRAG's "
        "against the warm start).",
    )
    p.add_argument(
        "--sampled",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Evaluate the warm starts and the RL models at temperature 1 too (--no-sampled: greedy only, about "
        "6 minutes less per model; build item 4's sampled targets are then not checked).",
    )
    p.add_argument(
        "--facts-in-corpus",
        action="store_true",
        help="The evals and RL runs retrieve from the mini-wiki plus a passage stating each common-knowledge fact it "
        "lacks (facts_corpus): a search on a known question then pays as the direct answer does. The warm starts and "
        "probes are the same; the evals, runs, plots and results file are named with the suffix _facts.",
    )
    p.add_argument(
        "--unknown-demos",
        type=non_negative_int,
        default=0,
        help="With --facts-in-corpus: the second warm start also gets searching demonstrations on this many common "
        "training questions the first warm start does not know (the teacher searches the question and concludes from "
        "the passage stating its fact; its demonstrations retrieve from the facts corpus), so its choice to search is "
        "shown to depend on what it knows, not on the kind of question (docs/warmstart.md, section 7.15). Use a new "
        "--out-dir: the warm start differs.",
    )
    add_rl_args(p)
    p.add_argument(
        "--rl-known",
        type=non_negative_int,
        default=None,
        help="Known questions among the fixed set's common ones (default: known and unknown in turn); at most the "
        "known training questions left without a demonstration.",
    )
    p.add_argument(
        "--rl-set",
        type=set_count,
        action="append",
        default=[],
        metavar="SET=N",
        help="The fixed set's questions of one set (repeatable; default 10 of each of common, single_hop, multi_hop), "
        "e.g. common=20 single_hop=5 multi_hop=5: more groups on common questions a step. --batch-size must divide "
        "their sum.",
    )
    p.add_argument(
        "--rl-labels",
        choices=("warm2", "warm1"),
        default="warm2",
        help="Whose probe of the common training questions says which are known in RL (the fixed set's mix, the "
        "buckets of its rollouts): the second warm start's, the policy RL starts from (default; one more probe), or "
        "the first's, whose knowledge chose the demonstrations (runs 4-6 of docs/warmstart.md).",
    )
    args, s = parse_demo_args(p)
    if unknown_sets := {name for name, _ in args.rl_set} - {P.COMMON_SET, *P.CORPUS_SETS}:
        p.error(f"--rl-set names {sorted(unknown_sets)}; the sets are {P.COMMON_SET}, {', '.join(P.CORPUS_SETS)}")
    if args.unknown_demos and not args.facts_in_corpus:
        p.error("--unknown-demos needs --facts-in-corpus: the mini-wiki states 282 of the 381 common facts nowhere, so "
                "the teacher's searches on unknown common questions would find nothing to conclude")  # fmt: skip
    s.eval_limit = args.eval_limit
    corpus = {ds: args.corpus_demos for ds in P.CORPUS_SETS}
    s2 = dataclasses.replace(s, work_dir=Path(args.out_dir).resolve(), train_limit=None, sft_epochs=args.sft_epochs,
                             sft_choice_weight=args.choice_weight, demo_unknown_searches=args.unknown_demos,
                             demo_limits={**s.demo_limits, **corpus, P.COMMON_SET: args.known_demos})  # fmt: skip
    set_reanswers(s2, args)  # the warm start's judged eval re-answers as the RL runs do
    tag = FACTS_TAG if args.facts_in_corpus else ""
    walls = Walls()
    with ExitStack() as stack:
        t = time.perf_counter()
        base, url, judge_url = P.start_services(s, stack)
        facts = None
        P.demos_stage(s, base, url)
        warm1 = Path(P.sft_stage(s, base)["model"])
        walls.mark("first warm start", t)
        t = time.perf_counter()
        probe1 = P.knowledge_stage(s2, warm1, "train", "warm1_train", sets=[P.COMMON_SET], samples=args.samples)
        walls.mark("probe first warm start (train)", t)
        s2.demo_knowledge = probe1["out"]
        rl_runs = {}
        for run in args.rl_runs if args.rl else ():
            lambda_p = LAMBDAS[run]
            s3 = dataclasses.replace(s2, reward_kwargs={"lambda_p": lambda_p, "under_search_detector": True},
                                     grpo_known_per_set=args.rl_known,
                                     grpo_set_questions=dict(args.rl_set))  # fmt: skip
            try:
                configure_rl(s3, args, DESIGNS["hiprag"]["grpo"], ppo=False)
            except ValueError as e:
                p.error(str(e))
            rl_runs[run] = s3

        def check_fixed_set() -> None:  # both runs share it; --rl-known may ask for more known ones than are left
            try:
                P.training_parquets(next(iter(rl_runs.values())))
            except ValueError as e:
                p.error(str(e))

        if rl_runs and args.rl_labels == "warm1":  # checked now rather than after the second warm start
            check_fixed_set()
        eval_url = url  # the evals' and RL runs' retriever
        if args.facts_in_corpus:
            facts = facts_corpus(s.data_dir, s2.work_dir / "facts" / "corpus.jsonl")
            eval_url = P.start_retriever(Path(facts["corpus"]), s2.work_dir / "facts" / "index", s2.work_dir / "logs",
                                         stack, name="retriever_facts")  # fmt: skip
        t = time.perf_counter()
        demos = P.demos_stage(s2, base, eval_url if args.unknown_demos else url)
        sft2 = P.sft_stage(s2, base)
        warm2 = Path(sft2["model"])
        walls.mark("second warm start", t)
        t = time.perf_counter()
        probe2 = P.knowledge_stage(s2, warm2, "test", "warm2_test", limit=s2.eval_limit, samples=args.samples)
        walls.mark("probe second warm start (test)", t)
        probe2_train = None
        if rl_runs and args.rl_labels == "warm2":
            t = time.perf_counter()
            probe2_train = P.knowledge_stage(s2, warm2, "train", "warm2_train", sets=[P.COMMON_SET],
                                             samples=args.samples)  # fmt: skip
            walls.mark("probe second warm start (train)", t)
            for s3 in rl_runs.values():
                s3.grpo_knowledge = probe2_train["out"]
            check_fixed_set()
        labelled = load_datasets([probe2["out"]], split="test")
        rows = {}
        evals = [("warm2_greedy", warm2, 0.0)] + [("warm2_t1", warm2, 1.0), ("warm1_t1", warm1, 1.0)] * args.sampled
        for name, model, temperature in evals:
            t = time.perf_counter()
            rows[name] = P.eval_stage(name + tag, model, s2, eval_url, judge_url, datasets=labelled,
                                      temperature=temperature, judged=args.rl and temperature == 0)  # fmt: skip
            walls.mark(f"eval {name}", t)
        runs: dict[str, Any] = {}
        for run, s3 in rl_runs.items():
            t = time.perf_counter()
            rl = P.grpo_stage(training_settings(s3, s.reanswer_max_tokens), warm2, eval_url, judge_url, name=run + tag)
            walls.mark(f"rl {run}", t)
            t = time.perf_counter()
            after = P.eval_stage(run + tag, Path(rl["model"]), s3, eval_url, judge_url, datasets=labelled, judged=True)
            walls.mark(f"eval {run}", t)
            sampled = None
            if args.sampled:
                t = time.perf_counter()
                sampled = P.eval_stage(f"{run}_t1{tag}", Path(rl["model"]), s3, eval_url, judge_url,
                                       datasets=labelled, temperature=1.0, judged=True)  # fmt: skip
                walls.mark(f"eval {run}_t1", t)
            searches = P.rollout_searches(s3, run + tag)
            rewards = [c["mean"] for c in reward_curve(rl) if c["mean"] is not None]
            rise = reward_rise(rewards, {c["step"]: c for c in searches}, paired=args.fixed_set)
            runs[run] = {"settings": s3, "train": rl, "after": after, "sampled": sampled, "curve": searches,
                         "reward_rise": rise}  # fmt: skip
        t = time.perf_counter()
        labelled_records = list(read_results(P.eval_results(s2, "warm2_greedy" + tag)).values())
        test_questions = {f"{r['dataset']}/{r['id']}": r["question"] for r in labelled_records}
        models = {"warm": warm2, **{run: Path(r["train"]["model"]) for run, r in runs.items()}}
        # the warm start also on its own demonstrations' questions: did SFT fit the choice where it was shown?
        demo_sets = P.demo_questions(s2)
        kinds = (("direct", [P.COMMON_SET], False), ("searching common", [P.COMMON_SET], True),
                 ("searching", P.CORPUS_SETS, True))  # fmt: skip
        shown = {kind: {q.key: q.question for ds in sets for q in demo_sets.get(ds, []) if searching(q) == searched}
                 for kind, sets, searched in kinds}  # fmt: skip
        demo_texts = {key: text for texts in shown.values() for key, text in texts.items()}
        choices = {name: first_choice(m, test_questions | (demo_texts if name == "warm" else {}), s2.format,
                                      s2.prompt_name) for name, m in models.items()}  # fmt: skip
        first_choices = first_choice_table(choices, labelled_records)
        for kind, texts in shown.items():
            if texts:  # none with --known-demos 0
                p_shown = [choices["warm"][key] for key in texts]
                first_choices["warm"][f"{kind} demonstrations"] = {
                    "n": len(texts),
                    "p_direct": round(sum(p_shown) / len(p_shown), 4),
                }
        walls.mark("first choice", t)
    walls.finish()

    print("\nKnowledge probe, first warm start, common training questions:", json.dumps(probe1["datasets"]))
    print("Knowledge probe, second warm start, test sets:", json.dumps(probe2["datasets"]))
    if facts:
        print(f"Evals and RL retrieve from {facts['corpus']}: {facts['passages']} passages, {facts['added']} of them "
              "added to state a common-knowledge fact")  # fmt: skip
    if probe2_train:
        print("Knowledge probe, second warm start, common training questions:", json.dumps(probe2_train["datasets"]))
    n_demos = {ds: len(qs) for ds, qs in demo_sets.items()}
    print(f"Second warm start: demonstrations per set {n_demos}; kept {demos['kept']} of {demos['trajectories']}")
    print(f"\nBy bucket (labels of the second warm start's probe). {BUCKET_NOTE}")
    print(bucket_table({name: row["buckets"] for name, row in rows.items()}, label="eval"))
    checks = targets(rows["warm2_greedy"], rows.get("warm2_t1"))
    before = pooled_direct(rows["warm1_t1"]["buckets"]) if args.sampled else None
    if before:
        print(f"\nFirst warm start at T=1: {before['well_formed']} of {before['direct']} no-search trajectories "
              "well-formed")  # fmt: skip
    print_checks(checks, "Checks (second warm start)")
    print("\nP(direct opening) at the first step, mean per bucket (change from the warm start, paired: mean, SE):")
    for name, by_bucket in first_choices.items():
        print(f"  {name}: " + "; ".join(f"{b} {v['p_direct']:.3f}" + (f" ({v['change'][0]:+.3f}, {v['change'][1]:.4f})"
                                        if "change" in v else "") for b, v in by_bucket.items()))  # fmt: skip
    buckets = checks["buckets_of_30"]["sizes"]
    experiment: dict[str, Any] = {}
    if runs:
        print("\nsearch rate per step and bucket (searched / trajectories):")
        for run, r in runs.items():
            for c in r["curve"]:
                print(
                    f"  {run} step {c['step']:>2}: "
                    + ", ".join(f"{b} {k}/{n}" for b, (k, n) in sorted(c.get("searched_by_bucket", {}).items()))
                )
        final = {"warm": rows["warm2_greedy"], **{run: r["after"] for run, r in runs.items()}}
        print(bucket_table({name: row["buckets"] for name, row in final.items()}, label="eval"))

        def eval_records(stages: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
            return {
                name: list(read_results(P.eval_results(s2, stage + tag)).values()) for name, stage in stages.items()
            }

        records = eval_records({"warm": "warm2_greedy", **{run: run for run in runs}})
        rises = {f"reward_rises_{run}": r["reward_rise"] for run, r in runs.items() if r["reward_rise"]}
        records_t1 = {}
        if args.sampled:
            sampled = {"warm": rows["warm2_t1"], **{run: r["sampled"] for run, r in runs.items()}}
            print("\nSampled at temperature 1, one answer per question:")
            print(bucket_table({name: row["buckets"] for name, row in sampled.items()}, label="eval (T=1)"))
            records_t1 = eval_records({"warm": "warm2_t1", **{run: f"{run}_t1" for run in runs}})
        experiment = {
            "checks": {**experiment_checks(records, final), **rises},
            "sampled_checks": sampled_checks(records_t1),
            "plots": [
                str(x) for x in plot_experiment({k: r["curve"] for k, r in runs.items()}, final, s2.work_dir, tag)
            ],
            "runs": {
                run: {
                    "curve": r["curve"],
                    "after": r["after"],
                    "sampled": r["sampled"],
                    "reward_kwargs": r["settings"].reward_kwargs,
                    "settings": r["train"].get("settings"),
                }
                for run, r in runs.items()
            },
        }
        print_checks(experiment["checks"], "Checks (HiPRAG's RL against the warm start and the λp = 0 baseline)")
        if experiment["sampled_checks"]:
            print_checks(
                experiment["sampled_checks"], "The same at temperature 1 (a supplement, not in the exit status)"
            )
        checks.update(experiment["checks"])
        if missing := [c for c in EXPERIMENT_CLAIMS if c not in checks]:  # --rl-runs left a run out
            print(f"  not checked (--rl-runs {' '.join(args.rl_runs)}): {', '.join(missing)}")
            checks["every_claim_checked"] = {"not_checked": missing, "pass": False}
    print("wall time (s):", json.dumps(walls))
    out = {"command": "python benchmarks/when_to_search.py " + " ".join(sys.argv[1:]), "probe_warm1_train": probe1,
           "probe_warm2_test": probe2, "probe_warm2_train": probe2_train, "demonstrations": n_demos, "evals": rows,
           "checks": checks, "warm1_t1_direct": before, "first_choice": first_choices, "bucket_sizes": buckets,
           "experiment": experiment, "facts_corpus": facts, "walls": walls}  # fmt: skip
    path = s2.work_dir / f"when_to_search{tag}.json"
    path.write_text(json.dumps(out, indent=1, default=str))
    print(f"results: {path}")
    return 0 if all(c["pass"] for c in checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
