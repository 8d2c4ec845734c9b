"""Calibrate on some points of a sweep, simulate the others, and report the held-out errors.

`calibrate(results, fit_points, costs_path)` fits the cost model (replay.calibrate.fit) to the
calls of the named points' runs, writes the costs file, then replays the experiment's trace through
the simulator at every point (fitted costs, the engine's personality, the point's cache sizes) and
compares each with the mean of that point's measured runs. Errors are signed and relative,
(simulated - measured) / measured; the device hit fraction's is the difference of fractions.

With `per_run_speed` (a shared, loaded machine), the fit gives each fitted run a speed factor
(replay.calibrate.fit) and every other run gets one from its own records at the fitted costs. The
plain errors then predict at the median fitted run's speed; the `*_at_run_speed` errors simulate
each measured run at its own factor, which takes the machine's load out of the comparison and
leaves the cost model's and the cache's error. Each run's factor is listed beside the load
averages its provenance recorded, so the two can be checked against each other.

With `orders` > 1 every simulated point is the mean over that many call orders
(replay.calibrate.orders): the measured repeats each followed the order their own timing picked,
and one simulated order is one draw of it, not its mean.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from replay.calibrate.fit import fit_costs, fit_speed
from replay.calibrate.orders import check_orders, simulate_orders
from replay.calibrate.records import (
    RUN_TOTALS,
    ResultsDir,
    call_rows,
    run_load_averages,
    run_totals,
)
from replay.counters import COMPUTED_PREFILL_TOKENS
from replay.errors import ConfigError
from replay.model.presets import GIB
from replay.sim.fitted_cost import FittedCosts, costs_toml
from replay.status import RunStatus
from replay.sweep.results import ResultsWriteError, write_bytes_atomic

__all__ = ["calibrate", "sim_options_for", "servers_for"]

_SIM_ENGINES = ("sim", "sim-server")
# The llama.cpp personality restores a whole prompt in one copy and charges its per-chunk cost
# once (`replay.sim.engine`): one "chunk" a restore, which a chunk this long gives the fit.
WHOLE_PROMPT_CHUNK_TOKENS = 1 << 62


def fit_shape(engine: str, options: Mapping[str, Any]) -> tuple[int, int, int]:
    """(seats, restore chunk tokens, step token budget) the fit models one point's runs with."""
    chunk = 0
    if engine in _SIM_ENGINES:
        from replay.sim.options import SimConfig

        cfg = SimConfig.from_options(**options)
        chunk = WHOLE_PROMPT_CHUNK_TOKENS if cfg.personality == "llamacpp" else cfg.chunk_tokens
        # the engine's own seats and budget, `batch_defaults` applied (the raw options
        # said 256 and 8,192 where the RTX 3090 preset runs 2,048)
        return cfg.max_num_seqs, chunk, cfg.max_num_batched_tokens
    batch = int(options.get("batch_tokens") or options.get("max_num_batched_tokens") or 0)
    batch = batch or (2048 if engine == "llamacpp" else 8192)
    return servers_for(engine, options), chunk, batch


def _check_same_trace(src: str, trace: Any, run_dirs: Sequence[Path]) -> None:
    """Every run replayed the experiment's trace as it is now (its run.json's sha256): runs of
    another trace were fitted and compared against this one's simulation without a word."""
    from replay.analysis.trace_ids import trace_sha256_of
    from replay.driver.run import trace_sha256

    want = trace_sha256(trace)
    if want is None:  # a trace file that cannot be read again: nothing to compare with
        return
    for run_dir in run_dirs:
        got = trace_sha256_of(run_dir)
        if got is not None and got != want:
            raise ConfigError(
                src, "trace", f"{run_dir.name} of {run_dir.parent.name} replayed another trace "
                f"(sha256 {got[:12]}...) than the experiment's now ({want[:12]}...): restore the "
                "trace it ran, or run the sweep again",
            )  # fmt: skip


