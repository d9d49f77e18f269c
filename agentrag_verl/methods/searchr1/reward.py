"""Search-R1 baseline rewards (``docs/methods/searchr1.md``).

Paper: Search-R1 (Jin et al., 2025), as restated by HiPRAG §3 ("baseline" = λp 0) and AutoSearch §5.

- v0.1: the reward is the exact match of the last answer (:func:`exact_match_reward`).
- v0.3: outcome + format (:func:`outcome_format_reward`): correct & valid 1; correct & invalid ``1 - λf``;
  wrong & valid ``λf``; else 0. This is HiPRAG Eq. 1 with ``λp = 0``.
"""

from __future__ import annotations

__all__ = ["exact_match_reward", "outcome_format_reward"]


def exact_match_reward(answer_correct: bool | float) -> float:
    """Search-R1 v0.1 reward: 1.0 when the final answer is an exact match, else 0.0.

    >>> exact_match_reward(True), exact_match_reward(0.0)
    (1.0, 0.0)
    """
    return 1.0 if answer_correct else 0.0


def outcome_format_reward(answer_correct: bool | float, format_ok: bool | float, lambda_f: float = 0.2) -> float:
    """Search-R1 v0.3 outcome + format reward ``A(1 - λf) + λf·F`` (range ``[0, 1]`` for ``λf`` in ``[0, 1]``).

    Args:
        answer_correct: ``A``, whether the final answer is correct (any truthy value counts).
        format_ok: ``F``, whether the response follows the format.
        lambda_f: Format weight ``λf`` (0.2 in Search-R1 v0.3 and HiPRAG).

    >>> outcome_format_reward(True, True), outcome_format_reward(True, False)
    (1.0, 0.8)
    >>> outcome_format_reward(False, True), outcome_format_reward(False, False)
    (0.2, 0.0)
    """
    a = 1.0 if answer_correct else 0.0
    f = 1.0 if format_ok else 0.0
    return a * (1.0 - lambda_f) + lambda_f * f
