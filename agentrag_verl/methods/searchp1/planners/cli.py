"""``agentrag-verl planners generate``: Search-P1 reference planners for a training set (Algorithm 1, Eq. 5).

Example (a vLLM-served planner on this node, K = 3 candidates, retrieval-checked, 64 questions at a time)::

    agentrag-verl planners generate --questions data/searchp1/train.parquet --out data/searchp1/planners.jsonl \\
        --base-url http://127.0.0.1:8001/v1 --model Qwen/Qwen2.5-72B-Instruct --api-key-env none \\
        --num-candidates 3 --retriever-url http://127.0.0.1:8000/retrieve --concurrency 64

Interrupt it at any time and run the same command again: planned questions are skipped. Train with
``+reward.reward_kwargs.planner_cache=data/searchp1/planners.jsonl``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from agentrag_verl.cli_common import (
    API_KEY_HELP,
    add_command_group,
    api_key_env,
    arg_values,
    input_file,
    judge_option_names,
    non_negative_float,
    non_negative_int,
    output_file,
    positive_float,
    positive_int,
    report_error,
)

PROG = "agentrag-verl planners generate"

FLAGS = {
    "base_url": "--base-url",
    "model": "--model",
    "api_key_env": "--api-key-env",
    "max_concurrency": "--max-concurrency",
    "timeout_s": "--timeout",
    "max_retries": "--max-retries",
    "max_tokens": "--max-tokens",
    "temperature": "--temperature",
    "cache_dir": "--cache-dir",
}
"""The flag of each ``JudgeConfig`` field this command sets (any other: ``--judge-option KEY=VALUE``)."""


def _judge_config(args: argparse.Namespace) -> dict[str, Any]:
    import yaml

    cfg: dict[str, Any] = {
        "base_url": args.base_url,
        "model": args.model,
        "api_key_env": args.api_key_env,
        "max_concurrency": args.max_concurrency,
        "timeout_s": args.timeout,
        "max_retries": args.max_retries,
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        # candidates are sampled with their own seeds; a repeated identical request may reuse the cached reply
        "cache": True,
        "cache_dir": args.cache_dir,
        # errors name this command's flags and call the endpoint what it is here
        "label": "Planner LLM",
        "option_names": judge_option_names(FLAGS, "--judge-option"),
    }
    for item in args.judge_option or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--judge-option expects KEY=VALUE, got {item!r}")
        cfg[key.strip()] = yaml.safe_load(value)
    return cfg


async def _run(args: argparse.Namespace) -> int:
    from agentrag_verl.jsonl import JsonlLockedError
    from agentrag_verl.judges import JudgeClient
    from agentrag_verl.judges.client import JudgeUnavailableError
    from agentrag_verl.methods.searchp1.planners.generate import (
        PlannerOptions,
        generate_plans,
        load_questions,
    )

    try:
        output_file(args.out, "--out")
        questions = load_questions(input_file(args.questions, "--questions"))
        if args.limit is not None:
            questions = questions[: args.limit]
        options = PlannerOptions(
            vote=not args.no_vote,
            max_questions_in_flight=args.concurrency,
            **arg_values(
                args, "num_candidates", "candidate_temperature", "correctness", "retriever_url", "retriever_topk"
            ),
        )
        client = JudgeClient.from_config(_judge_config(args))
    except (ValueError, KeyError, OSError) as e:
        return report_error(PROG, e)
    retriever = None
    try:
        try:
            await client.check()
        except JudgeUnavailableError as e:
            return report_error(PROG, e)  # the message names the planner LLM and the flag to fix
        if options.resolved_correctness == "retrieval":
            from agentrag_verl.tools.retriever_client import RetrieverClient, RetrieverConfig

            retriever = RetrieverClient(RetrieverConfig(url=options.retriever_url, topk=options.retriever_topk))
        print(
            f"planning {len(questions)} questions -> {args.out} (K={options.num_candidates}, "
            f"filter={options.resolved_correctness}, vote={'on' if options.vote else 'off'})",
            flush=True,
        )
        try:
            summary = await generate_plans(
                questions, args.out, client, options, retriever=retriever, progress=not args.no_progress
            )
        except JsonlLockedError as e:
            return report_error(PROG, e)
    finally:
        if retriever is not None:
            await retriever.aclose()
        await client.aclose()
    info = summary.as_dict() | {"judge": client.metrics()}
    print(json.dumps(info, indent=1, default=str))
    if summary.failed:
        first = next(iter(summary.failures.items()))
        print(
            f"agentrag-verl planners generate: {summary.failed} question(s) failed (e.g. {first[0]}: {first[1]}); "
            "they were not written: run the same command again to retry them",
            file=sys.stderr,
        )
        return 1
    return 0


def _generate(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args))


def add_parser(subparsers) -> None:
    sub = add_command_group(
        subparsers, "planners", "PLANNERS_COMMAND", help="Search-P1 reference planners (offline, before training)."
    )
    g = sub.add_parser(
        "generate",
        help="Generate the reference-planner cache for a training set (resumable).",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g.add_argument("--questions", required=True, help="train parquet from `agentrag-verl data prepare` (or .jsonl)")
    g.add_argument("--out", required=True, help="cache JSONL (rejected questions go to <stem>.rejected.jsonl)")
    g.add_argument("--limit", type=positive_int, help="only the first N questions")
    llm = g.add_argument_group("planner LLM (OpenAI-compatible)")
    llm.add_argument("--base-url", required=True, help="API root, e.g. http://127.0.0.1:8001/v1")
    llm.add_argument("--model", required=True, help="model name")
    llm.add_argument("--api-key-env", type=api_key_env, default="OPENAI_API_KEY", help=API_KEY_HELP)
    llm.add_argument("--max-concurrency", type=positive_int, default=64, help="HTTP requests in flight (64)")
    llm.add_argument("--timeout", type=positive_float, default=120.0, help="seconds per attempt (120)")
    llm.add_argument("--max-retries", type=non_negative_int, default=4, help="retries on timeouts/429/5xx (4)")
    llm.add_argument("--max-tokens", type=positive_int, default=1024, help="completion tokens per reply (1024)")
    llm.add_argument("--temperature", type=non_negative_float, default=0.0, help="temperature with K = 1 (0)")
    llm.add_argument("--cache-dir", help="persistent reply cache directory (judges client SQLite cache)")
    llm.add_argument("--judge-option", action="append", help="any JudgeConfig field as KEY=VALUE (repeatable)")
    alg = g.add_argument_group("Algorithm 1 / Eq. 5")
    alg.add_argument("--num-candidates", "-k", type=positive_int, default=1, help="K candidates per question (1)")
    alg.add_argument(
        "--candidate-temperature", type=non_negative_float, default=0.7, help="temperature when K > 1 (0.7)"
    )
    alg.add_argument(
        "--correctness",
        choices=["auto", "answer", "retrieval", "none"],
        default="auto",
        help="correctness filter (auto: retrieval with --retriever-url, else answer)",
    )
    alg.add_argument("--retriever-url", help="Search-R1 /retrieve URL for the retrieval filter")
    alg.add_argument("--retriever-topk", type=positive_int, default=3, help="passages per query for the filter (3)")
    alg.add_argument("--no-vote", action="store_true", help="keep the shortest correct candidate instead of voting")
    g.add_argument("--concurrency", type=positive_int, default=32, help="questions in flight (32)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.set_defaults(func=_generate)
