"""The multi-stage paper's rule in the stand-in judge server (:mod:`agentrag_verl.standin`; a stand-in, not a
model): the B.4 correctness judge answers **YES** when a normalized reference occurs in the normalized prediction or
the reverse, else **NO**."""

from __future__ import annotations

import re

from agentrag_verl.judges.prompts import ANSWER_SEPARATOR
from agentrag_verl.methods.multistage.judge import JUDGE_TEMPLATE
from agentrag_verl.metrics import normalize_answer

__all__ = ["reply"]

_MARK = JUDGE_TEMPLATE.rsplit("\n", 1)[-1]  # "Only respond with YES or NO."
_PREDICTION = re.compile(r"Prediction:\s*(.*?)\s*(?:\n|$)", re.I)
_REFERENCES = re.compile(r"Reference answers?:\s*(.*?)\s*(?:\n|$)", re.I)


def reply(system: str, user: str) -> str | None:
    """YES / NO for a B.4 correctness request; None for any other prompt."""
    pred, refs = _PREDICTION.search(user), _REFERENCES.search(user)
    if _MARK not in user or not (pred and refs):
        return None
    p = normalize_answer(pred.group(1))
    golds = [normalize_answer(g) for g in refs.group(1).split(ANSWER_SEPARATOR.strip())]
    return "YES" if any(g and (g in p or (p and p in g)) for g in golds) else "NO"
