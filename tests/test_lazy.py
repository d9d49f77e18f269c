"""``agentrag_verl._lazy``: a package's exports resolve on first access, unknown names fail like on any module."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def test_exports_resolve_on_first_access_only():
    # agentrag_verl.eval lists its exports lazily; the harness module is imported by the first access, not before.
    code = (
        "import sys, json, agentrag_verl.eval as e\n"
        "before = 'agentrag_verl.eval.harness' in sys.modules\n"
        "config = e.EvalConfig\n"
        "print(json.dumps([before, 'agentrag_verl.eval.harness' in sys.modules, config.__module__,"
        " 'EvalConfig' in dir(e), 'EvalConfig' in e.__all__]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [False, True, "agentrag_verl.eval.harness", True, True]


def test_unknown_name_is_an_attribute_error():
    import agentrag_verl.tools as tools

    with pytest.raises(AttributeError, match="has no attribute 'RetrieverKlient'"):
        tools.RetrieverKlient  # noqa: B018
    assert not hasattr(tools, "nope")
