"""``agentrag-verl`` command line. Each subcommand lives in its own module exposing ``add_parser(subparsers)``,
which registers the subcommand and sets ``func`` (called with the parsed args, returns an exit code).

Every error ends the command with one line on stderr and a non-zero exit code; ``--debug`` (anywhere on the line)
shows the traceback instead (:mod:`agentrag_verl.cli_common`; ``python -m retriever_server`` behaves the same with
its own copy)."""

from __future__ import annotations

import argparse
import importlib
import sys

from agentrag_verl.cli_common import OneLineParser, add_debug_flag, run_main

# The shared subcommand modules, in help order; each method's own follow (Method.commands, in method order).
SHARED_COMMAND_MODULES = [
    "agentrag_verl.doctor",
    "agentrag_verl.local_cpu.train_local",
    "agentrag_verl.preflight",
    "agentrag_verl.data.cli",
    "agentrag_verl.eval.cli",
    "agentrag_verl.warmstart.cli",
    "agentrag_verl.warmstart.sft_local",
]


def command_modules() -> list[str]:
    """Every subcommand module: the shared ones, then those the methods declare."""
    from agentrag_verl.registry import methods

    return SHARED_COMMAND_MODULES + [module for m in methods() for module in m.commands]


def build_parser() -> argparse.ArgumentParser:
    from agentrag_verl import __version__

    parser = OneLineParser(
        prog="agentrag-verl", description="Train and evaluate efficient search agents (agentic RAG) with verl."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    add_debug_flag(parser)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in command_modules():
        importlib.import_module(module).add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``agentrag-verl``; returns the exit code. Errors are one line on stderr (the traceback with
    ``--debug``), see :mod:`agentrag_verl.cli_common`."""
    return run_main(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
