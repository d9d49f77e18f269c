"""Trajectory grammars: the shared :class:`Format` machinery and the registry every later piece looks grammars up in.

Each method defines its grammar in ``agentrag_verl/methods/<paper>/grammar.py`` (parse, structure check, prompts,
action spec) and registers it when its package is imported; :func:`get_format` discovers the methods on the first
lookup (:mod:`agentrag_verl.registry`), so this package imports none of them:

=============  ===================================================  ==========================================
name           grammar                                              ``check_format`` returns
=============  ===================================================  ==========================================
``searchr1``   ``methods/searchr1/grammar.py`` (+AutoSearch)        ``bool``; AutoSearch: ``step_validity``
``hiprag``     ``methods/hiprag/grammar.py``                        ``(F, N)``, Algorithms 2-3
``multistage`` ``methods/multistage/grammar.py``                    ``bool`` (the two structures)
``reasonrag``  ``methods/reasonrag/grammar.py``                     ``bool`` (staged transcript)
``searchp1``   ``methods/searchp1/grammar.py``                      ``FormatLevel`` (Algorithm 3)
=============  ===================================================  ==========================================

``autosearch`` is an alias of ``searchr1`` (registered by ``methods/autosearch``). Use :func:`get_format`:

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
    "register_alias",
    "Format",
    "Trajectory",
    "Step",
    "Action",
    "ActionSpec",
    "PromptTemplate",
    "format_docs",
]

_FORMATS: dict[str, Format] = {}
_ALIASES: dict[str, str] = {}


def available_formats() -> list[str]:
    """Registered format names (aliases excluded), in method order, then other formats in registration order.

    >>> available_formats()
    ['searchr1', 'hiprag', 'multistage', 'reasonrag', 'searchp1']
    """
    load_methods()
    return sorted(_FORMATS, key=method_rank)


def register_format(fmt: Format, *, replace: bool = False) -> Format:
    """Make ``fmt`` available to :func:`get_format` (agent loops, reward parts, eval) under ``fmt.name``.

    Registration is per process: call it in your method package's ``__init__`` and name that package in the
    ``agentrag_verl.methods`` entry-point group, so every process (Ray workers too) finds it on its first lookup
    (:mod:`agentrag_verl.registry`).

    Raises:
        ValueError: The name is taken (by a built-in format or an alias) and ``replace`` is false.
    """
    key = str(fmt.name).strip().lower()
    if not replace and (key in _FORMATS or key in _ALIASES):
        raise ValueError(f"Trajectory format {key!r} is already registered; pick another name or pass replace=True.")
    _FORMATS[key] = fmt
    return fmt


def register_alias(alias: str, name: str) -> None:
    """Make ``alias`` another name of the registered format ``name`` (excluded from :func:`available_formats`).

    Raises:
        ValueError: ``alias`` is taken by a format, or ``name`` is not registered.
    """
    key, target = str(alias).strip().lower(), str(name).strip().lower()
    if key in _FORMATS:
        raise ValueError(f"Trajectory format {key!r} is already registered; pick another alias.")
    if target not in _FORMATS:
        raise ValueError(f"Cannot alias {key!r} to {target!r}: no such format is registered.")
    _ALIASES[key] = target


def get_format(name: str) -> Format:
    """Look up a trajectory format by name (case-insensitive; ``autosearch`` is ``searchr1``).

    Raises:
        ValueError: If ``name`` is unknown; the message lists the valid names.
    """
    key = str(name).strip().lower()
    if _ALIASES.get(key, key) not in _FORMATS:
        load_methods()
    key = _ALIASES.get(key, key)
    try:
        return _FORMATS[key]
    except KeyError:
        valid = [*_FORMATS, *_ALIASES]
        raise ValueError(
            f"Unknown trajectory format {name!r}; choose one of {valid}. Set the format name of your data prep, "
            f"agent loop or reward config (e.g. format=hiprag)."
        ) from None
