"""The repository explains itself: nothing outside ``docs/`` cites the project's private specification or a path
outside the repository, and every link to a page under ``docs/`` (with its ``#anchor``) resolves.

Both checks run over the tracked files (``git ls-files``), so they see exactly what a clone holds."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve().relative_to(REPO).as_posix()

OUTSIDE_CITATIONS = re.compile(r"\bSPEC\b|\.\./shared\b")
"""The project's private spec (``SPEC §3``, ``SPEC.md``) and the folder beside the repository that holds it."""

DOCS_REFERENCE = re.compile(r"(?<![\w./-])docs/[\w./-]*?\.md(?:#[\w-]+)?")
"""A literal ``docs/<page>.md`` or ``docs/<page>.md#<anchor>`` (docstrings, comments, READMEs), read from the root."""

MARKDOWN_LINK = re.compile(r"\]\(([^()\s]+?\.md)(#[\w-]+)?\)")
"""A relative Markdown link to a page, ``[text](path.md#anchor)``, read from the linking file's folder."""

HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def tracked_files() -> list[str]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: the checks read the tracked files")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p]


def read_text(path: str) -> str | None:
    try:
        return (REPO / path).read_text(encoding="utf-8")
    except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
        return None  # binary, or deleted in the work tree


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: inline markup dropped, lower case, only letters, digits, ``_``,
    ``-`` and spaces kept, spaces turned into ``-``.

    >>> github_slug("Measured (`benchmarks/retriever_shards.py`)")
    'measured-benchmarksretriever_shardspy'
    >>> github_slug("4. A new method: one folder")
    '4-a-new-method-one-folder'
    """
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # [text](url) -> text
    text = text.replace("`", "").replace("*", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every heading anchor of a Markdown page (outside code fences; repeated headings get ``-1``, ``-2``...)."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in markdown.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            slug = github_slug(match.group(2))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def broken_links(path: str, text: str) -> list[str]:
    """``path: target`` for every ``docs/`` reference or relative Markdown link in ``text`` that does not resolve."""
    targets: list[tuple[Path, str]] = []
    for match in DOCS_REFERENCE.finditer(text):
        page, _, anchor = match.group(0).partition("#")
        targets.append((REPO / page, anchor))
    if path.endswith(".md"):
        for match in MARKDOWN_LINK.finditer(text):
            page = match.group(1)
            if "://" in page:
                continue
            targets.append(((REPO / path).parent / page, (match.group(2) or "#")[1:]))
    broken = []
    for page, anchor in targets:
        shown = f"{path}: {page.resolve().relative_to(REPO) if page.resolve().is_relative_to(REPO) else page}"
        if not page.is_file():
            broken.append(f"{shown} (no such page)")
        elif anchor and anchor not in anchors(page.read_text(encoding="utf-8")):
            broken.append(f"{shown}#{anchor} (no such heading)")
    return broken


def test_nothing_outside_docs_cites_the_spec_or_paths_outside_the_repository():
    offenders = []
    for path in tracked_files():
        if path.startswith("docs/") or path == THIS:
            continue
        text = read_text(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if OUTSIDE_CITATIONS.search(line):
                offenders.append(f"{path}:{number}: {line.strip()[:100]}")
    assert not offenders, (
        "cite the docs/ page (and anchor) that holds the fact, or the paper's section/equation, instead of:\n"
        + "\n".join(offenders)
    )


def test_every_docs_link_resolves_to_a_page_and_heading():
    broken = []
    for path in tracked_files():
        if path == THIS:
            continue
        text = read_text(path)
        if text is not None:
            broken += broken_links(path, text)
    assert not broken, "links to docs/ pages that do not resolve:\n" + "\n".join(broken)


def test_the_link_check_catches_a_missing_page_or_heading():
    text = (
        "See ``docs/decisions.md#rollout-and-budgets`` and docs/decisions.md#no-such-heading, "
        "``docs/no_such_page.md`` and [shared](docs/decisions.md#answer-metrics)."
    )
    broken = broken_links("README.md", text)
    assert broken == [
        "README.md: docs/decisions.md#no-such-heading (no such heading)",
        "README.md: docs/no_such_page.md (no such page)",
    ]
    assert not broken_links("notes.txt", "a path like mydocs/x.md is not a docs/ reference")
    # GitHub's anchors: inline code and punctuation dropped, spaces to hyphens, repeats numbered
    assert github_slug("Measured (`benchmarks/retriever_shards.py`)") == "measured-benchmarksretriever_shardspy"
    assert anchors("# A\n## Decisions\n```\n# not a heading\n```\n## Decisions\n") == {"a", "decisions", "decisions-1"}
    assert OUTSIDE_CITATIONS.search("see SPEC §4") and OUTSIDE_CITATIONS.search("../shared/papers/x.txt")
    assert not OUTSIDE_CITATIONS.search("ACTION_SPEC = ActionSpec(...); TORCH_SPEC ?= torch")


def test_method_pages_exist_for_every_method_folder():
    methods = sorted(p.name for p in (REPO / "agentrag_verl" / "methods").iterdir() if (p / "__init__.py").is_file())
    assert methods == ["autosearch", "hiprag", "multistage", "reasonrag", "searchp1", "searchr1"]
    for name in methods:
        page = (REPO / "docs" / "methods" / f"{name}.md").read_text(encoding="utf-8")
        assert "decisions" in anchors(page), f"docs/methods/{name}.md has no Decisions section"
