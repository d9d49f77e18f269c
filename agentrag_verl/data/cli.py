"""``agentrag-verl data``: prepare verl parquet from FlashRAG-layout QA files, and label what a policy knows.

Examples::

    # Search-R1's NQ + HotpotQA training mix and the seven test sets, HiPRAG prompt, from a local FlashRAG copy
    agentrag-verl data prepare --preset searchr1_nq_hotpotqa --format hiprag --flashrag-dir ~/FlashRAG_datasets \\
        --out data/hiprag
    # the same from the Hugging Face hub (needs network and `pip install datasets`)
    agentrag-verl data prepare --preset 2wiki_80_20 --format multistage --hub --out data/multistage
    # any FlashRAG-layout file
    agentrag-verl data prepare --input my_qa.jsonl --name myqa --split train --format searchp1 --out data/mine
    agentrag-verl data presets
    # what a served policy answers right without retrieval, per question (agentrag_verl/data/knowledge.py)
    agentrag-verl data knowledge --format hiprag --base-url http://127.0.0.1:8000/v1 --model policy \
        --tokenizer Qwen/Qwen2.5-3B-Instruct --data data/nq --split test --out data/known
"""

from __future__ import annotations

import argparse
import sys

from agentrag_verl.cli_common import (
    API_KEY_HELP,
    add_command_group,
    api_key_env,
    arg_values,
    non_negative_int,
    output_dir,
    plain_name,
    positive_int,
    report_error,
)

from .flashrag import DataSourceError
from .prepare import DATA_SOURCE_PREFIX, OutputSpec, SourceSpec, prepare_outputs, presets


def _prepare(args: argparse.Namespace) -> int:
    from pathlib import Path

    if (args.preset is None) == (args.input is None):
        print("agentrag-verl data prepare: error: give exactly one of --preset NAME or --input FILE", file=sys.stderr)
        return 2
    if args.preset is not None:
        known = presets()
        if args.preset not in known:
            print(
                f"agentrag-verl data prepare: error: unknown preset {args.preset!r}; choose one of {sorted(known)} "
                "(agentrag-verl data presets lists them)",
                file=sys.stderr,
            )
            return 2
        if args.flashrag_dir is None and not args.hub:
            print(
                "agentrag-verl data prepare: error: a preset reads FlashRAG benchmarks: pass --flashrag-dir DIR (a "
                "local copy of RUC-NLPIR/FlashRAG_datasets) or --hub to download them",
                file=sys.stderr,
            )
            return 2
        outputs = known[args.preset].outputs
    else:
        name = args.name or Path(args.input).stem
        outputs = (OutputSpec(args.split, args.split, (SourceSpec(name, args.split, path=args.input),)),)
    try:
        from agentrag_verl.formats import get_format

        get_format(args.format)  # an unknown format fails before anything is read
        plain_name(args.split, "--split")  # <out>/<split>.parquet must stay inside --out
        output_dir(args.out, "--out")
        result = prepare_outputs(
            outputs,
            args.out,
            format_name=args.format,
            add_question_mark=not args.no_question_mark,
            manifest={"preset": args.preset, "input": args.input, "argv": sys.argv[1:]},
            **arg_values(args, "flashrag_dir", "hub", "agent_name", "data_source_prefix", "seed", "max_per_source"),
        )
    except (DataSourceError, ValueError, OSError) as e:
        return report_error("agentrag-verl data prepare", e)
    print(f"read: {', '.join(f'{k}={v}' for k, v in result.read.items())}")
    for output, path in result.files.items():
        per_source = ", ".join(f"{k}={v}" for k, v in result.counts[output].items())
        print(f"{path}: {result.total(output)} rows ({per_source})")
    print(f"manifest: {Path(args.out) / 'manifest.json'}")
    return 0


def _knowledge(args: argparse.Namespace) -> int:
    import asyncio
    import os

    from agentrag_verl.eval.data import MINI_WIKI_DIR, load_datasets
    from agentrag_verl.eval.harness import EvalIncomplete
    from agentrag_verl.eval.runner import RunnerConfig
    from agentrag_verl.formats import get_format

    from .knowledge import NO_RETRIEVER, KnowledgeConfig, probe_knowledge, report_markdown

    prog = "agentrag-verl data knowledge"
    try:
        get_format(args.format)
        output_dir(args.out, "--out")
        if args.api_key_env and not os.environ.get(args.api_key_env):
            raise ValueError(f"--api-key-env {args.api_key_env}: that environment variable is not set.")
        datasets = load_datasets(args.data or [str(MINI_WIKI_DIR)], split=args.split, limit=args.limit)
        runner = RunnerConfig(
            retriever_url=NO_RETRIEVER,
            **arg_values(args, "tokenizer", "base_url", "model", "api_key_env", "temperature", "prompt_name",
                         "prompt_length", "response_length"),
        )  # fmt: skip
        config = KnowledgeConfig(
            runner=runner,
            progress=not args.no_progress,
            out_dir=args.out,
            **arg_values(args, "format", "samples", "threshold", "concurrency"),
        )
        report = asyncio.run(probe_knowledge(config, datasets))
    except EvalIncomplete as e:
        return report_error(prog, e, code=1)
    except (DataSourceError, ValueError, OSError) as e:
        return report_error(prog, e)
    print(report_markdown(report))
    print(f"labelled rows: {args.out}/<dataset>/{args.split}.jsonl; report: {args.out}/report.json")
    return 0