def servers_for(engine: str, options: Mapping[str, Any]) -> int:
    """How many calls the engine serves at once (its slots or running sequences)."""
    if engine == "llamacpp":
        return int(options.get("slots", 2))
    return int(options.get("max_num_seqs") or 256)


def sim_options_for(
    results: ResultsDir, engine: str, options: Mapping[str, Any], costs_path: str
) -> dict[str, Any]:
    """SimConfig keywords standing for one point of a real engine: its personality, cache sizes
    and seats, the fitted costs. ConfigError when the engine has no personality or size here."""
    src = str(results.path / "experiment.toml")
    if engine in _SIM_ENGINES:
        keep = {k: v for k, v in options.items() if k not in ("python", "extra_args", "env")}
        return {**keep, "costs": costs_path, "jitter": 0.0}
    if engine == "llamacpp":
        if str(options.get("model") or "tiny") != "tiny":
            raise ConfigError(src, "engine.model", "only the tiny GGUF has a simulator preset")
        ctx = int(options.get("ctx_tokens", 16384))
        slots = int(options.get("slots", 2))
        mib = options.get("cache_ram_mib")  # as the server got it (-1: no limit)
        tier = (
            {"host_tier_gib": float(options.get("host_tier_gib") or 0)}
            if mib is None
            else {"cache_ram_mib": int(mib)}
        )
        return {
            "personality": "llamacpp",
            "model": "tiny-gguf",
            "tp": 1,
            "max_num_seqs": slots,
            **tier,
            "device_kv_gib": ctx * 2048 / GIB,
            "block_tokens": 16,
            "chunk_tokens": 16,
            "max_model_len": ctx // slots,
            "max_num_batched_tokens": int(options.get("batch_tokens") or 2048),
            "costs": costs_path,
        }
    if engine == "vllm":
        pred = results.experiment.predict
        if not pred.model:
            raise ConfigError(src, "predict.model", "name the model preset the simulator uses")
        from replay.engines.vllm import device_kv_bytes

        kv = device_kv_bytes(options)  # per GPU, as the simulator's device_kv_gib is per rank
        if kv is None:
            raise ConfigError(
                src, "engine.device_kv_gib", "needed to size the device (or kv_cache_memory_bytes)"
            )
        # the adapter's own option names: tp, block_size, host_tier_gib (GiB a rank, as the
        # simulator's); the point's host tier is what the offload sweep varies
        block = int(options.get("block_size") or pred.block_tokens or 16)
        return {
            "personality": "vllm",
            "model": pred.model,
            "tp": int(options.get("tp") or 1),
            "device_kv_gib": float(kv) / GIB,
            "host_tier_gib": float(options.get("host_tier_gib") or 0),
            "block_tokens": block,
            "chunk_tokens": block,
            "max_num_seqs": servers_for(engine, options),
            "max_num_batched_tokens": int(options.get("max_num_batched_tokens") or 8192),
            "max_model_len": int(options.get("max_model_len") or 1 << 20),
            "costs": costs_path,
        }
    raise ConfigError(src, "engine.kind", f"no simulator personality for {engine!r}")


def _simulate(results: ResultsDir, trace: Any, engine: str, sim_kw: dict, run: dict) -> dict:
    from replay.driver.options import RunOptions
    from replay.driver.run import run_replay
    from replay.engines.registry import get_engine
    from replay.sim.options import SimConfig
    from replay.sim.transport import SimTransport

    config = SimConfig.from_options(**sim_kw)
    box: dict[str, SimTransport] = {}

    def factory() -> SimTransport:
        box["t"] = SimTransport(config, vocab_size=trace.header.vocab_size)
        return box["t"]

    kwargs = {k: v for k, v in run.items() if k != "transport"}
    kwargs.setdefault("forcing", get_engine(engine).forcing)
    # the requests the measured run sent: a call recorded with no output asked vLLM for one
    kwargs.setdefault("min_max_tokens", get_engine(engine).min_max_tokens)
    with tempfile.TemporaryDirectory(prefix="replay-calibrate-") as tmp:
        summary = run_replay(
            trace,
            factory,
            RunOptions(**kwargs),
            Path(tmp) / "run",
            virtual=True,
            counters_fn=lambda: box["t"].counters(),
        )
    if summary.get("status") == RunStatus.INTERRUPTED:
        # Ctrl-C (or SIGTERM) during a simulated run: the driver stopped it and returned, and
        # its truncated totals were taken for the point's, with exit 0 and no word
        raise KeyboardInterrupt
    return summary


