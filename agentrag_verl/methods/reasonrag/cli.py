"""``agentrag-verl reasonrag {generate,pairs,train}``: ReasonRAG data generation and step-level DPO (decisions:
``docs/methods/reasonrag.md#decisions``).

``generate`` searches FlashRAG-layout questions with MCTS + SPRE against a policy behind any OpenAI-compatible
endpoint and the Search-R1 wire-format retriever, and writes RAG-ProGuide (see
:mod:`agentrag_verl.methods.reasonrag.generate`). ``pairs`` rebuilds the pairs and statistics of an output directory
with
other filters (branches without a final answer are pruned unless ``--keep-unanswered``). ``train dpo|sft`` runs TRL
(see :mod:`agentrag_verl.methods.reasonrag.train`; DPO's β defaults to the paper's 0.3).

This module imports nothing heavy: the CLI's parser is built on every ``agentrag-verl`` call.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
from typing import Any

from agentrag_verl.cli_common import (
    API_KEY_HELP,
    add_command_group,
    api_key_env,
    arg_values,
    input_dir,
    judge_option_names,
    non_negative_float,
    non_negative_int,
    output_dir,
    positive_float,
    positive_int,
    report_error,
)

DESCRIPTION = (
    "ReasonRAG (process-supervised agentic RAG): 'generate' builds RAG-ProGuide preference pairs by MCTS + SPRE "
    "(resumable), 'pairs' rebuilds pairs and statistics with other filters, 'train dpo|sft' runs step-level DPO or "
    "the SFT-on-chosen baseline with TRL."
)


def _generate_args(p: argparse.ArgumentParser) -> None:
    from agentrag_verl.methods.reasonrag.mcts import MCTSConfig
    from agentrag_verl.methods.reasonrag.pairs import PairConfig
    from agentrag_verl.methods.reasonrag.policy import PolicyConfig

    m, pc, pa = MCTSConfig(), PolicyConfig(), PairConfig()
    io = p.add_argument_group("input / output")
    io.add_argument(
        "--data", nargs="+", required=True, help="FlashRAG-layout jsonl files (id, question, golden_answers)."
    )
    io.add_argument("--source", nargs="+", help="Source name per --data file (default: the file stems).")
    io.add_argument("--out", required=True, help="Output directory (trees.jsonl, pairs.jsonl, stats.*); resumable.")
    io.add_argument("--limit", type=positive_int, help="Only the first N questions (over all files).")
    io.add_argument("--concurrency", type=positive_int, default=8, help="Questions searched at once (default 8).")
    io.add_argument(
        "--max-failures", type=non_negative_int, default=20, help="Stop after this many failed questions (default 20)."
    )
    io.add_argument("--no-progress", action="store_true", help="No progress bar.")

    # MCTS, policy and pair options are checked by MCTSConfig / PolicyConfig / PairConfig (one place, one message)
    pol = p.add_argument_group("policy (OpenAI-compatible endpoint)")
    pol.add_argument("--policy-url", default=pc.base_url, help=f"API root with /v1 (default {pc.base_url}).")
    pol.add_argument("--policy-model", default=pc.model, help=f"Model name (default {pc.model}, the authors').")
    pol.add_argument("--policy-api", choices=["chat", "completions"], default=pc.api, help="Endpoint kind.")
    pol.add_argument("--policy-tokenizer", help="HF tokenizer whose chat template renders prompts (completions).")
    pol.add_argument(
        "--policy-api-key-env",
        default=pc.api_key_env,
        type=api_key_env,
        help=f"{API_KEY_HELP} (default {pc.api_key_env})",
    )
    pol.add_argument(
        "--temperature", type=non_negative_float, default=pc.temperature, help="Sampling temperature (default 1.0)."
    )
    pol.add_argument("--top-p", type=positive_float, default=pc.top_p, help="Nucleus sampling (default 1.0).")
    pol.add_argument("--max-tokens", type=int, default=pc.max_tokens, help="Tokens per stage output (default 512).")
    pol.add_argument("--no-seed", action="store_true", help="Do not send per-call seeds.")
    pol.add_argument("--policy-concurrency", type=int, default=pc.max_concurrency, help="Requests in flight.")
    pol.add_argument("--policy-timeout", type=float, default=pc.timeout_s, help="Seconds per request attempt.")
    pol.add_argument("--policy-retries", type=int, default=pc.max_retries, help="Retries per request.")

    ret = p.add_argument_group("retriever (Search-R1 wire format)")
    ret.add_argument("--retriever-url", default="http://127.0.0.1:8000/retrieve", help="The /retrieve URL.")
    ret.add_argument("--topk", type=positive_int, default=3, help="Passages per query (ReasonRAG: BGE top-3).")

    mc = p.add_argument_group("MCTS (paper Appendix A; defaults: the authors' code)")
    mc.add_argument("--max-rollouts", type=int, default=m.max_rollouts, help="MCTS iterations per question (64).")
    mc.add_argument("--max-children", type=int, default=m.max_children, help="Children per node (2).")
    mc.add_argument("--max-iter", type=int, default=m.max_iter, help="Stage outputs per trajectory (7).")
    mc.add_argument("--c-uct", type=float, default=m.c_uct, help="Exploration weight of Eq. 5 (1.414).")
    mc.add_argument("--uct-formula", choices=["paper", "ucb1"], default=m.uct_formula, help="Eq. 5 or UCB1.")
    mc.add_argument("--value", choices=["spre", "process_eval"], default=m.value, help="Node values: Eq. 1 or 6.")
    mc.add_argument("--spre-rollouts", type=int, default=m.spre_rollouts, help="k of Eq. 1 per node (4).")
    mc.add_argument("--alpha", type=float, default=m.alpha, help="Step decay of Eq. 1 (0.9).")
    mc.add_argument("--process-eval-fallback", choices=["rollout", "zero"], default=m.process_eval_fallback)
    mc.add_argument("--pair-value", choices=["auto", "q", "tree_spre"], default=m.pair_value)
    mc.add_argument("--seed", type=int, default=m.seed, help="Base of the per-call seeds.")
    mc.add_argument("--keep-rollout-text", action="store_true", help="Store SPRE rollouts' text in the trees.")

    jd = p.add_argument_group("judge (value=process_eval; Figure 14)")
    jd.add_argument("--judge-url", help="Judge API root with /v1.")
    jd.add_argument("--judge-model", help="Judge model name.")
    jd.add_argument("--judge-api-key-env", type=api_key_env, default="OPENAI_API_KEY", help=API_KEY_HELP)
    jd.add_argument("--judge-cache-dir", help="Verdict cache (default: <out>/judge_cache).")

    _pair_args(p, pa)


def _pair_args(p: argparse.ArgumentParser, pa: Any) -> None:
    g = p.add_argument_group("pairs")
    g.add_argument("--min-gap", type=float, default=pa.min_gap, help="Smallest reward gap of a pair (0.01).")
    g.add_argument("--distinct", choices=["content", "text"], default=pa.distinct, help="What must differ.")
    g.add_argument(
        "--keep-unanswered",
        action="store_true",
        help="Keep branches that never reached a final answer (pruned by default, ReasonRAG §2.2.3).",
    )
    g.add_argument("--stats-tokenizer", help="HF tokenizer for the token statistics (default: whitespace words).")


def _pair_config(args: argparse.Namespace) -> Any:
    from agentrag_verl.methods.reasonrag.pairs import PairConfig

    return PairConfig(min_gap=args.min_gap, distinct=args.distinct, prune_unanswered=not args.keep_unanswered)


def _token_counter(name: str | None) -> Any:
    if not name:
        return None
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(name)
    return lambda text: len(tok.encode(text, add_special_tokens=False))


async def _run_generate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from agentrag_verl.methods.reasonrag.generate import GenerateError, generate, load_questions
    from agentrag_verl.methods.reasonrag.mcts import MCTSConfig, MCTSEnv
    from agentrag_verl.methods.reasonrag.policy import PolicyClient, PolicyConfig
    from agentrag_verl.tools.retriever_client import RetrieverClient, RetrieverConfig

    output_dir(args.out, "--out")
    questions = load_questions(args.data, args.source)
    if args.limit is not None:
        questions = questions[: args.limit]
    mcts = MCTSConfig(
        **arg_values(args, *(f.name for f in dataclasses.fields(MCTSConfig)))
    )  # _generate_args: a flag per field
    policy_config = PolicyConfig(
        base_url=args.policy_url,
        model=args.policy_model,
        api=args.policy_api,
        tokenizer=args.policy_tokenizer,
        api_key_env=args.policy_api_key_env,
        temperature=args.temperature,
        top_p=args.top_p,
        max_tokens=args.max_tokens,
        send_seed=not args.no_seed,
        max_concurrency=args.policy_concurrency,
        timeout_s=args.policy_timeout,
        max_retries=args.policy_retries,
    )
    pairs = _pair_config(args)
    policy = PolicyClient(policy_config)
    retriever = RetrieverClient(RetrieverConfig(url=args.retriever_url, topk=args.topk))
    judge = None
    if args.value == "process_eval" or args.judge_url:
        if not (args.judge_url and args.judge_model):
            raise GenerateError("--value process_eval needs --judge-url and --judge-model (an OpenAI-compatible judge)")
        from agentrag_verl.judges import JudgeClient, JudgeConfig

        judge = JudgeClient(
            JudgeConfig(
                base_url=args.judge_url,
                model=args.judge_model,
                api_key_env=args.judge_api_key_env,
                cache_dir=args.judge_cache_dir or str(Path(args.out) / "judge_cache"),
                option_names=judge_option_names(
                    {
                        "base_url": "--judge-url",
                        "model": "--judge-model",
                        "api_key_env": "--judge-api-key-env",
                        "cache_dir": "--judge-cache-dir",
                    }
                ),
            )
        )
        await judge.check()
    # What must match when resuming into the same --out: the search settings and the policy's sampling.
    settings = {
        "mcts": dataclasses.asdict(mcts),
        "policy": {k: getattr(policy_config, k) for k in ("model", "api", "temperature", "top_p", "max_tokens")},
        "topk": args.topk,
    }
    try:
        summary = await generate(
            questions,
            args.out,
            MCTSEnv(policy=policy, retriever=retriever, topk=args.topk, judge=judge),
            mcts,
            pairs,
            concurrency=args.concurrency,
            settings=settings,
            max_failures=args.max_failures if args.max_failures > 0 else None,
            progress=not args.no_progress,
            count_tokens=_token_counter(args.stats_tokenizer),
        )
    finally:
        await policy.aclose()
        await retriever.aclose()
        if judge is not None:
            await judge.aclose()
    print(json.dumps(summary.as_dict()))
    return 1 if summary.failed else 0


def run_generate(args: argparse.Namespace) -> int:
    from agentrag_verl.judges.client import JudgeUnavailableError
    from agentrag_verl.methods.reasonrag.generate import GenerateError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per policy/retriever request otherwise
    try:
        return asyncio.run(_run_generate(args))
    except (GenerateError, ValueError, OSError, JudgeUnavailableError) as exc:
        return report_error("agentrag-verl reasonrag generate", exc)


def run_pairs(args: argparse.Namespace) -> int:
    from agentrag_verl.methods.reasonrag.generate import GenerateError, build_dataset

    try:
        input_dir(args.out, "--out")
        stats = build_dataset(args.out, _pair_config(args), _token_counter(args.stats_tokenizer))
    except (GenerateError, ValueError, OSError) as exc:
        return report_error("agentrag-verl reasonrag pairs", exc)
    print(json.dumps({"pairs": stats["pairs"], "questions": stats["questions"]["total"]}))
    return 0


def run_train(args: argparse.Namespace) -> int:
    from agentrag_verl.methods.reasonrag.train import ProGuideError, main

    try:
        return main([args.mode, *args.rest])
    except ProGuideError as exc:
        return report_error("agentrag-verl reasonrag train", exc)


def add_parser(subparsers: Any) -> None:
    """Register ``reasonrag`` and its subcommands."""
    sub = add_command_group(
        subparsers,
        "reasonrag",
        "COMMAND",
        help="ReasonRAG: MCTS + SPRE preference data (RAG-ProGuide) and step-level DPO.",
        description=DESCRIPTION,
    )
    g = sub.add_parser(
        "generate",
        help="Search questions with MCTS + SPRE and write RAG-ProGuide pairs (resumable).",
        description="Search FlashRAG-layout questions with MCTS + SPRE and write trees.jsonl, pairs.jsonl, stats.",
    )
    _generate_args(g)
    g.set_defaults(func=run_generate)

    from agentrag_verl.methods.reasonrag.pairs import PairConfig

    pr = sub.add_parser("pairs", help="Rebuild pairs.jsonl and stats from an output directory's trees.jsonl.")
    pr.add_argument("--out", required=True, help="The generate output directory.")
    _pair_args(pr, PairConfig())
    pr.set_defaults(func=run_pairs)

    t = sub.add_parser(
        "train",
        help="Step-level DPO (or the SFT-on-chosen baseline) with TRL.",
        description="Runs python -m agentrag_verl.methods.reasonrag.train MODE with the remaining arguments "
        "(TrlParser: "
        "--config recipes/reasonrag/dpo.yaml --pairs out/pairs.jsonl --key value ...).",
    )
    t.add_argument("mode", choices=["dpo", "sft"])
    t.add_argument("rest", nargs=argparse.REMAINDER, help="--config FILE and TRL/DPOConfig overrides.")
    t.set_defaults(func=run_train)
