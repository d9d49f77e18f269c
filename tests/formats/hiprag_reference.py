"""A line-by-line transcription of HiPRAG Algorithms 2-3 with ``str`` methods: the oracle that the optimized
checker in :mod:`agentrag_verl.methods.hiprag.grammar` (one tag scan instead of repeated counts) must agree with."""

from typing import Any

from agentrag_verl.formats.base import as_text

_FAIL = (0, -1)
_THINK_O, _THINK_C = "<think>", "</think>"
_ANSWER_O, _ANSWER_C = "<answer>", "</answer>"
_STEP_O, _STEP_C = "<step>", "</step>"
_REASON_O, _REASON_C = "<reasoning>", "</reasoning>"
_CONCL_O, _CONCL_C = "<conclusion>", "</conclusion>"
_SEARCH_O, _SEARCH_C = "<search>", "</search>"
_CTX_O, _CTX_C = "<context>", "</context>"


def _span_between(s: str, open_tag: str, close_tag: str) -> tuple[int, int, int, int] | None:
    """``SpanBetween``: (open tag start, content start, content end = close tag start, close tag end)."""
    o = s.find(open_tag)
    if o < 0:
        return None
    cs = o + len(open_tag)
    c = s.find(close_tag, cs)
    if c < 0:
        return None
    return o, cs, c, c + len(close_tag)


def reference_validate_step(body: str) -> bool:
    """Algorithm 3 (``ValidateStep``): whether a ``<step>`` body matches one of the two step schemas.

    Args:
        body: Text between ``<step>`` and ``</step>``.

    Returns:
        True iff the body is ``<reasoning>`` then (``<search>`` ``<context>``) then ``<conclusion>``, each tag
        exactly once, in order, with only whitespace between and around them.

    """
    s = body.strip()  # l. 3
    if s.count(_REASON_O) != 1 or s.count(_REASON_C) != 1:  # l. 4
        return False
    r = _span_between(s, _REASON_O, _REASON_C)  # l. 5
    if r is None or r[0] != 0:  # l. 6: <reasoning> must be first (s is stripped, so nothing may precede it)
        return False
    if s.count(_CONCL_O) != 1 or s.count(_CONCL_C) != 1:  # l. 7
        return False
    c = _span_between(s, _CONCL_O, _CONCL_C)  # l. 8
    if c is None or c[0] < r[3]:  # l. 9: <conclusion> after </reasoning>
        return False
    if c[3] != len(s):  # l. 10: the step ends at </conclusion> (s is stripped)
        return False
    if _SEARCH_O in s or _CTX_O in s:  # l. 13: case A, step with search
        if s.count(_SEARCH_O) != 1 or s.count(_SEARCH_C) != 1:  # l. 14
            return False
        if s.count(_CTX_O) != 1 or s.count(_CTX_C) != 1:  # l. 15
            return False
        q = _span_between(s, _SEARCH_O, _SEARCH_C)  # l. 16
        x = _span_between(s, _CTX_O, _CTX_C)  # l. 17
        if q is None or x is None:
            return False
        if q[0] < r[3] or x[0] < q[3] or c[0] < x[3]:  # l. 18: strict order
            return False
        # l. 19: nothing but whitespace between the blocks
        return not (s[r[3] : q[0]].strip() or s[q[3] : x[0]].strip() or s[x[3] : c[0]].strip())
    return not s[r[3] : c[0]].strip()  # l. 24-26: case B (l. 24 cannot fire after l. 13)


def reference_check_format(response: Any) -> tuple[int, int]:
    """Algorithm 2, the format checker F(T).

    Args:
        response: The model's whole response (with the environment's ``<context>`` blocks).

    Returns:
        ``(1, N)`` with N the number of steps, or ``(0, -1)``.

    """
    y = as_text(response)
    if "\r" in y:  # l. 3: canonicalize newlines
        y = y.replace("\r\n", "\n").replace("\r", "\n")
    if y.count(_THINK_O) != 1 or y.count(_THINK_C) != 1:  # l. 4
        return _FAIL
    th = _span_between(y, _THINK_O, _THINK_C)  # l. 5
    if th is None:
        return _FAIL
    if y[: th[0]].strip():  # l. 6: no stray text before <think>
        return _FAIL
    t = y[th[1] : th[2]]  # l. 7
    post = y[th[3] :]  # l. 8
    if not post.lstrip().startswith(_ANSWER_O):  # l. 9
        return _FAIL
    if post.count(_ANSWER_O) != 1 or post.count(_ANSWER_C) != 1:  # l. 10
        return _FAIL
    a = _span_between(post, _ANSWER_O, _ANSWER_C)  # l. 11
    if a is None or not post[a[1] : a[2]].strip():  # l. 12: non-empty answer
        return _FAIL
    if post[a[3] :].strip():  # l. 13: no trailing junk
        return _FAIL
    p = 0  # l. 16
    n = 0
    while True:  # l. 17
        j = t.find(_STEP_O, p)  # l. 18
        if j < 0:  # l. 19
            if t[p:].strip():  # l. 20: no stray text between steps
                return _FAIL
            break
        if t[p:j].strip():  # l. 23: no text before the next <step>
            return _FAIL
        k = t.find(_STEP_C, j)  # l. 24
        if k < 0:  # l. 25
            return _FAIL
        if not reference_validate_step(t[j + len(_STEP_O) : k]):  # l. 26-27
            return _FAIL
        p = k + len(_STEP_C)  # l. 28
        n += 1
    if n < 1:  # l. 30
        return _FAIL
    return 1, n  # l. 31
