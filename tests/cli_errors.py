"""Checks shared by the command-line error tests: bad input ends a command with one line on stderr saying what,
why and how to fix it, a non-zero exit code, and no traceback."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def run_cli(main: Callable[[list[str]], int], argv: Sequence[str], capsys) -> tuple[int, str]:
    """``main(argv)`` in this process: ``(exit code, stderr)``; argparse usage errors exit through SystemExit."""
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def one_line_error(main: Callable[[list[str]], int], argv: Sequence[str], capsys, *expected: str) -> str:
    """Run ``argv``; assert exit code 2, exactly one stderr line, no traceback, and each of ``expected`` in it."""
    code, err = run_cli(main, argv, capsys)
    lines = err.strip().splitlines()
    assert code == 2, (code, err)
    assert len(lines) == 1 and "Traceback" not in err, err
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]
