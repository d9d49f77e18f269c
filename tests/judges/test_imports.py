"""Light imports: the judges package imports no heavy stack, and not even ``openai`` until a client is built."""

from __future__ import annotations

import json
import subprocess
import sys


def test_judges_import_is_light():
    code = (
        "import agentrag_verl.judges as j\n"
        "from agentrag_verl.judges import client, config, parsers, policy, prompts\n"
        "j.JudgeConfig, j.Verdict\n"
        "import sys, json; print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    heavy = ["torch", "faiss", "ray", "ray.serve", "vllm", "openai", "aiohttp"]
    assert not [m for m in heavy if m in loaded]
    # shared machinery: the papers' judges live in agentrag_verl/methods/<paper>/judge.py, none is imported here
    assert not [m for m in loaded if m.startswith("agentrag_verl.methods")]
