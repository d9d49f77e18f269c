"""``agentrag-verl demos generate``: teacher demonstrations for the warm start (:mod:`agentrag_verl.warmstart.demos`).

With a teacher model (production)::

    agentrag-verl demos generate --format hiprag --tokenizer Qwen/Qwen2.5-3B-Instruct \\
        --teacher-url http://127.0.0.1:8000/v1 --teacher-model teacher --samples 4 --temperature 1.0 \\
        --retriever-url http://127.0.0.1:8001/retrieve --data data/nq/train.jsonl --out outputs/demos

On the embedded default, the scripted stand-in teacher (no ``--teacher-url``) plays the plans stored in the
mini-wiki training rows. ``--tokenizer`` is the *policy's* tokenizer: demonstrations are its token ids. Rerunning
the same command resumes. Exit codes: 0 done, 1 some trajectories failed (rerun to retry them), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from agentrag_verl.cli_common import (
    API_KEY_HELP,
    add_command_group,
    api_key_env,
    arg_values,
    output_dir,
    positive_int,
    report_error,
)

__all__ = ["add_parser"]

PROG = "agentrag-verl demos generate"


def run(args: argparse.Namespace) -> int:
    import os

    from agentrag_verl.eval.cli import parse_options, quiet_known_warnings, runner_config
    from agentrag_verl.eval.data import MINI_WIKI_DIR, load_datasets
    from agentrag_verl.eval.harness import EvalIncomplete
    from agentrag_verl.warmstart.demos import DemoConfig, generate_demos, scripted_teacher_client, stats_markdown
    from agentrag_verl.warmstart.teacher import scripted_teacher_name

    quiet_known_warnings()
    try:
        if not args.format:
            from agentrag_verl.demo.pipeline import demo_method

            args.format = demo_method().name
        output_dir(args.out, "--out")
        loop_options = parse_options(args.loop_option, "--loop-option")
        datasets = load_datasets(args.data or [str(MINI_WIKI_DIR)], split=args.split, limit=args.limit)
        scripted = args.teacher_url is None
        if not scripted and not args.teacher_model:
            raise ValueError("--teacher-model is required with --teacher-url (the model name the server serves).")
        if args.api_key_env and not os.environ.get(args.api_key_env):
            raise ValueError(f"--api-key-env {args.api_key_env}: that environment variable is not set.")
        runner = runner_config(
            args,
            loop_options,
            base_url=args.teacher_url or "scripted://teacher",
            model=args.teacher_model or "scripted-teacher",
        )
        config = DemoConfig(
            runner=runner,
            out_dir=args.out,
            teacher=scripted_teacher_name(args.format) if scripted else args.teacher_model,
            progress=not args.no_progress,
            **arg_values(args, "format", "samples", "concurrency", "metric"),
        )
    except (ValueError, OSError) as e:
        return report_error(PROG, e)

    async def main() -> dict:
        client = None
        if scripted:
            from transformers import AutoTokenizer

            questions = [q for qs in datasets.values() for q in qs]
            client = scripted_teacher_client(AutoTokenizer.from_pretrained(args.tokenizer), args.format, questions)
        return await generate_demos(config, datasets, llm_client=client, overwrite=args.overwrite)

    try:
        stats = asyncio.run(main())
    except EvalIncomplete as e:
        return report_error(PROG, e, code=1)
    except (ValueError, OSError) as e:
        return report_error(PROG, e)
    print(stats_markdown(stats))
    if args.json:
        print(json.dumps(stats, indent=1))
    print(f"demonstrations: {args.out}/{config.format_name}/demos.jsonl")
    return 0


def add_parser(subparsers) -> None:
    from agentrag_verl.registry import method_names

    sub = add_command_group(
        subparsers,
        "demos",
        "ACTION",
        help="Teacher demonstrations for the warm start (rejection sampling through our agent loops).",
        description=__doc__.split("\n\n")[0],
    )
    g = sub.add_parser("generate", help="Sample, check and store demonstrations (resumable).", description=__doc__)
    g.add_argument(
        "--format",
        help=f"Trajectory format / agent loop: {', '.join(method_names())} (default: the demo's method).",
    )
    g.add_argument("--prompt-name", help="A named prompt of the format (Format.prompts); default: the paper's.")
    g.add_argument("--tokenizer", required=True, help="HF folder or hub id of the POLICY to be trained.")
    g.add_argument("--retriever-url", default="http://127.0.0.1:8000/retrieve", help="POST /retrieve endpoint.")
    g.add_argument("--data", action="append", help="Dataset spec(s) as in `eval` (default: the mini-wiki).")
    g.add_argument("--split", default="train", help="Split file name inside dataset folders (default train).")
    g.add_argument("--limit", type=positive_int, help="First N questions of each dataset.")
    g.add_argument("--teacher-url", help="OpenAI-compatible API root of the teacher (default: scripted teacher).")
    g.add_argument("--teacher-model", help="Model name the teacher server serves.")
    g.add_argument("--api-key-env", type=api_key_env, help=f"Teacher: {API_KEY_HELP}; default: no key.")
    g.add_argument("--samples", type=positive_int, default=1, help="Trajectories per question (k).")
    g.add_argument("--temperature", type=float, default=0.0, help="Teacher sampling temperature.")
    g.add_argument("--metric", choices=["em", "cem", "f1"], help="Correctness rule (default: the paper's).")
    g.add_argument("--concurrency", type=positive_int, default=8, help="Trajectories in flight.")
    g.add_argument("--prompt-length", type=positive_int, default=1024)
    g.add_argument("--response-length", type=positive_int, default=1024, help="Token budget of one trajectory.")
    g.add_argument(
        "--loop-option", action="append", help="Agent-loop option key=value (e.g. max_observation_tokens=256)."
    )
    g.add_argument("--out", default="outputs/demos", help="Output folder (<out>/<format>/demos.jsonl).")
    g.add_argument("--overwrite", action="store_true", help="Delete earlier demonstrations in --out.")
    g.add_argument("--no-progress", action="store_true")
    g.add_argument("--json", action="store_true", help="Also print stats.json.")
    g.set_defaults(func=run)
