"""``agentrag-verl eval``: evaluate a policy served by an OpenAI-compatible endpoint through our agent loops.

Example (vLLM policy, our retriever, two FlashRAG test sets, two formats, judge metrics and rewards)::

    agentrag-verl eval --base-url http://127.0.0.1:8000/v1 --model policy --tokenizer Qwen/Qwen2.5-3B-Instruct \\
        --retriever-url http://127.0.0.1:8001/retrieve --data data/nq/test.jsonl --data data/hotpotqa/test.jsonl \\
        --format searchr1 --format hiprag --out outputs/eval \\
        --judge-base-url http://127.0.0.1:8002/v1 --judge-model judge --rewards all

Rerunning the same command resumes (finished questions are skipped). Exit codes: 0 done, every requested metric
computed for every question; 1 some questions failed, or a judged metric could not be computed for them (the last
line counts them by cause; rerun to retry them); 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from agentrag_verl.cli_common import (
    API_KEY_HELP,
    api_key_env,
    arg_values,
    judge_option_names,
    model_or_hub_id,
    non_negative_float,
    non_negative_int,
    output_dir,
    plain_name,
    positive_float,
    positive_int,
    report_error,
)

__all__ = ["add_parser", "parse_options", "config_from_args", "runner_config", "check_args", "quiet_known_warnings"]

PLOT_METRICS = ("em", "cem", "f1", "judge_acc")
JUDGE_FLAGS = {"base_url": "--judge-base-url", "model": "--judge-model", "api_key_env": "--judge-api-key-env"}
"""The flag of each ``JudgeConfig`` field this command sets (any other: ``--judge-option KEY=VALUE``)."""
RUNNER_FLAGS = (
    "tokenizer",
    "retriever_url",
    "api_key_env",
    "prompt_length",
    "response_length",
    "temperature",
    "prompt_name",
)
"""The ``RunnerConfig`` fields set by the flag of the same name, in ``eval`` and ``demos generate``."""


def parse_options(pairs: list[str] | None, what: str) -> dict[str, Any]:
    """``["a=1", "b.c=x"]`` -> ``{"a": 1, "b": {"c": "x"}}``; values are parsed as YAML scalars.

    >>> parse_options(["budget=2", "hiprag.lambda_p=0.6", "name=x"], "--loop-option")
    {'budget': 2, 'hiprag': {'lambda_p': 0.6}, 'name': 'x'}
    """
    import yaml

    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"{what} {pair!r}: expected key=value")
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = yaml.safe_load(raw) if raw else ""
    return out


def quiet_known_warnings() -> None:
    """Silence verl's per-trajectory notice that a model type (e.g. llama) has no special chat-token builder (it
    falls back to the generic one, which is what the loops use); it would print once per question."""
    logging.getLogger("verl.utils.tokenizer.continuous_token_wiring").setLevel(logging.ERROR)


def _formats(values: list[str] | None) -> list[str]:
    from agentrag_verl.registry import methods

    out: list[str] = []
    for value in values or [methods()[0].name]:  # the first method: the baseline
        out += [v.strip() for v in value.split(",") if v.strip()]
    return out


def _rewards(value: str | None) -> list[str]:
    from agentrag_verl.eval.rewards import design_formats

    if not value or value == "none":
        return []
    if value == "all":
        return list(design_formats())
    return [v.strip() for v in value.split(",") if v.strip()]


def check_args(args: argparse.Namespace) -> None:
    """Every argument the parser's types cannot check alone, before anything is loaded, contacted or written.

    Raises:
        ValueError, OSError: The message names the flag, what is wrong and the valid choices.
    """
    from agentrag_verl.eval.rewards import design_formats
    from agentrag_verl.registry import methods

    known_formats, designs = sorted(m.name for m in methods()), sorted(design_formats())
    for flag, url in (
        ("--base-url", args.base_url),
        ("--retriever-url", args.retriever_url),
        ("--judge-base-url", args.judge_base_url),
    ):
        if url is not None and not url.startswith(("http://", "https://")):
            raise ValueError(f"{flag} {url!r} is not an http(s) URL; e.g. http://127.0.0.1:8000/v1")
    formats = [f.lower() for f in _formats(args.format)]
    unknown = [f for f in formats if f not in known_formats]
    if unknown or not formats:
        raise ValueError(f"Unknown or missing format(s) {unknown}; choose from {known_formats} (--format).")
    unknown = [d for d in _rewards(args.rewards) if d not in designs]
    if unknown:
        raise ValueError(f"Unknown reward design(s) {unknown}; choose from {designs}, all or none (--rewards).")
    if args.judge_base_url and not args.judge_model:
        raise ValueError("--judge-base-url needs --judge-model (the model name the judge endpoint serves).")
    if args.top_p > 1:
        raise ValueError(f"--top-p {args.top_p} is above 1; nucleus sampling keeps a probability mass in (0, 1].")
    plain_name(args.split, "--split")
    output_dir(args.out, "--out")
    model_or_hub_id(args.tokenizer, "--tokenizer")


def runner_config(args: argparse.Namespace, loop_options: dict[str, Any], **endpoint: Any) -> Any:
    """The :class:`~agentrag_verl.eval.runner.RunnerConfig` of the flags ``eval`` and ``demos generate`` share
    (:data:`RUNNER_FLAGS`), the parsed ``--loop-option`` values and ``endpoint`` (``base_url``, ``model``, ...)."""
    from agentrag_verl.eval.runner import RunnerConfig

    return RunnerConfig(loop_options=loop_options, **arg_values(args, *RUNNER_FLAGS), **endpoint)


def config_from_args(args: argparse.Namespace) -> Any:
    """The :class:`~agentrag_verl.eval.harness.EvalConfig` of parsed arguments."""
    from agentrag_verl.eval.harness import EvalConfig

    loop_options = parse_options(args.loop_option, "--loop-option")
    if args.topk is not None:
        loop_options["retriever_topk"] = args.topk
    if args.budget is not None:
        loop_options["budget"] = args.budget
    runner = runner_config(args, loop_options, base_url=args.base_url, model=args.model, top_p=args.top_p)
    judge = None
    if args.judge_base_url:
        if not args.judge_model:
            raise ValueError("--judge-base-url needs --judge-model (the model name the judge endpoint serves).")
        judge = {"base_url": args.judge_base_url, "model": args.judge_model, "api_key_env": args.judge_api_key_env}
        judge.update(parse_options(args.judge_option, "--judge-option"))
        judge.setdefault("option_names", judge_option_names(JUDGE_FLAGS, "--judge-option"))
    return EvalConfig(
        runner=runner,
        formats=_formats(args.format),
        out_dir=args.out,
        concurrency=args.concurrency,
        judge=judge,
        rewards=_rewards(args.rewards),
        reward_kwargs=parse_options(args.reward_option, "--reward-option"),
        question_retries=args.question_retries,
        overwrite=args.overwrite,
        progress=not args.no_progress,
        plot_metric=args.plot_metric,
    )


def run(args: argparse.Namespace) -> int:
    import asyncio

    from rich.console import Console

    from agentrag_verl.eval.data import MINI_WIKI_DIR, load_datasets
    from agentrag_verl.eval.harness import EndpointError, EvalIncomplete, evaluate
    from agentrag_verl.eval.report import rich_table
    from agentrag_verl.judges.client import JudgeUnavailableError

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    quiet_known_warnings()
    try:
        check_args(args)
        config = config_from_args(args)
        datasets = load_datasets(args.data or [str(MINI_WIKI_DIR)], split=args.split, limit=args.limit)
    except (ValueError, OSError) as e:
        return report_error("agentrag-verl eval", e)
    try:
        summary = asyncio.run(evaluate(config, datasets))
    except EvalIncomplete as e:
        return report_error("agentrag-verl eval", e, code=1)
    except (ValueError, EndpointError, JudgeUnavailableError) as e:
        return report_error("agentrag-verl eval", e)
    Console().print(rich_table(summary))
    print(f"results, metrics.json, metrics.md and plots in {config.out_dir} ({summary['wall_s']} s)")
    if args.print_json:
        print(json.dumps(summary, indent=1))
    return 0


def add_parser(subparsers: Any) -> None:
    from agentrag_verl.eval.data import DEFAULT_SPLIT
    from agentrag_verl.eval.rewards import design_formats
    from agentrag_verl.registry import method_names

    names = method_names()

    p = subparsers.add_parser(
        "eval",
        help="Evaluate a policy (OpenAI-compatible endpoint) through the agent loops on FlashRAG test files.",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = p.add_argument_group("policy")
    g.add_argument("--base-url", required=True, help="Policy server's OpenAI API root, e.g. http://127.0.0.1:8000/v1.")
    g.add_argument("--model", required=True, help="Model name the policy server serves.")
    g.add_argument("--tokenizer", required=True, help="HF dir or hub id of the served model (its tokenizer/config).")
    g.add_argument("--api-key-env", type=api_key_env, help=f"Policy server: {API_KEY_HELP}; default: no key.")
    g.add_argument("--temperature", type=non_negative_float, default=0.0, help="Sampling temperature (0 = greedy).")
    g.add_argument("--top-p", type=positive_float, default=1.0, help="Nucleus sampling, in (0, 1].")
    g.add_argument("--prompt-length", type=positive_int, default=2048, help="Longest prompt in tokens.")
    g.add_argument("--response-length", type=positive_int, default=2048, help="Token budget of a whole trajectory.")
    g = p.add_argument_group("data and loops")
    g.add_argument(
        "--data",
        action="append",
        help="Dataset spec (repeatable): FILE.jsonl, NAME=FILE.jsonl, or a FlashRAG_datasets folder. "
        "Default: the embedded examples/mini_wiki.",
    )
    g.add_argument("--split", default=DEFAULT_SPLIT, help="Split file name inside dataset folders.")
    g.add_argument("--limit", type=positive_int, help="Evaluate only the first N questions of each dataset.")
    g.add_argument(
        "--format",
        action="append",
        help=f"Trajectory format(s) (repeatable or comma-separated): {', '.join(names)}. Default {names[0]}.",
    )
    g.add_argument("--retriever-url", default="http://127.0.0.1:8000/retrieve", help="Retriever POST /retrieve URL.")
    g.add_argument("--topk", type=positive_int, help="Passages per query (default: each loop's paper value).")
    g.add_argument("--prompt-name", help="A named prompt of the format (Format.prompts); default: the paper's prompt.")
    g.add_argument(
        "--budget",
        type=non_negative_int,
        help="Budget B of each format's rollout: what its algorithm counts (search turns or steps); default: the "
        "papers'.",
    )
    g.add_argument("--loop-option", action="append", help="Agent-loop option key=value (SearchLoopConfig).")
    g = p.add_argument_group("judge and rewards")
    g.add_argument("--judge-base-url", help="Judge endpoint (OpenAI-compatible /v1 root); enables judge metrics.")
    g.add_argument("--judge-model", help="Judge model name.")
    g.add_argument("--judge-api-key-env", type=api_key_env, help=f"Judge: {API_KEY_HELP}; default: no key.")
    g.add_argument("--judge-option", action="append", help="JudgeConfig option key=value (e.g. max_concurrency=8).")
    g.add_argument(
        "--rewards",
        default="none",
        help=f"Reward designs to score trajectories with: comma list of {', '.join(design_formats())}; 'all' or "
        "'none'.",
    )
    g.add_argument("--reward-option", action="append", help="design.key=value reward_kwargs override.")
    g = p.add_argument_group("run")
    g.add_argument("--out", default="outputs/eval", help="Output directory (results are resumed from it).")
    g.add_argument("--concurrency", type=positive_int, default=16, help="Questions in flight at once.")
    g.add_argument(
        "--question-retries", type=non_negative_int, default=2, help="Extra attempts for a failing question."
    )
    g.add_argument("--overwrite", action="store_true", help="Delete earlier results in --out instead of resuming.")
    g.add_argument("--no-progress", action="store_true", help="No progress bar.")
    g.add_argument("--plot-metric", choices=PLOT_METRICS, default="cem", help="Accuracy axis of the plot.")
    g.add_argument("--print-json", action="store_true", help="Also print metrics.json.")
    p.set_defaults(func=run)
