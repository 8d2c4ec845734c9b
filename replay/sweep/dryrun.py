"""`replay sweep --dry-run`: what each point would launch, exactly (argv list and environment),
without starting anything. Repeats of a point launch the same command, so points are listed once,
in the order their first repeat would run."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from replay.engines.registry import get_engine
from replay.sweep.config import Experiment
from replay.sweep.lifecycle import per_run_env
from replay.sweep.plan import plan_runs

__all__ = ["dry_run_plan", "format_plan"]


def dry_run_plan(exp: Experiment, order: str | None = None) -> list[dict[str, Any]]:
    """One entry per point: name, engine, repeats, and argv/env (None for in-process/external)."""
    seen: dict[str, dict[str, Any]] = {}
    for planned in plan_runs(exp, order):
        name = planned.point.name
        if name in seen:
            seen[name]["repeats"].append(planned.repeat_name)
            continue
        engine, options, run = exp.resolve(planned.point)
        adapter = get_engine(engine)
        entry: dict[str, Any] = {
            "point": name,
            "engine": engine,
            "repeats": [planned.repeat_name],
            "run": run,
            "argv": None,
            "env": {},
            "note": None,
        }
        if adapter.in_process:
            entry["note"] = "in process: " + ", ".join(f"{k}={v}" for k, v in options.items())
        elif adapter.server_url is not None:
            entry["note"] = f"no launch: replays against {adapter.server_url(options)}"
        else:
            port = exp.port
            spec = adapter.launch(options, exp.host, port or 8000)
            assert spec is not None
            argv = list(spec.argv)
            if spec.ready_file_flag:
                flag = spec.ready_file_flag
                spec = adapter.launch(options, exp.host, 0)
                assert spec is not None
                ready = (
                    Path(exp.results_dir) / exp.name / name / planned.repeat_name / ".server.port"
                )
                argv = [*spec.argv, flag, str(ready)]
            elif not port:
                entry["note"] = "port 8000 shown; [server] port = 0 picks a free port per run"
            entry["argv"] = argv
            run_dir = Path(exp.results_dir) / exp.name / name / planned.repeat_name
            entry["env"] = {**spec.env, **per_run_env(spec.env, run_dir)}
            entry["health"] = spec.health_path
        seen[name] = entry
    return list(seen.values())


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def format_plan(exp: Experiment, plan: list[dict[str, Any]]) -> str:
    """Human-readable listing; argv is shown as a JSON-ish list and as a copy-paste shell line."""
    shape = f"{_count(len(plan), 'point')} x {_count(exp.repeats, 'repeat')}"
    lines = [f"experiment {exp.name} ({exp.source}): {shape}"]
    for e in plan:
        lines.append(f"\n== {e['point']}  [{e['engine']}; {', '.join(e['repeats'])}]")
        lines.append(f"   run: {e['run']}")
        if e["note"]:
            lines.append(f"   {e['note']}")
        if e["argv"] is not None:
            lines.append(f"   argv: {e['argv']!r}")
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in e["env"].items())
            lines.append(f"   env: {e['env']!r}")
            lines.append(f"   shell: {env + ' ' if env else ''}{shlex.join(e['argv'])}")
    return "\n".join(lines)