def _simulate_point(
    results: ResultsDir, trace: Any, engine: str, sim_kw: dict, run: dict, orders: int
) -> dict[str, Any]:
    """The point's run totals, each the mean over `orders` simulated call orders."""

    def one(tr: Any, kw: Mapping[str, Any]) -> dict:
        return _simulate(results, tr, engine, dict(kw), run)

    return simulate_orders(one, trace, sim_kw, orders, RUN_TOTALS)


def _err(sim: float | None, meas: float | None) -> float | None:
    if sim is None or meas is None or not meas:
        return None
    return (float(sim) - float(meas)) / float(meas)


def _mean(values: Sequence[float | None]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def _hit_fraction(device_hit: float | None, prompt: float | None) -> float | None:
    return None if device_hit is None or not prompt else float(device_hit) / float(prompt)


def _at_speed(costs: FittedCosts, speed: float, path: Path) -> str:
    """A costs file for one run: every cost times its speed factor."""
    path.write_text(
        costs_toml(FittedCosts(**{k: v * speed for k, v in costs.to_dict().items()})),
        encoding="utf-8",
    )
    return str(path)


def _check_fit_run(
    src: str, run_dir: Path, rows: Sequence[Any], restored: int, totals: Mapping[str, Any]
) -> None:
    """A fit run must give the fit its calls, and its restores per call where it restored."""
    if not rows:  # dropped in silence: the costs came from the other fit points alone
        raise ConfigError(
            src, "--fit", f"run {run_dir} has no call that ended ok to fit: rerun it, or fit "
            "other points",
        )  # fmt: skip
    run_restored = totals.get("host_restore_tokens")
    if isinstance(run_restored, int | float) and run_restored > 0 and restored == 0:
        # the fit would take the restored tokens for computed ones, and restores as free
        raise ConfigError(
            src, "--fit", f"run {run_dir} restored {run_restored:,.0f} tokens from its host "
            "tier but its calls do not say which (vLLM reports only cached tokens a call): fit "
            "points without a host tier, and hold the others out",
        )  # fmt: skip


def calibrate(
    results: ResultsDir,
    fit_points: Sequence[str],
    costs_path: str | Path,
    per_run_speed: bool = False,
    orders: int = 1,
) -> dict[str, Any]:
    """Fit on `fit_points`, write `costs_path`, simulate every point (the mean over `orders`
    call orders); the report as a dict."""
    from replay.sweep.prepare import load_trace

    check_orders(orders)

    exp = results.experiment
    src = str(results.path)
    for name in fit_points:
        if name not in results.points:
            valid = ", ".join(results.points)
            raise ConfigError(src, "--fit", f"no point {name!r}; valid: {valid}")
        if not results.points[name].run_dirs:
            raise ConfigError(
                src, "--fit", f"point {name!r} has no run that ended ok to fit (a run with failed "
                "calls, status errors, is left out, as the report leaves it out of its statistics)",
            )  # fmt: skip
    trace = load_trace(exp)
    _check_same_trace(src, trace, [d for p in results.points.values() for d in p.run_dirs])
    resolved = {n: exp.resolve(p.point) for n, p in results.points.items()}
    engines = {engine for engine, _, _ in resolved.values()}
    if len(engines) != 1:
        raise ConfigError(src, "matrix.engine", "calibrate one engine at a time")
    (engine,) = engines
    used = {Path(str(o["costs"])).resolve() for _, o, _ in resolved.values() if o.get("costs")}
    if Path(costs_path).resolve() in used:  # the runs' own costs, replaced by the fit
        raise ConfigError(
            "calibrate", "-o", f"{str(costs_path)!r} is the costs file these runs were simulated "
            "with (engine.costs): a resume or rerun of them would use the new costs; write "
            "another file",
        )  # fmt: skip
    runs, measured = [], {}
    rows_by_run: dict[Path, list] = {}
    for name, pr in results.points.items():
        _, options, _ = resolved[name]
        totals = []
        for run_dir in pr.run_dirs:
            rows, restored = call_rows(run_dir, engine, options, trace)
            rows_by_run[run_dir] = rows
            t = run_totals(run_dir)
            if engine == "llamacpp":  # reuse split by the whole-prompt model on the run's times
                cached = sum(r.cached_tokens for r in rows)
                t["host_restore_tokens"], t["device_hit_tokens"] = restored, cached - restored
            totals.append(t)
            if name in fit_points:
                _check_fit_run(src, run_dir, rows, restored, t)
                runs.append(rows)
        measured[name] = {k: _mean([t[k] for t in totals]) for k in totals[0]} if totals else {}
    shapes = {name: fit_shape(engine, resolved[name][1]) for name in fit_points}
    if len(set(shapes.values())) > 1:  # one fit models every fitted run with one shape
        said = "; ".join(
            f"{n}: {s} seats, chunk {c if c != WHOLE_PROMPT_CHUNK_TOKENS else 'whole prompt'}, "
            f"step budget {b}"
            for n, (s, c, b) in shapes.items()
        )
        raise ConfigError(
            src, "--fit", f"the fit points differ in how the engine serves ({said}): fit points "
            "of one configuration, and hold the others out",
        )  # fmt: skip
    servers, chunk, batch = shapes[fit_points[0]]
    fit = fit_costs(
        runs, servers, chunk_tokens=chunk, batch_tokens=batch, per_run_speed=per_run_speed
    )
    if not fit.fits:  # costs fitted to nothing: a file of them would pass for a calibration
        raise ConfigError(src, "--fit", f"{fit.notes[-1]}; nothing written")
    # every run's speed factor (1 without per_run_speed) and the load its provenance recorded
    fitted_speeds = iter(fit.speeds)
    run_rows: list[dict[str, Any]] = []
    for name, pr in results.points.items():
        for run_dir in pr.run_dirs:
            rows = rows_by_run[run_dir]
            if name in fit_points:
                fitted = next(fitted_speeds) if rows else None
                speed = fitted if per_run_speed else None  # all 1 when not fitted
            elif per_run_speed and rows:
                speed = fit_speed(rows, fit.costs, servers, chunk, batch)
            else:
                speed = None
            start, end = run_load_averages(run_dir)
            run_rows.append(
                {
                    "point": name,
                    "run": run_dir.name,
                    "role": "fit" if name in fit_points else "heldout",
                    "speed": speed,
                    "load_average_1m": start,
                    "load_average_1m_end": end,
                }
            )
    loads = [r["load_average_1m"] for r in run_rows if r["load_average_1m"] is not None]
    costs_file = Path(costs_path)
    provenance = {
        "results": str(results.path),
        "engine": engine,
        "fit_points": list(fit_points),
        "per_run_speed": per_run_speed,
        **{k: v for k, v in fit.summary().items()},
        "fit_run_speeds": [r["speed"] for r in run_rows if r["role"] == "fit"]
        if per_run_speed
        else None,
        "load_average_1m_range": [min(loads), max(loads)] if loads else None,
    }
    text = costs_toml(fit.costs, provenance)
    # The simulations read the costs from a file of their own; -o gets them once every point
    # has run, so a Ctrl-C half way leaves an earlier -o as it was (it was replaced at once)
    fd, sim_costs = tempfile.mkstemp(prefix="replay-calibrate-costs-", suffix=".toml")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        report: dict[str, Any] = {
            "engine": engine,
            "costs": fit.costs.to_dict(),
            "residuals": fit.summary(),
            "per_run_speed": per_run_speed,
            "orders": orders,
            "runs": run_rows,
            "fit": [],
            "heldout": [],
        }
        speeds = {(r["point"], r["run"]): r["speed"] for r in run_rows}
        for name, pr in results.points.items():
            _, options, run = resolved[name]
            meas = measured[name]
            if not meas:
                report["heldout" if name not in fit_points else "fit"].append(
                    {"point": name, "runs": 0, "skipped": "no finished (ok) run"}
                )
                continue
            kw = sim_options_for(results, engine, options, sim_costs)
            sim = _simulate_point(results, trace, engine, kw, run, orders)
            hit_sim = _hit_fraction(sim.get("device_hit_tokens"), sim.get("prompt_tokens"))
            hit_meas = _hit_fraction(meas.get("device_hit_tokens"), meas.get("prompt_tokens"))
            row = {
                "point": name,
                "runs": len(pr.run_dirs),
                "makespan_error": _err(sim.get("makespan_s"), meas.get("makespan_s")),
                "ttft_p50_error": _err(sim.get("ttft_p50_s"), meas.get("ttft_p50_s")),
                "computed_prefill_error": _err(
                    sim.get(COMPUTED_PREFILL_TOKENS), meas.get(COMPUTED_PREFILL_TOKENS)
                ),
                "restores_error": _err(
                    sim.get("host_restore_tokens"), meas.get("host_restore_tokens")
                ),
                "device_hit_fraction_error": None
                if hit_sim is None or hit_meas is None
                else hit_sim - hit_meas,
                "simulated": {k: sim.get(k) for k in meas},
                "simulated_range": {k: sim["spread"].get(k) for k in meas},
                "measured": meas,
            }
            if per_run_speed:
                row.update(
                    _at_run_speed(
                        results, trace, engine, options, run, pr, fit.costs, speeds, meas, orders
                    )
                )
            report["fit" if name in fit_points else "heldout"].append(row)
    finally:
        Path(sim_costs).unlink(missing_ok=True)
    try:
        write_bytes_atomic(costs_file, text.encode())
    except ResultsWriteError as e:
        raise ConfigError("calibrate", "-o", str(e)) from None
    return report


def _at_run_speed(
    results: ResultsDir,
    trace: Any,
    engine: str,
    options: Mapping[str, Any],
    run: dict,
    pr: Any,
    costs: FittedCosts,
    speeds: Mapping[tuple[str, str], float | None],
    meas: Mapping[str, Any],
    orders: int,
) -> dict[str, Any]:
    """The point simulated per measured run at that run's speed factor (each the mean over
    `orders` call orders): errors of the mean."""
    sims = []
    with tempfile.TemporaryDirectory(prefix="replay-calibrate-speed-") as tmp:
        for run_dir in pr.run_dirs:
            speed = speeds.get((pr.name, run_dir.name))
            if speed is None:
                continue
            path = _at_speed(costs, speed, Path(tmp) / f"{run_dir.name}.toml")
            kw = sim_options_for(results, engine, options, path)
            sims.append(_simulate_point(results, trace, engine, kw, run, orders))
    if not sims:
        return {}
    makespan = _mean([s.get("makespan_s") for s in sims])
    ttft = _mean([s.get("ttft_p50_s") for s in sims])
    return {
        "makespan_error_at_run_speed": _err(makespan, meas.get("makespan_s")),
        "ttft_p50_error_at_run_speed": _err(ttft, meas.get("ttft_p50_s")),
    }
