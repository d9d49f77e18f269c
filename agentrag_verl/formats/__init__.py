"""Trajectory grammars: one module per paper's output format (parse, structure check, prompts, action spec).

Every later piece (agent loops, rewards, evaluation) reads trajectories through these modules:

=============  ===================================================  ==========================================
name           module                                               ``check_format`` returns
=============  ===================================================  ==========================================
``searchr1``   :mod:`~agentrag_verl.formats.searchr1` (+AutoSearch)  ``bool``; AutoSearch: ``step_validity``
``hiprag``     :mod:`~agentrag_verl.formats.hiprag`                  ``(F, N)``, Algorithms 2-3
``multistage`` :mod:`~agentrag_verl.formats.multistage`              ``bool`` (the two structures)
``reasonrag``  :mod:`~agentrag_verl.formats.reasonrag`               ``bool`` (staged transcript)
``searchp1``   :mod:`~agentrag_verl.formats.searchp1`                ``FormatLevel`` (Algorithm 3)
=============  ===================================================  ==========================================

``autosearch`` is an alias of ``searchr1``. Use :func:`get_format`:

>>> fmt = get_format("hiprag")
>>> fmt.check_format("<think><step><reasoning>r</reasoning><conclusion>c</conclusion></step></think><answer>a</answer>")
(1, 1)
>>> fmt.parse("<think><step><reasoning>r</reasoning><conclusion>c</conclusion></step></think><answer>a</answer>").answer
'a'
"""

from __future__ import annotations

from . import hiprag, multistage, reasonrag, searchp1, searchr1
from .base import Action, ActionSpec, Format, PromptTemplate, Step, Trajectory, format_docs

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

_FORMATS: dict[str, Format] = {m.FORMAT.name: m.FORMAT for m in (searchr1, hiprag, multistage, reasonrag, searchp1)}
_ALIASES = {"autosearch": "searchr1"}


def available_formats() -> list[str]:
    """Registered format names (aliases excluded).

    >>> available_formats()
    ['searchr1', 'hiprag', 'multistage', 'reasonrag', 'searchp1']
    """
    return list(_FORMATS)


def register_format(fmt: Format, *, replace: bool = False) -> Format:
    """Make ``fmt`` available to :func:`get_format` (agent loops, reward parts, eval) under ``fmt.name``.

    Registration is per process: call it at import time of a module every process imports (your ``verl.plugins``
    entry point, or the module of your agent loop / reward manager), so Ray workers see it too.

    Raises:
        ValueError: The name is taken (by a built-in format or an alias) and ``replace`` is false.
    """
    key = str(fmt.name).strip().lower()
    if not replace and (key in _FORMATS or key in _ALIASES):
        raise ValueError(f"Trajectory format {key!r} is already registered; pick another name or pass replace=True.")
    _FORMATS[key] = fmt
    return fmt


def get_format(name: str) -> Format:
    """Look up a trajectory format by name (case-insensitive; ``autosearch`` is ``searchr1``).

    Raises:
        ValueError: If ``name`` is unknown; the message lists the valid names.
    """
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    try:
        return _FORMATS[key]
    except KeyError:
        valid = [*_FORMATS, *_ALIASES]
        raise ValueError(
            f"Unknown trajectory format {name!r}; choose one of {valid}. Set the format name of your data prep, "
            f"agent loop or reward config (e.g. format=hiprag)."
        ) from None
