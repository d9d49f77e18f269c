"""``agentrag-verl data``: prepare verl parquet from FlashRAG-layout QA files.

Examples::

    # Search-R1's NQ + HotpotQA training mix and the seven test sets, HiPRAG prompt, from a local FlashRAG copy
    agentrag-verl data prepare --preset searchr1_nq_hotpotqa --format hiprag --flashrag-dir ~/FlashRAG_datasets \\
        --out data/hiprag
    # the same from the Hugging Face hub (needs network and `pip install datasets`)
    agentrag-verl data prepare --preset 2wiki_80_20 --format multistage --hub --out data/multistage
    # any FlashRAG-layout file
    agentrag-verl data prepare --input my_qa.jsonl --name myqa --split train --format searchp1 --out data/mine
    agentrag-verl data presets
"""

from __future__ import annotations

import argparse
import sys

from agentrag_verl.cli_common import add_command_group, arg_values, output_dir, plain_name, positive_int, report_error

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


def _presets(args: argparse.Namespace) -> int:
    for name, preset in presets().items():
        print(f"{name}: {preset.description}")
    return 0


def add_parser(subparsers) -> None:
    from agentrag_verl.registry import method_names

    sub = add_command_group(
        subparsers, "data", "DATA_COMMAND", help="Prepare verl parquet datasets from FlashRAG-layout QA files."
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
