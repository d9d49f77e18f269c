"""Trajectory grammars: the shared :class:`Format` machinery and the registry every later piece looks grammars up in.

Each method defines its grammar in ``agentrag_verl/methods/<name>/grammar.py`` (parse, structure check, prompts,
action spec) and registers it with its :class:`~agentrag_verl.registry.Method` when its package is imported;
:func:`get_format` discovers the methods on the first lookup (:mod:`agentrag_verl.registry`), so this package
imports none of them. A format's name is its method's name. Use :func:`get_format`:

>>> fmt = get_format("hiprag")
>>> fmt.check_format("<think><step><reasoning>r</reasoning><conclusion>c</conclusion></step></think><answer>a</answer>")
(1, 1)
>>> fmt.parse("<think><step><reasoning>r</reasoning><conclusion>c</conclusion></step></think><answer>a</answer>").answer
'a'
"""

from __future__ import annotations

from agentrag_verl.formats.base import Action, ActionSpec, Format, PromptTemplate, Step, Trajectory, format_docs
from agentrag_verl.registry import load_methods, method_rank

__all__ = [
    "get_format",
    "available_formats",
    "register_format",
    "Format",
    "Trajectory",
    "Step",
    "Action",
    "ActionSpec",
    "PromptTemplate",
    "format_docs",
]

_FORMATS: dict[str, Format] = {}


def available_formats() -> list[str]:
    """Registered format names, in method order, then other formats in registration order.

    >>> available_formats()
    ['searchr1', 'hiprag', 'multistage', 'reasonrag', 'searchp1', 'autosearch']
    """
    load_methods()
    return sorted(_FORMATS, key=method_rank)


def register_format(fmt: Format, *, replace: bool = False) -> Format:
    """Make ``fmt`` available to :func:`get_format` (agent loops, reward parts, eval) under ``fmt.name``.

    Registration is per process: call it in your method package's ``__init__`` and name that package in the
    ``agentrag_verl.methods`` entry-point group, so every process (Ray workers too) finds it on its first lookup
    (:mod:`agentrag_verl.registry`).

    Raises:
        ValueError: The name is taken by another format and ``replace`` is false (the same format again is fine).
    """
    key = str(fmt.name).strip().lower()
    if not replace and _FORMATS.get(key, fmt) is not fmt:
        raise ValueError(f"Trajectory format {key!r} is already registered; pick another name or pass replace=True.")
    _FORMATS[key] = fmt
    return fmt


def get_format(name: str) -> Format:
    """Look up a trajectory format by name (case-insensitive).

    Raises:
        ValueError: If ``name`` is unknown; the message lists the valid names.
    """
    key = str(name).strip().lower()
    if key not in _FORMATS:
        load_methods()
    try:
        return _FORMATS[key]
    except KeyError:
        raise ValueError(
            f"Unknown trajectory format {name!r}; choose one of {available_formats()}. Set the format name of your "
            "data prep, agent loop or reward config (format=<name>)."
        ) from None
