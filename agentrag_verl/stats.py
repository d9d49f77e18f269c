"""The statistics every benchmark and check here reports: a mean and its standard error over independent units
(questions, held-out pairs), from the sample standard deviation."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["mean_se"]


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """Mean of ``values`` and its standard error (sample std / sqrt(n)); the error is NaN for a single value.

    >>> mean_se([1.0, 0.0, 1.0, 0.0])  # sample std 0.577, over sqrt(4)
    (0.5, 0.28867513459481287)
    >>> mean_se([3.0])
    (3.0, nan)

    Raises:
        ValueError: No values.
    """
    n = len(values)
    if n == 0:
        raise ValueError("mean_se of no values")
    m = sum(values) / n
    if n == 1:
        return m, math.nan
    return m, math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1)) / math.sqrt(n)
