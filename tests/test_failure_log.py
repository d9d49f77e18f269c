"""FailureLog: the first failure of each cause is a WARNING, its repeats DEBUG lines and a count."""

from __future__ import annotations

import logging

from agentrag_verl.failure_log import FailureLog


def test_first_of_each_cause_is_a_warning(caplog):
    log = FailureLog(logging.getLogger("test.failure_log"))
    with caplog.at_level(logging.DEBUG, logger="test.failure_log"):
        for i in range(5):
            log.record("HTTP 401", f"q{i}: HTTP 401", example=f"q{i}")
        log.record("timeout", "q5: timeout", example="q5")
    levels = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [m for lvl, m in levels if lvl == "WARNING"] == ["q0: HTTP 401", "q5: timeout"]
    assert sum(lvl == "DEBUG" for lvl, _ in levels) == 4
    assert log.summary() == "5 × HTTP 401 (e.g. q0); 1 × timeout (e.g. q5)"


def test_without_a_logger_it_only_counts(caplog):
    log = FailureLog(None)
    with caplog.at_level(logging.DEBUG):
        log.record("a", "a line")
    assert not caplog.records and log.counts == {"a": 1}
