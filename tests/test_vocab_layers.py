"""Where the shared vocabulary lives: the import graph of `replay`, read from the source.

Every import counts, module-level or inside a function, because a lazy import still ties two
modules together (and hides a cycle from the interpreter until the day it bites).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "replay"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    """{module: replay modules it imports}; `from pkg import mod` counts as importing pkg.mod."""
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name.startswith("replay"))
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("replay"):
                base = node.module or ""
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    deps.add(sub if sub in modules else base)
        graph[name] = deps
    return graph


GRAPH = _graph()


def _imports(module: str, prefix: str) -> list[str]:
    return sorted(d for d in GRAPH[module] if d == prefix or d.startswith(prefix + "."))


def test_graph_sees_known_edges():
    # the reader of the source works: an edge every version of the code has
    assert "replay.protocol" in GRAPH["replay.driver.pool"]
    assert "replay.engines.external" in GRAPH["replay.engines.registry"]


@pytest.mark.parametrize(
    "module, forbidden",
    [
        ("replay.engines.sim_engines", "replay.cli"),
        ("replay.engines.external", "replay.engines.registry"),
        ("replay.sim.engine", "replay.engines"),
        ("replay.sim.transport", "replay.driver"),
        ("replay.sim.server", "replay.driver"),
        ("replay.sim.scenarios", "replay.driver"),
        ("replay.sim.options", "replay.cli"),
        ("replay.protocol", "replay.driver"),
        ("replay.counters", "replay.engines"),
    ],
)
def test_forbidden_imports(module, forbidden):
    assert _imports(module, forbidden) == []


def test_engines_have_no_import_cycle():
    engines = {m for m in GRAPH if m.startswith("replay.engines.")}
    seen: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, path: list[str]) -> None:
        seen[m] = 1
        for d in sorted(GRAPH[m] & engines):
            assert seen.get(d) != 1, " -> ".join([*path, m, d])
            if d not in seen:
                visit(d, [*path, m])
        seen[m] = 2

    for m in sorted(engines):
        if m not in seen:
            visit(m, [])


def test_driver_package_has_no_lazy_attributes():
    tree = ast.parse((ROOT / "driver" / "__init__.py").read_text())
    names = [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    assert "__getattr__" not in names


def test_simulator_options_and_records_load_without_click_or_http():
    code = (
        "import sys; import replay.sim.options, replay.driver.records, replay.protocol, "
        "replay.counters; bad = [m for m in ('click', 'httpx', 'aiohttp') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_samples_alias_defined_once():
    defined = [
        _module_name(p)
        for p in ROOT.rglob("*.py")
        for node in ast.parse(p.read_text()).body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "Samples" for t in node.targets)
    ]
    assert defined == ["replay.counters"]
