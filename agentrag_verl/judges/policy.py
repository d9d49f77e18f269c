"""What a failed judge verdict means: the shared mechanics (the per-paper policies live with each method).

A failed :class:`~agentrag_verl.judges.client.Verdict` (timeout, HTTP error, unparsable reply after retries) has
``ok=False`` and never raises; each method's ``judge.py`` turns any verdict into the value its reward consumes,
with a failure policy chosen from a ``str`` enum (HiPRAG ``exclude`` / ``optimal`` / ``suboptimal``, the multi-stage
string-metric fallback, ...). Failures are counted by the client's metrics (``judge/failures/<kind>``) whatever the
policy. :func:`choose_policy` reads such an option and names the choices when it is unknown.
"""

from __future__ import annotations

import enum
from typing import Any, TypeVar

__all__ = ["choose_policy"]

E = TypeVar("E", bound=enum.Enum)


def choose_policy(enum_cls: type[E], value: Any, key: str) -> E:
    """The member of ``enum_cls`` that ``value`` names (a member passes through).

    Args:
        enum_cls: The policy enum (a ``str`` enum whose values are the option's spellings).
        value: A member or its value.
        key: The config key that sets the option, named in the error.

    Raises:
        ValueError: ``value`` names no member; the message lists the choices and ``key``.

    >>> class Fallback(str, enum.Enum):
    ...     ZERO = "zero"
    >>> choose_policy(Fallback, "zero", "reward.reward_kwargs.fallback")
    <Fallback.ZERO: 'zero'>
    >>> choose_policy(Fallback, "one", "reward.reward_kwargs.fallback")
    Traceback (most recent call last):
    ...
    ValueError: Unknown judge error policy 'one'; choose one of ['zero']; set reward.reward_kwargs.fallback
    """
    if isinstance(value, enum_cls):
        return value
    try:
        return enum_cls(value)
    except ValueError:
        choices = [m.value for m in enum_cls]
        raise ValueError(f"Unknown judge error policy {value!r}; choose one of {choices}; set {key}") from None
