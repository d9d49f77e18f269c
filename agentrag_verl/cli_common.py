"""What the ``agentrag-verl`` commands share: one-line errors, ``--debug``, argument types that refuse impossible
counts, path and model-folder checks, command groups (:func:`add_command_group`) and the values of the flags that a
config's fields mirror (:func:`arg_values`).

An error ends a command with one line on stderr, ``<prog>: error: <what, why and how to fix>``, and a non-zero
exit code: 2 for bad input (a usage error, a ``ValueError``, a path that is missing or of the wrong kind, a
missing package), 1 for a failure while running. The traceback is printed only with ``--debug``, which is accepted
anywhere on the command line before a ``--``.

Decisions:

- The funnel (:func:`run_main`) catches every exception, not only the expected ones: a traceback is for
  developers, and a user who meets an unexpected one gets its type and message plus the ``--debug`` hint.
- argparse's own usage errors are shortened to one line too (:class:`OneLineParser`); the usage stays one
  ``--help`` away.
- ``retriever_server`` has its own copy of the few pieces both command lines need (the funnel, the one-line parser,
  the count types): the retriever is a service deployable on its own, so neither package imports the other (only
  test fixtures use both). This module holds only what ``agentrag-verl`` uses.
- This module imports nothing heavy, so validating arguments costs nothing before the real work starts.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "API_KEY_HELP",
    "NO_API_KEY",
    "OneLineParser",
    "add_command_group",
    "add_debug_flag",
    "api_key_env",
    "arg_values",
    "describe",
    "input_dir",
    "input_file",
    "judge_option_names",
    "model_or_hub_id",
    "non_negative_float",
    "non_negative_int",
    "output_dir",
    "output_file",
    "plain_name",
    "positive_float",
    "positive_int",
    "report_error",
    "run_main",
]

DEBUG_FLAG = "--debug"
_debug = False  # set by run_main for report_error
INPUT_ERRORS = (ValueError, OSError, ImportError, LookupError)
"""Exceptions that mean the input was wrong (exit code 2); anything else is a failure while running (1)."""


class OneLineParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose usage errors are one line (``prog: error: ... (see prog --help)``)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def add_debug_flag(parser: argparse.ArgumentParser) -> None:
    """Document ``--debug`` on the top-level parser (:func:`run_main` takes it from anywhere on the line)."""
    parser.add_argument(DEBUG_FLAG, action="store_true", help="show the traceback of an error (any position)")


def add_command_group(subparsers: Any, name: str, metavar: str, **kwargs: Any) -> Any:
    """Register the command ``name`` whose actions are subcommands (``agentrag-verl NAME ACTION``, one required;
    ``args.<name>_command`` says which) and return the subparsers to add the actions to.

    Args:
        subparsers: What ``add_parser(subparsers)`` is given.
        name: The command.
        metavar: How ``--help`` names the action.
        kwargs: ``help``, ``description``, ... of the command's parser.
    """
    parser = subparsers.add_parser(name, **kwargs)
    return parser.add_subparsers(dest=f"{name}_command", metavar=metavar, required=True)


def arg_values(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    """The parsed values of the arguments ``names``, by name: the fields of a config whose flags mirror them.

    >>> arg_values(argparse.Namespace(topk=3, seed=1, out="x"), "topk", "seed")
    {'topk': 3, 'seed': 1}
    """
    return {name: getattr(args, name) for name in names}


def run_main(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    """Parse ``argv``, run the chosen subcommand's ``func(args)`` and turn any error into one line.

    Returns:
        The subcommand's exit code; 2 for bad input, 1 for another failure, 130 when interrupted.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    global _debug
    cut = argv.index("--") if "--" in argv else len(argv)
    debug = _debug = DEBUG_FLAG in argv[:cut]
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
    read), else its type, message and the ``--debug`` hint.

    >>> describe(ValueError("--limit 0 is not a whole number of at least 1"))
    '--limit 0 is not a whole number of at least 1'
    >>> describe(RuntimeError("boom"))
    'unexpected RuntimeError: boom (rerun with --debug to see the traceback)'
    """
    text = " ".join(str(error).split()) or type(error).__name__
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        # an error from the OS itself ("[Errno 13] Permission denied: 'x'"): name the path and what to check
        return f"{error.filename}: {error.strerror.lower()}; check the path and its permissions"
    if expected or isinstance(error, INPUT_ERRORS):
        return text
    return f"unexpected {type(error).__name__}: {text} (rerun with {DEBUG_FLAG} to see the traceback)"


def report_error(prog: str, error: BaseException, code: int = 2) -> int:
    """For a subcommand's own ``except`` clause: print ``error`` as one line under ``prog`` and return ``code``; with
    ``--debug`` re-raise it instead (its traceback)."""
    if _debug:
        raise error
    print(f"{prog}: error: {describe(error, expected=True)}", file=sys.stderr)
    return code


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
non_negative_int = _number(int, 0, "a whole number of at least 0")
positive_float = _number(float, 0.0, "a number greater than 0", strict=True)
non_negative_float = _number(float, 0.0, "a number of at least 0")

NO_API_KEY = "none"
"""How every command spells "this endpoint takes no API key": ``--api-key-env none`` (``null`` in a YAML config)."""
API_KEY_HELP = f"name of the environment variable holding the API key ({NO_API_KEY}: the endpoint takes no key)"


def api_key_env(text: str) -> str | None:
    """argparse type for an ``--*-api-key-env`` flag: the *name* of an environment variable, or ``none`` (any case;
    the older spellings ``null`` and an empty string are read the same) for no key.

    The value is never echoed in an error, in case a key was pasted where its variable's name belongs.

    >>> api_key_env("OPENAI_API_KEY"), api_key_env("None")
    ('OPENAI_API_KEY', None)
    """
    name = text.strip()
    if name.lower() in (NO_API_KEY, "null", ""):
        return None
    if not name.replace("_", "a").isalnum() or name[0].isdigit() or not name.isascii():
        raise argparse.ArgumentTypeError(
            f"the value given is not an environment variable name (not shown, in case it is a key); pass the NAME of "
            f"the variable that holds the key (e.g. OPENAI_API_KEY), or {NO_API_KEY} for an endpoint without a key"
        )
    return name


def judge_option_names(flags: dict[str, str], other: str | None = None) -> dict[str, str]:
    """``JudgeConfig.option_names`` of a command: how its messages name each judge option, so that an error says
    the flag the user typed (``--base-url``), not the config key (``judge.base_url``).

    Args:
        flags: The command's own flag of each option it has one for, by ``JudgeConfig`` field name.
        other: The flag that sets any other field as ``KEY=VALUE`` (e.g. ``--judge-option``), if the command has one.

    >>> names = judge_option_names({"base_url": "--base-url"}, "--judge-option")
    >>> names["base_url"], names["check_model"]
    ('--base-url', '--judge-option check_model')
    """
    import dataclasses

    from agentrag_verl.judges.config import JudgeConfig

    names = dict(flags)
    if other:
        for f in dataclasses.fields(JudgeConfig):
            if f.name not in ("label", "option_names"):
                names.setdefault(f.name, f"{other} {f.name}")
    return names


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


def input_dir(path: str | Path, flag: str) -> Path:
    """``path`` as an existing folder.

    Raises:
        FileNotFoundError, NotADirectoryError: naming ``flag``.
    """
    p = Path(path).expanduser()
    if p.is_file():
        raise NotADirectoryError(f"{flag} {p} is a file; pass a folder")
    if not p.is_dir():
        raise FileNotFoundError(f"{flag} {p} does not exist; pass an existing folder")
    return p


def output_dir(path: str | Path, flag: str) -> Path:
    """``path`` as a folder to write into (it may not exist yet; nothing is created here).

    Raises:
        NotADirectoryError: ``path`` or one of its parents is a file.
    """
    p = Path(path).expanduser()
    for candidate in (p, *p.parents):
        if candidate.exists() and not candidate.is_dir():
            raise NotADirectoryError(f"{flag} {p}: {candidate} is a file, not a folder; choose another {flag}")
    return p


def output_file(path: str | Path, flag: str) -> Path:
    """``path`` as a file to write (it may not exist yet).

    Raises:
        IsADirectoryError: ``path`` is a folder. NotADirectoryError: one of its parents is a file.
    """
    p = Path(path).expanduser()
    if p.is_dir():
        raise IsADirectoryError(f"{flag} {p} is a folder; pass a file path")
    output_dir(p.parent, flag)
    return p


def plain_name(name: str, flag: str) -> str:
    """``name`` when it can name a file inside an output folder: not empty, no path separator, not ``.``/``..``.

    Raises:
        ValueError: ``name`` would escape the folder or name no file.
    """
    if not name or name in (".", "..") or any(c in name for c in "/\\\0") or name != name.strip():
        raise ValueError(
            f"{flag} {name!r} is not a plain file name: it is used as a file name inside the output folder and "
            "must not contain '/', '\\\\' or be '.' / '..' (it would write outside it); use e.g. train or test"
        )
    return name


def model_or_hub_id(model: str, flag: str) -> str:
    """``model`` when it can name a Hugging Face model: a folder holding ``config.json``, or a hub id (``org/name``,
    left to the hub). Checked before anything is loaded, contacted or written.

    Raises:
        NotADirectoryError: ``model`` is a file. ValueError: a folder without ``config.json``.
        FileNotFoundError: ``model`` looks like a path (``/``, ``.``, ``~``, several ``/``) that does not exist.

    >>> model_or_hub_id("Qwen/Qwen2.5-3B", "--model")
    'Qwen/Qwen2.5-3B'
    """
    path = Path(model).expanduser()
    if path.is_file():
        raise NotADirectoryError(
            f"The model {model} is a file; pass the model folder (the one holding config.json and the weights) or a "
            f"hub id ({flag})."
        )
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(
                f"The model folder {model} has no config.json, so it is not a Hugging Face model; pass the folder "
                f"that holds config.json, the tokenizer and the weights ({flag})."
            )
        return model
    if model.startswith(("/", ".", "~")) or model.count("/") > 1 or "\\" in model:
        raise FileNotFoundError(
            f"The model folder {model} does not exist; pass an existing model folder or a hub id ({flag})."
        )
    return model
