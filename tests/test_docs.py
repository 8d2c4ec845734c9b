"""The repository explains itself: links between its documents resolve, the docs index lists
every page, and nothing cites a design file or an issue tracker a reader of the repo cannot see."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
# a design document kept outside the repository, or an issue number; split so this file passes
_OUTSIDE = re.compile("DESIGN" + r"\.md|\b[Ii]ssue\s+#?\d+")
# generated from replay/studies/efficientagent (text.py, prose.py), which this test does read
_GENERATED = {DOCS / "paper.md"}


def _pages() -> list[Path]:
    return [REPO / "README.md", REPO / "results" / "README.md", *sorted(DOCS.glob("*.md"))]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: Path):
    text = page.read_text()
    broken = [
        link
        for link in _LINK.findall(text)
        if "://" not in link and not (page.parent / link).exists()
    ]
    assert broken == []


def test_docs_index_lists_every_page():
    index = (DOCS / "README.md").read_text()
    listed = set(_LINK.findall(index))
    pages = {p.name for p in DOCS.glob("*.md")} - {"README.md"}
    assert pages - listed == set()


def test_nothing_cites_what_a_reader_of_the_repo_cannot_see():
    files = [
        *REPO.glob("*.md"),
        *DOCS.glob("*.md"),
        *(REPO / "traces").glob("*.md"),
        *(REPO / "results").glob("*.md"),
        *(REPO / "replay").rglob("*.py"),
        *(REPO / "tests").rglob("*.py"),
        *(REPO / "benchmarks").rglob("*.py"),
        *(REPO / "experiments").rglob("*.toml"),
        REPO / "Makefile",
    ]
    hits = [
        f"{f.relative_to(REPO)}:{n}: {line.strip()[:80]}"
        for f in files
        if f not in _GENERATED
        for n, line in enumerate(f.read_text().splitlines(), 1)
        if _OUTSIDE.search(line)
    ]
    assert hits == []


def _readme_commands() -> list[str]:
    """The lines of README.md's Commands block (each starts with `replay`)."""
    text = (REPO / "README.md").read_text().split("## Commands", 1)[1]
    block = text.split("```", 2)[1]
    return [line.split("#", 1)[0] for line in block.splitlines() if line.startswith("replay ")]


def test_readme_commands_name_real_subcommands_and_options():
    import click

    from replay.cli.main import cli

    lines = _readme_commands()
    assert len(lines) >= 15
    for line in lines:
        words = line.split()[1:]
        cmd: click.Command | None = cli
        while isinstance(cmd, click.Group) and words:
            sub = cmd.get_command(click.Context(cmd), words[0])  # the CLI loads them lazily
            if sub is None:
                break
            cmd = sub
            words.pop(0)
        assert cmd is not None
        assert not isinstance(cmd, click.Group), f"README names no subcommand: {line}"
        opts = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
        for flag in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", " ".join(words)):
            assert flag in opts, f"README: {line.strip()}: {cmd.name} has no {flag}"


def test_every_simulator_option_is_in_the_options_table():
    from replay.cli.sim_options import _OPTIONS

    doc = (DOCS / "simulator.md").read_text().split("## Options (SIMOPTS)", 1)[1]
    table = doc.split("\n## ", 1)[0]
    rows = {
        line.split("|")[1].strip().strip("`")
        for line in table.splitlines()
        if line.startswith("| `")
    }
    missing = {flag for flag, _ in _OPTIONS} - rows
    assert not missing, f"docs/simulator.md's options table lacks {sorted(missing)}"
