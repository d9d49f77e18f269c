"""The GPU install line of ``docs/gpu.md`` against the installed verl's own metadata: every verl extra it names
exists, the flash-attn pin is the one verl makes for its torch, and no extra it installs pins trl outside the range
our ``dpo`` extra requires (``verl[fsdp]`` pins ``trl==0.27.0``, which is why the page names extras instead)."""

from __future__ import annotations

import re
from importlib.metadata import requires
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]


def verl_requirements(extra: str) -> list[Requirement]:
    """What ``verl[extra]`` installs, its nested extras (``verl[verl-core]``) expanded."""
    out = []
    for line in requires("verl") or []:
        req = Requirement(line)
        if req.marker is None or not req.marker.evaluate({"extra": extra}):
            continue
        if req.name == "verl":
            for nested in req.extras:
                out += verl_requirements(nested)
        else:
            out.append(req)
    return out


def gpu_install_line() -> Requirement:
    text = (REPO / "docs" / "gpu.md").read_text()
    match = re.search(r'pip install "(verl\[[^"]+\]==[^"]+)"', text)
    assert match, 'docs/gpu.md has no `pip install "verl[...]==..."` line'
    return Requirement(match.group(1))


def dpo_trl() -> Requirement:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return next(Requirement(r) for r in extras["dpo"] if Requirement(r).name == "trl")


def test_the_documented_extras_exist_and_leave_trl_to_our_dpo_extra():
    line = gpu_install_line()
    assert str(line.specifier) == "==0.9.1"
    extras = set(line.extras)
    assert extras and "fsdp" not in extras
    available = {Requirement(r).marker and str(Requirement(r).marker) for r in requires("verl")}
    for extra in extras:
        assert any(f'extra == "{extra}"' in (m or "") for m in available), f"verl 0.9.1 has no extra {extra!r}"
    installed = [r for e in extras for r in verl_requirements(e)]
    ours = dpo_trl()
    for req in installed:
        if req.name == "trl":  # a pin must admit a version our dpo extra admits too
            assert any(v in ours.specifier for v in _pinned(req)), f"{req} conflicts with our {ours}"
    # the extra the page avoids does pin trl outside our range (the reason it is avoided)
    fsdp_trl = [r for r in verl_requirements("fsdp") if r.name == "trl"]
    assert fsdp_trl and not any(v in ours.specifier for v in _pinned(fsdp_trl[0]))


def test_flash_attn_is_pinned_as_verl_pins_it():
    pins = {str(r.specifier) for e in gpu_install_line().extras for r in verl_requirements(e) if r.name == "flash-attn"}
    assert pins == {"==2.8.3"}, pins  # installed through verl's flash-attn-cu130torch211 extra
    assert "flash-attn==2.8.3" in (REPO / "docs" / "gpu.md").read_text()  # the page's manual build line agrees
    assert "pip install flash-attn --no-build-isolation" not in (REPO / "README.md").read_text()  # no unpinned line


def _pinned(req: Requirement) -> list[str]:
    return [s.version for s in req.specifier if s.operator == "=="]
