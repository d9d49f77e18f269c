"""One way to report a failure that repeats: the first of each cause is a WARNING, its repeats are DEBUG lines and a
count, and the end of the job prints the counts in one line (:meth:`FailureLog.summary`).

A wrong API key or a server that is down fails every request the same way; a line per request buries the one
line that says so (an eval of 35 questions printed the same error 106 times). The judge client
(:mod:`agentrag_verl.judges.client`, one cause per error kind) and the eval harness (:mod:`agentrag_verl.eval.harness`,
one cause per distinct error message) report through it.

>>> import logging
>>> log = FailureLog(logging.getLogger("example"))
>>> [log.record("HTTP 401: bad key", f"q{i} failed: HTTP 401: bad key") for i in range(3)]
[True, False, False]
>>> log.summary()
'3 × HTTP 401: bad key'
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

__all__ = ["FailureLog"]


class FailureLog:
    """Counts failures by cause; logs the first of each cause at WARNING and its repeats at DEBUG.

    Args:
        logger: Where the lines go; ``None`` only counts (to summarize failures reported elsewhere).

    Thread-safe.
    """

    def __init__(self, logger: logging.Logger | None) -> None:
        self.logger = logger
        self.counts: Counter[str] = Counter()
        """Failures so far, by cause."""
        self.examples: dict[str, str] = {}
        """What failed first, by cause (the ``example`` given with it)."""
        self._lock = threading.Lock()

    def record(self, cause: str, line: str, example: str = "") -> bool:
        """Count one failure of ``cause`` and log ``line``: at WARNING the first time, at DEBUG after that.

        Args:
            cause: What identifies the failure (equal causes are one failure repeated), e.g. the error message.
            line: The log line; say in it that repeats are counted (the first one is all a user sees).
            example: What failed (e.g. a question's key), named by :meth:`summary`.

        Returns:
            Whether this was the first failure of ``cause``.
        """
        with self._lock:
            self.counts[cause] += 1
            first = self.counts[cause] == 1
            if first:
                self.examples[cause] = example
        if self.logger is not None:
            self.logger.log(logging.WARNING if first else logging.DEBUG, "%s", line)
        return first

    def summary(self, limit: int = 3) -> str:
        """The causes, most frequent first, as ``"N × cause (e.g. example)"`` joined by ``"; "``; at most ``limit``
        of them, then how many more.

        >>> log = FailureLog(logging.getLogger("example"))
        >>> for cause in ("a", "b", "a", "c"):
        ...     _ = log.record(cause, cause, example=f"x{cause}")
        >>> log.summary(limit=2)
        '2 × a (e.g. xa); 1 × b (e.g. xb); and 1 more cause'
        """
        with self._lock:
            ranked = self.counts.most_common()
            examples = dict(self.examples)
        parts = [f"{n} × {cause}" + (f" (e.g. {examples[cause]})" if examples[cause] else "") for cause, n in ranked]
        rest = len(parts) - limit
        shown = "; ".join(parts[:limit])
        return shown + (f"; and {rest} more cause{'s' if rest > 1 else ''}" if rest > 0 else "")
