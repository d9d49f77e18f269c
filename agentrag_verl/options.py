"""Options dataclasses from config mappings: one place that rejects unknown keys and checks choices.

Every options dataclass of the package (reward options under ``reward.reward_kwargs``, judge configs, agent-loop
options, MCTS settings) is built from a plain dict, an OmegaConf ``DictConfig`` or ``None`` by :func:`from_mapping`:
a key that is not a field fails at once, naming the key, the valid keys and where to set them (a typo must never
be silently ignored, and must fail at start-up, not on the first sample), and every ``Literal[...]`` field must
hold one of its choices (:func:`check_literals`). :func:`check_choice` checks one value against its choices (for
constructor arguments that are not dataclass fields).

>>> from dataclasses import dataclass
>>> from typing import Literal
>>> @dataclass
... class Loop:
...     budget: int = 4
...     side: Literal["left", "right"] = "right"
>>> from_mapping(Loop, {"budget": 2}, what="loop option").budget
2
>>> from_mapping(Loop, {"budgte": 2}, what="loop option", where="loop.options")
Traceback (most recent call last):
ValueError: Unknown loop option(s) ['budgte'] for Loop; choose from ['budget', 'side']; set them under loop.options
>>> from_mapping(Loop, {"side": "top"}, what="loop option", where="loop.options")
Traceback (most recent call last):
ValueError: Invalid loop option loop.options.side='top': choose one of ['left', 'right']
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from collections.abc import Collection, Mapping, Sequence
from typing import Any, TypeVar

__all__ = ["check_choice", "check_literals", "from_mapping", "literal_choices", "plain_mapping"]

T = TypeVar("T")


def plain_mapping(config: Any, *, what: str = "option", error: type[Exception] = ValueError) -> dict[str, Any]:
    """``config`` as a new plain dict: ``None`` -> ``{}``, a mapping copied, an OmegaConf ``DictConfig`` resolved.

    Raises:
        error: ``config`` is something else (the message names ``what``).

    >>> plain_mapping(None), plain_mapping({"a": 1})
    ({}, {'a': 1})
    """
    if config is None:
        return {}
    if isinstance(config, Mapping):
        return dict(config)
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(config, DictConfig):
            return dict(OmegaConf.to_container(config, resolve=True))  # type: ignore[arg-type]
    except ImportError:  # pragma: no cover - omegaconf comes with verl
        pass
    raise error(f"The {what}s must be a mapping or an OmegaConf DictConfig, got {type(config).__name__}")


def _is_choice(value: Any, choices: Sequence[Any]) -> bool:
    if isinstance(value, str):
        return value in choices
    return any(value == c and type(value) is type(c) for c in choices)  # True is not 1, 1.0 is not 1


def check_choice(name: str, value: Any, choices: Sequence[Any], *, where: str | None = None) -> Any:
    """``value`` when it is one of ``choices`` (same type: ``True`` is not ``1``); else a ``ValueError`` naming the
    option, the valid choices and, with ``where``, the config key to set.

    >>> check_choice("denominator", "all", ("all", "search"))
    'all'
    >>> check_choice("denominator", "alll", ("all", "search"))
    Traceback (most recent call last):
    ValueError: Unknown denominator 'alll'; choose one of ['all', 'search']
    """
    if _is_choice(value, choices):
        return value
    hint = f"; set {where}" if where else ""
    raise ValueError(f"Unknown {name} {value!r}; choose one of {list(choices)}{hint}")


def literal_choices(hint: Any) -> tuple[Any, ...] | None:
    """The values of a ``Literal[...]`` type (``Literal[...] | None`` and ``Optional`` included), else None.

    >>> literal_choices(typing.Literal["a", "b"] | None)
    ('a', 'b', None)
    >>> literal_choices(int) is None
    True
    """
    if hint is None:
        return None
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        values: list[Any] = []
        for arg in typing.get_args(hint):
            if arg is type(None):
                values.append(None)
                continue
            inner = literal_choices(arg)
            if inner is None:
                return None  # a union with a non-literal member accepts other values
            values.extend(inner)
        return tuple(values)
    return None


def _type_hints(cls: type) -> dict[str, Any]:
    """The resolved field types of a dataclass; a string annotation that does not resolve in its module (a class
    defined in a function or a doctest) is read with the ``typing`` names in scope, else left out."""
    try:
        return typing.get_type_hints(cls)
    except NameError:
        module = sys.modules.get(cls.__module__)
        namespace = {**vars(typing), **(vars(module) if module is not None else {})}
        hints = {}
        for f in dataclasses.fields(cls):
            hint = f.type
            if isinstance(hint, str):
                try:
                    hint = eval(hint, namespace)  # noqa: S307 - an annotation, as typing.get_type_hints does
                except Exception:
                    continue
            hints[f.name] = hint
        return hints


def check_literals(options: Any, *, what: str = "option", where: str | None = None) -> None:
    """Check that every ``Literal[...]`` field of a dataclass instance holds one of its choices.

    Args:
        options: The dataclass instance.
        what: What a field is, for the message (``"reward option"``).
        where: The config section holding the fields (``"reward.reward_kwargs"``); the message names
            ``<where>.<field>``.

    Raises:
        ValueError: ``Invalid <what> <where>.<field>=<value>: choose one of [...]``.
    """
    hints = _type_hints(type(options))
    for f in dataclasses.fields(options):
        choices = literal_choices(hints.get(f.name))
        value = getattr(options, f.name)
        if choices is None or _is_choice(value, choices):
            continue
        key = f"{where}.{f.name}" if where else f.name
        raise ValueError(f"Invalid {what} {key}={value!r}: choose one of {[c for c in choices if c is not None]}")


def from_mapping(
    cls: type[T],
    config: Any = None,
    *,
    what: str = "option",
    where: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    ignore: Collection[str] = (),
    removed: Mapping[str, str] | None = None,
    error: type[Exception] = ValueError,
) -> T:
    """Build the options dataclass ``cls`` from a mapping, rejecting unknown keys and checking ``Literal`` fields.

    Args:
        cls: The dataclass.
        config: A plain mapping, an OmegaConf ``DictConfig`` or ``None`` (all defaults).
        what: What a key is, for the messages (``"judge option"`` -> ``Unknown judge option(s) [...]``).
        where: Where users set these keys (``"reward.reward_kwargs"``), named in the messages.
        overrides: Values that win over ``config``.
        ignore: Keys that belong to someone else in the same section (skipped, not passed to ``cls``).
        removed: Keys of earlier versions -> the sentence that says so and what to do instead; such a key fails
            with that sentence.
        error: The exception class of an unknown key (a subclass of ``ValueError`` where callers catch one).

    Returns:
        ``cls(**known keys)``; its own ``__post_init__`` checks run as usual.

    Raises:
        error: An unknown key (the message lists the valid ones) or a ``config`` that is not a mapping.
        ValueError: A ``Literal`` field holds another value (:func:`check_literals`).
    """
    values = plain_mapping(config, what=what, error=error)
    values.update(overrides or {})
    gone = sorted(k for k in values if k in (removed or {}))
    if gone:
        raise error(f"Removed {what}(s) {gone}: " + "; ".join(removed[k] for k in gone))  # type: ignore[index]
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    unknown = sorted(k for k in values if k not in names and k not in ignore)
    if unknown:
        hint = f"; set them under {where}" if where else ""
        raise error(f"Unknown {what}(s) {unknown} for {cls.__name__}; choose from {sorted(names)}{hint}")
    options = cls(**{k: v for k, v in values.items() if k in names})
    check_literals(options, what=what, where=where)
    return options
