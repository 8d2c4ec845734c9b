"""Live progress of a run on stderr: calls done/total, tokens/s, hit fraction so far, restores,
errors and an ETA from the trace's remaining recorded work.

On a terminal it is a `rich` progress bar; otherwise (a log file, CI) or with `--quiet`, a plain
line every `PLAIN_EVERY_S`. Refreshed from a timer rather than per call, so a 2,000 calls/s run
pays nothing; rich's own refresh thread is off (it would take the GIL at its own moments, which
shows as send drift). On the simulator's virtual-time loop a timer would tick in simulated time
(and add events to the loop the engine's records come from), so there the pool calls `tick()` as
each call ends and the bar redraws when enough wall time has passed; it then shows the simulated
time, and its tokens/s are per simulated second. The bar is built before the run's clock
starts: its first render is slow enough to show as drift. The numbers come from the call rows the pool keeps, read incrementally.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["ProgressBar", "LiveCounts", "SweepEta", "progress_wanted", "work_tokens", "format_eta"]

_REFRESH_S = 0.5
_BAR_WIDTH = 24
PLAIN_EVERY_S = 10.0


def progress_wanted(json_output: bool) -> bool:
    """Progress for every run whose stdout is not the JSON summary (a bar on a terminal, plain
    lines elsewhere)."""
    return not json_output


def work_tokens(trace: Any) -> int:
    """The trace's recorded work: prompt plus output tokens over all calls (the ETA's measure)."""
    return sum(c.prompt_len + c.output_len for calls in trace.tasks.values() for c in calls)


def format_eta(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(round(seconds))
    return (
        f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


class LiveCounts:
    """Running sums over the call rows seen so far (pure: rows in, numbers out)."""

    def __init__(self, work_total_tokens: int | None = None) -> None:
        self.work_total = work_total_tokens
        self.seen = 0
        self.prompt_tokens = 0
        self.output_tokens = 0
        self.cached_tokens = 0
        self.restored_tokens = 0
        self.work_done = 0

    def add(self, rows: Sequence[dict]) -> None:
        """Take in rows[self.seen:] (the pool only appends)."""
        for r in rows[self.seen :]:
            self.work_done += r["prompt_tokens"] + r["max_tokens"]
            if r["status"] != "ok":
                continue
            self.prompt_tokens += r["prompt_tokens"]
            self.output_tokens += r.get("completion_tokens") or r["max_tokens"]
            self.cached_tokens += r.get("cached_tokens") or 0
            self.restored_tokens += r.get("host_restore_tokens") or 0
        self.seen = len(rows)

    @property
    def hit_fraction(self) -> float | None:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None

    def eta_s(self, elapsed_s: float) -> float | None:
        """Elapsed time scaled by the recorded work still to do over the work done."""
        if not self.work_total or not self.work_done:
            return None
        left = max(self.work_total - self.work_done, 0)
        return elapsed_s * left / self.work_done

    def fields(self, elapsed_s: float) -> dict[str, str]:
        tps = self.output_tokens / elapsed_s if elapsed_s > 0 else 0.0
        hit = self.hit_fraction
        return {
            "tok_s": f"{tps:,.0f} out tok/s",
            "hit": "hit -" if hit is None else f"hit {hit:.1%}",
            "restored": f"restored {self.restored_tokens:,} tok",
            "eta": f"ETA {format_eta(self.eta_s(elapsed_s))}",
        }


class ProgressBar:
    """Shows a `PoolStats` (total, done, inflight, errors) and the rows' counts until `close()`."""

    def __init__(
        self,
        stats: Any,
        rows: Sequence[dict] = (),
        trace: Any = None,
        *,
        plain: bool = False,
        sim_time: Callable[[], float] | None = None,
    ) -> None:
        self.stats = stats
        self.sim_time = sim_time  # the virtual loop's clock (s since the run's start), or None
        self.rows = rows
        self.counts = LiveCounts(work_tokens(trace) if trace is not None else None)
        self.plain = plain or not sys.stderr.isatty()
        self._t0 = time.monotonic()
        self._last_plain = self._t0
        self._last_tick = self._t0
        self._bar: Any = None
        if not self.plain:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            self._bar = Progress(
                TextColumn("calls"),
                BarColumn(bar_width=_BAR_WIDTH),
                MofNCompleteColumn(),
                TextColumn("{task.fields[line]}"),
                console=Console(file=sys.stderr),
                auto_refresh=False,
                transient=False,
            )
            self._task = self._bar.add_task("run", total=stats.total, line="")
            self._bar.start()
        self._show()

    def line(self) -> str:
        """One status line: what both the bar's text and the plain mode show."""
        s = self.stats
        self.counts.add(self.rows)
        wall_s = time.monotonic() - self._t0
        if self.sim_time is None:
            f = self.counts.fields(wall_s)
            clock = ""
        else:
            sim_s = self.sim_time()
            f = self.counts.fields(sim_s)
            f["tok_s"] += " (sim)"
            f["eta"] = f"ETA {format_eta(self.counts.eta_s(wall_s))}"  # the user waits wall time
            clock = f"sim {sim_s:,.0f} s  "
        # the ETA early: what a narrow terminal cuts is the end of the line
        eta = f"{f['eta']}  " if f["eta"] else ""
        return (
            f"{clock}{eta}inflight {s.inflight}  errors {s.errors}  {f['tok_s']}  {f['hit']}  "
            f"{f['restored']}"
        )

    def _show(self, final: bool = False) -> None:
        text = self.line()
        if self._bar is not None:
            # rich shrinks the fixed columns (calls, the bar, done/total) to nothing before it
            # cuts a long text column: cut the text to the width they leave (80 columns lost
            # the count and the ETA)
            count = len(f"{self.stats.done}/{self.stats.total}") + len(f"{self.stats.total}")
            room = self._bar.console.width - (len("calls") + _BAR_WIDTH + count + 4)
            if len(text) > room:
                text = text[: max(room - 1, 0)] + "…"
            self._bar.update(self._task, completed=self.stats.done, line=text)
            self._bar.refresh()
            return
        now = time.monotonic()
        if final or now - self._last_plain >= PLAIN_EVERY_S:
            self._last_plain = now
            print(f"replay: calls {self.stats.done}/{self.stats.total}  {text}", file=sys.stderr)

    def tick(self) -> None:
        """A call ended (virtual-time runs): redraw if `_REFRESH_S` of wall time has passed."""
        now = time.monotonic()
        if now - self._last_tick >= _REFRESH_S:
            self._last_tick = now
            self._show()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(_REFRESH_S)
            self._show()

    def close(self) -> None:
        if self._bar is not None:
            self._show()
            self._bar.stop()


class SweepEta:
    """A sweep's ETA: the mean time of the runs that ran (skipped ones cost nothing) times the
    runs left. Its `str` is the suffix of the sweep's per-run line."""

    def __init__(self, planned: int) -> None:
        self.left = planned
        self.ran_s: list[float] = []

    def done(self, seconds: float, *, skipped: bool = False) -> None:
        self.left -= 1
        if not skipped:
            self.ran_s.append(seconds)

    def eta_s(self) -> float | None:
        if not self.ran_s:
            return None
        return sum(self.ran_s) / len(self.ran_s) * self.left

    def __str__(self) -> str:
        if self.left <= 0 or not self.ran_s:
            return ""
        return f"  [{self.ran_s[-1]:.0f} s; sweep ETA {format_eta(self.eta_s())}]"