def _presets(args: argparse.Namespace) -> int:
    for name, preset in presets().items():
        print(f"{name}: {preset.description}")
    return 0


def add_parser(subparsers) -> None:
    from agentrag_verl.registry import method_names

    sub = add_command_group(
        subparsers,
        "data",
        "DATA_COMMAND",
        help="Prepare verl parquet datasets from FlashRAG-layout QA files; label what a policy knows closed-book.",
    )
    prep = sub.add_parser(
        "prepare",
        help="FlashRAG jsonl (local or hub) -> verl parquet for a trajectory format.",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = prep.add_argument_group("what to read")
    src.add_argument("--preset", help=f"dataset preset: {', '.join(presets())}")
    src.add_argument("--input", help="one FlashRAG-layout .jsonl file (instead of a preset)")
    src.add_argument("--name", help="dataset name of --input (data_source suffix, id prefix; default: file stem)")
    src.add_argument("--split", default="train", help="split label of --input rows and output file name (train)")
    src.add_argument("--flashrag-dir", help="local copy of RUC-NLPIR/FlashRAG_datasets (<dir>/<dataset>/<split>.jsonl)")
    src.add_argument("--hub", action="store_true", help="download the benchmarks from the Hugging Face hub")
    prep.add_argument("--format", required=True, help=f"trajectory format: {', '.join(method_names())}")
    prep.add_argument("--out", required=True, help="output directory (<out>/<split>.parquet, manifest.json)")
    prep.add_argument("--agent-name", help="agent_name column (default: the format's agent loop)")
    prep.add_argument(
        "--data-source-prefix",
        default=DATA_SOURCE_PREFIX,
        help=f"data_source = prefix + dataset ({DATA_SOURCE_PREFIX})",
    )
    prep.add_argument("--no-question-mark", action="store_true", help="do not append '?' to questions")
    prep.add_argument("--seed", type=int, default=0, help="seed of sampling and 80/20 shuffles (0)")
    prep.add_argument("--max-per-source", type=positive_int, help="keep at most N rows per source (quick runs)")
    prep.set_defaults(func=_prepare)
    pre = sub.add_parser("presets", help="List the dataset presets.")
    pre.set_defaults(func=_presets)
    from .knowledge import __doc__ as knowledge_doc

    k = sub.add_parser(
        "knowledge",
        help="Label each question with what a policy knows without retrieval (closed-book answers; resumable).",
        description=knowledge_doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    k.add_argument(
        "--format", required=True, help=f"the method whose no-search path is probed: {', '.join(method_names())}"
    )
    k.add_argument("--data", action="append", help="dataset spec(s) as in `eval` (default: the mini-wiki)")
    k.add_argument("--split", default="train", help="split file name inside dataset folders (train)")
    k.add_argument("--limit", type=positive_int, help="first N questions of each dataset")
    k.add_argument("--base-url", required=True, help="the policy's OpenAI-compatible API root (http://HOST:PORT/v1)")
    k.add_argument("--model", required=True, help="the model name the policy server serves")
    k.add_argument("--tokenizer", required=True, help="HF folder or hub id of the served policy")
    k.add_argument("--api-key-env", type=api_key_env, help=f"{API_KEY_HELP}; default: no key")
    k.add_argument(
        "--samples", type=non_negative_int, default=4, help="sampled answers per question besides the greedy one (4)"
    )
    k.add_argument("--temperature", type=float, default=1.0, help="temperature of the sampled answers (1.0)")
    k.add_argument("--threshold", type=float, default=0.5, help="closed-book rate at which a question is known (0.5)")
    k.add_argument("--prompt-name", help="a named prompt of the format; default: the paper's")
    k.add_argument("--prompt-length", type=positive_int, default=1024)
    k.add_argument("--response-length", type=positive_int, default=512, help="token budget of one answer")
    k.add_argument("--concurrency", type=positive_int, default=16)
    k.add_argument("--out", required=True, help="output folder (labelled rows, report.json, the answers)")
    k.add_argument("--no-progress", action="store_true")
    k.set_defaults(func=_knowledge)
