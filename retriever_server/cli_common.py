"""What the ``python -m retriever_server`` commands share: one-line errors, ``--debug``, argument types that refuse
impossible counts and ports, an input-file check, and a JSON Lines reader whose errors name the file and the line.

An error ends a command with one line on stderr, ``<prog>: error: <what, why and how to fix>``, and a non-zero
exit code: 2 for bad input (a usage error, a ``ValueError``, a path that is missing or of the wrong kind, a
missing package), 1 for a failure while running. The traceback is printed only with ``--debug``, which is accepted
anywhere on the command line before a ``--``.

Decisions:

- The funnel (:func:`run_main`) catches every exception, not only the expected ones: a traceback is for
  developers, and a user who meets an unexpected one gets its type and message plus the ``--debug`` hint.
- argparse's own usage errors are shortened to one line too (:class:`OneLineParser`); the usage stays one
  ``--help`` away.
- ``agentrag-verl`` has its own copy of the pieces both command lines need (``agentrag_verl.cli_common``): the
  retriever is a service deployable on its own, so neither package imports the other. This module holds only what
  the server's commands use.
- This module imports nothing heavy, so validating arguments costs nothing before the real work starts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

DEBUG_FLAG = "--debug"
INPUT_ERRORS = (ValueError, OSError, ImportError, LookupError)
"""Exceptions that mean the input was wrong (exit code 2); anything else is a failure while running (1)."""


class OneLineParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose usage errors are one line (``prog: error: ... (see prog --help)``)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def add_debug_flag(parser: argparse.ArgumentParser) -> None:
    """Document ``--debug`` on the top-level parser (:func:`run_main` takes it from anywhere on the line)."""
    parser.add_argument(DEBUG_FLAG, action="store_true", help="show the traceback of an error (any position)")


def run_main(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    """Parse ``argv``, run the chosen subcommand's ``func(args)`` and turn any error into one line.

    Returns:
        The subcommand's exit code; 2 for bad input, 1 for another failure, 130 when interrupted.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    debug = DEBUG_FLAG in argv[:cut]
    args = parser.parse_args([a for a in argv[:cut] if a != DEBUG_FLAG] + argv[cut:])
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if debug:
            raise
        print(f"{parser.prog}: error: {describe(e)}", file=sys.stderr)
        return 2 if isinstance(e, INPUT_ERRORS) else 1


def describe(error: BaseException, *, expected: bool = False) -> str:
    """One line for ``error``: its message when it is an input error (or ``expected``: an error class written to be
    read), else its type, message and the ``--debug`` hint."""
    text = " ".join(str(error).split()) or type(error).__name__
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        # an error from the OS itself ("[Errno 13] Permission denied: 'x'"): name the path and what to check
        return f"{error.filename}: {error.strerror.lower()}; check the path and its permissions"
    if expected or isinstance(error, INPUT_ERRORS):
        return text
    return f"unexpected {type(error).__name__}: {text} (rerun with {DEBUG_FLAG} to see the traceback)"


# ---- argparse types --------------------------------------------------------------------------------------------------


def _number(cast: Callable[[str], Any], minimum: float, what: str, *, strict: bool = False) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not (value > minimum if strict else value >= minimum):  # NaN fails both
            raise argparse.ArgumentTypeError(f"{text} is not {what}")
        return value

    parse.__name__ = what
    return parse


positive_int = _number(int, 1, "a whole number of at least 1")
positive_float = _number(float, 0.0, "a number greater than 0", strict=True)
non_negative_float = _number(float, 0.0, "a number of at least 0")


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one, else all cores)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def thread_count(text: str) -> int:
    """argparse type: a thread count from 1 to the usable cores (``--num-threads 100000`` started a thread per
    count until the user's process limit, then crashed, and other processes of the user could not fork)."""
    value = positive_int(text)
    cores = usable_cores()
    if value > cores:
        raise argparse.ArgumentTypeError(
            f"{value} is more than the {cores} CPU cores this process may use; choose 1 to {cores} (threads beyond "
            "the cores only slow the encoder down), or leave it out for all of them"
        )
    return value


def tcp_port(text: str) -> int:
    """argparse type: a TCP port, 1-65535."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (1-65535)") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a TCP port; choose one from 1 to 65535")
    return port


# ---- paths -----------------------------------------------------------------------------------------------------------


def input_file(path: str | Path, flag: str) -> Path:
    """``path`` as an existing file.

    Raises:
        FileNotFoundError, IsADirectoryError: naming ``flag``.
    """
    p = Path(path).expanduser()
    if p.is_dir():
        raise IsADirectoryError(f"{flag} {p} is a folder; pass a file")
    if not p.is_file():
        raise FileNotFoundError(f"{flag} {p} does not exist; pass an existing file")
    return p


# ---- JSON Lines ------------------------------------------------------------------------------------------------------


class JsonLinesError(ValueError):
    """A line of a JSON Lines file that is not UTF-8 JSON; the message names the file and the line."""


def decode_json_line(raw: bytes, path: str | Path, lineno: int) -> Any:
    """The JSON value on one line (bytes, a UTF-8 byte-order mark allowed on line 1).

    Raises:
        JsonLinesError: Not UTF-8, or not JSON.
    """
    if lineno == 1:
        raw = raw.removeprefix(b"\xef\xbb\xbf")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise JsonLinesError(
            f"{path}, line {lineno}: not UTF-8 (byte {raw[e.start]:#04x} at column {e.start + 1}); save the file as "
            "UTF-8 (e.g. iconv -f latin1 -t utf-8) or fix the line"
        ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise JsonLinesError(
            f"{path}, line {lineno}: not valid JSON ({e.msg} at column {e.colno}); each line must be one complete "
            "JSON object: fix or delete the line"
        ) from None


def read_json_lines(path: str | Path, flag: str) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for each non-blank line of a JSON Lines file.

    Raises:
        FileNotFoundError, IsADirectoryError: ``path`` is missing or a folder (naming ``flag``).
        JsonLinesError: A line is not UTF-8 JSON (naming the file and line).
    """
    p = input_file(path, flag)
    with open(p, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if raw.strip():
                yield lineno, decode_json_line(raw, p, lineno)
