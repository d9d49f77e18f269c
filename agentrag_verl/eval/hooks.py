"""What a method adds to the evaluation: its own per-question metrics, judged or not, and their aggregation.

A method declares an :class:`EvalHooks` object (:attr:`agentrag_verl.registry.Method.eval_hooks`). The harness keeps
each method's per-question entry under the method's name in the result record (``record[<method>]``: a dict, or
None when the method has nothing to say about that trajectory), aggregates the entries per dataset with
:meth:`EvalHooks.dataset`, and shows :attr:`EvalHooks.columns` in the summary tables. The shared evaluation never
names a method: it asks the registry (:func:`method_hooks`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["EvalHooks", "method_hooks"]


class EvalHooks:
    """Base class (every hook optional). Subclass it in ``methods/<name>/evaluation.py``."""

    columns: tuple[tuple[str, str, bool], ...] = ()
    """``(metric key, column title, shown as a percentage)`` of the summary tables, in order."""
    summed: tuple[str, ...] = ()
    """Dataset metrics the ``average`` row sums instead of averaging (counts, such as failed verdicts)."""

    def question(
        self, format_name: str, response: str, golds: Sequence[str], fields: Mapping[str, Any], trajectory: Any
    ) -> dict[str, Any] | None:
        """The method's string metrics of one trajectory (``trajectory``: the format's parse), or None."""
        return None

    async def judged(
        self, judge: Any, format_name: str, response: str, fields: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """The method's judged metrics of one trajectory (``judge``: a :class:`agentrag_verl.judges.JudgeClient`),
        or None; merged into the question's entry."""
        return None

    def dataset(self, entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The dataset metrics from the entries of one dataset's questions (possibly none)."""
        return {}

    def failed(self, entry: Mapping[str, Any]) -> str | None:
        """The metrics of an entry that a failed judge verdict left uncomputed (e.g. ``"x_osr/x_usr"``), or None."""
        return None


def method_hooks() -> dict[str, EvalHooks]:
    """``{method name: hooks}`` of every method that declares evaluation hooks, in method order."""
    from agentrag_verl.registry import methods

    return {m.name: m.load("eval_hooks") for m in methods() if m.eval_hooks}
