"""Verdict-parsing helpers shared by every judge: the parse failure, reasoning-block removal and lenient JSON.

The papers' parsers live with their method (``agentrag_verl/methods/<paper>/judge.py``); each is a pure function
``(reply_text) -> value`` that raises :class:`ParseError` when the reply carries no verdict in the paper's format,
built on these helpers:

- :func:`check_reply`: the reply must be text;
- :func:`strip_reasoning`: a reasoning model's ``<think>...</think>`` preamble is not part of the verdict;
- :func:`loads_lenient`: the first JSON object of a reply, with the defects LLM judges commonly produce repaired.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["ParseError", "check_reply", "strip_reasoning", "loads_lenient"]


class ParseError(ValueError):
    """The judge's reply does not contain a verdict in the expected format."""


_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_UNCLOSED_THINK = re.compile(r"^\s*<think>(?!.*</think>).*", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
_SMART_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"})
_LITERALS = {"True": "true", "False": "false", "None": "null"}


def check_reply(text: Any) -> str:
    """``text`` itself when it is a string (a parser's first step).

    Raises:
        ParseError: ``text`` is not a string (e.g. ``None`` from an empty completion).

    >>> check_reply("YES")
    'YES'
    """
    if not isinstance(text, str):
        raise ParseError(f"expected the reply text, got {type(text).__name__}")
    return text


def strip_reasoning(text: str) -> str:
    """Removes ``<think>...</think>`` blocks (reasoning models served without a reasoning parser).

    An unclosed ``<think>`` at the start means the reply was cut inside the reasoning: nothing is left.

    >>> strip_reasoning("<think>hmm</think> <answer>True</answer>")
    ' <answer>True</answer>'
    """
    text = _THINK.sub("", text)
    return _UNCLOSED_THINK.sub("", text)


def _extract_object(text: str) -> str:
    """The first ``{...}`` object in ``text``, brace-balanced outside strings; unclosed objects run to the end."""
    start = text.find("{")
    if start < 0:
        raise ParseError("no JSON object in the reply")
    depth, quote, escaped = 0, "", False
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
    return text[start:]


def _repair(text: str) -> str:
    """One pass over ``text`` outside strings: drop comments and trailing commas, requote single-quoted strings,
    map Python literals, and close unclosed strings, brackets and braces at the end."""
    out: list[str] = []
    stack: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in "\"'":
            quote, j, buf = ch, i + 1, []
            while j < n and text[j] != quote:
                if text[j] == "\\" and j + 1 < n:
                    buf.append("'" if text[j + 1] == "'" else text[j : j + 2])
                    j += 2
                    continue
                if quote == "'" and text[j] == '"':
                    buf.append('\\"')
                else:
                    buf.append(text[j])
                j += 1
            out.append('"' + "".join(buf) + '"')
            i = j + 1
            continue
        if text.startswith("//", i) or ch == "#":
            while i < n and text[i] != "\n":
                i += 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
            continue
        if ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            # drop a trailing comma before the closer
            while out and out[-1].isspace():
                out.pop()
            if out and out[-1] == ",":
                out.pop()
            if stack:
                stack.pop()
        elif ch.isalpha():
            j = i
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            word = text[i:j]
            k = j
            while k < n and text[k] in " \t":
                k += 1
            is_key = k < n and text[k] == ":" and "".join(out).rstrip()[-1:] in ("{", ",")
            out.append(f'"{word}"' if is_key else _LITERALS.get(word, word))
            i = j
            continue
        out.append(ch)
        i += 1
    while out and (out[-1].isspace() or out[-1] == ","):
        out.pop()
    out.extend(reversed(stack))
    return "".join(out)


def loads_lenient(text: str) -> Any:
    """Parses the first JSON object in a reply, repairing the defects LLM judges commonly produce.

    Repairs: surrounding prose or a Markdown code fence, smart quotes, single-quoted strings, unquoted keys,
    ``//``/``#``/``/* */`` comments, trailing commas, Python ``True``/``False``/``None``, and a truncated object
    (unclosed braces/brackets are closed). Anything still invalid is a parse failure.

    Args:
        text: The reply text.

    Returns:
        The decoded JSON value (a dict for an object).

    Raises:
        ParseError: No object, or one that stays invalid after repair.

    >>> loads_lenient("Here you go:\\n```json\\n{'a': 1, b: True, // note\\n}\\n```")
    {'a': 1, 'b': True}
    """
    text = check_reply(text)
    fenced = _FENCE.search(text)
    candidate = _extract_object(fenced.group(1) if fenced and "{" in fenced.group(1) else text)
    try:
        return json.loads(candidate)
    except ValueError:
        pass
    repaired = _repair(candidate.translate(_SMART_QUOTES))
    try:
        return json.loads(repaired)
    except ValueError as exc:
        raise ParseError(f"invalid JSON even after repair: {exc}") from exc
