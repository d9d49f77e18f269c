"""``agentrag-verl`` command line. Each subcommand lives in its own module exposing ``add_parser(subparsers)``,
which registers the subcommand and sets ``func`` (called with the parsed args, returns an exit code)."""

from __future__ import annotations

import argparse
import importlib
import sys

# Subcommand modules, in help order.
COMMAND_MODULES = [
    "agentrag_verl.doctor",
    "agentrag_verl.local_cpu.train_local",
    "agentrag_verl.data.cli",
    "agentrag_verl.planners.cli",
    "agentrag_verl.eval.cli",
    "agentrag_verl.warmstart.cli",
    "agentrag_verl.warmstart.sft_local",
    "agentrag_verl.reasonrag.cli",
]


def build_parser() -> argparse.ArgumentParser:
    from agentrag_verl import __version__

    parser = argparse.ArgumentParser(
        prog="agentrag-verl", description="Train and evaluate efficient search agents (agentic RAG) with verl."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMAND_MODULES:
        importlib.import_module(module).add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
