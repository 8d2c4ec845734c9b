"""WEKA / AgentX Claude Code traces (kv-cache-tester JSON) -> v1 blocks trace.

One JSON file per conversation: requests carry 64-token block hash ids (`hash_ids`, one per *full*
block: a prompt's last `in % 64` tokens are unhashed), `think_time`, `api_time` and `t`;
sub-agent entries carry their own requests. Timing semantics (verified on the sample set and
documented in traces/FORMAT.md):

- a request starts at `t` (seconds since the conversation start) and ends at `t + api_time`;
- a sub-agent entry's `t` is when it *finished*; it started `duration_ms` earlier, and its
  requests' `t` count from that start;
- a sub-agent is spawned by the last parent call that ended by its start (1 s tolerance, since
  parent `t` is rounded to whole seconds; by the first call if it started within that tolerance
  before it; a start earlier than that is refused) and joined by the parent's next call if that
  call started after the sub-agent finished (the parent waited); otherwise it ran detached;
- `gap_s` is `think_time` for ordinary calls; for a call that joins sub-agents it is the time from
  the last joined sub-agent's end to the call's start; for a sub-agent's first call it is the time
  from the spawning call's end to its start.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from replay.errors import TraceError
from replay.trace.importers.common import (
    DEFAULT_VOCAB,
    block_ids,
    call_lengths,
    common_prefix,
    expand_sources,
    load_json,
)
from replay.trace.model import Call, CallRef, Trace, TraceHeader

__all__ = ["import_weka"]

_TOL_S = 1.0  # parent request times are whole seconds; sub-agent times are not
# Request types in the published traces: "n" and "s" are both calls ("n" when `type` is absent);
# "subagent" entries (top level only) hold a sub-agent's requests.
_CALL_TYPES = ("n", "s")


@dataclass
class _Req:
    start_s: float  # conversation-relative
    end_s: float  # the start when the request has no api_time (timed False)
    timed: bool
    think_s: float | None
    in_tokens: int
    out_tokens: int
    hash_ids: list[int]
    ttft_s: float | None
    where: str


@dataclass
class _Sub:
    agent_id: str
    start_s: float
    end_s: float
    reqs: list[_Req]
    where: str
    spawn: int = 0  # parent call index
    join: int | None = None


def _seconds(r: dict, key: str, file: str, where: str, required: bool = False) -> float | None:
    """A duration or time field: absent (None) unless `required`, else a number >= 0.

    A negative or mistyped time used to be taken as is or dropped: a `duration_ms` of -1e9
    moved a sub-agent 11 days back and stretched a makespan thirtyfold."""
    v = r.get(key)
    if v is None and not required:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not v >= 0:
        got = "missing" if v is None else f"is {v!r}"
        raise TraceError(file, None, f"{where}.{key}", f"{got}; must be a number >= 0")
    return float(v)


def _req(r: dict, offset_s: float, file: str, where: str, block_size: int) -> _Req:
    def bad(key: str, why: str) -> TraceError:
        return TraceError(file, None, f"{where}.{key}", why)

    kind = r.get("type", "n")
    if kind not in _CALL_TYPES:
        raise bad("type", f"is {kind!r}; known types: n, s (requests), subagent (top level only)")
    t = _seconds(r, "t", file, where, required=True)
    assert t is not None
    n_in, n_out = r.get("in"), r.get("out")
    for key, v in (("in", n_in), ("out", n_out)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise bad(key, "must be a non-negative integer")
    hashes = block_ids(r.get("hash_ids"), f"{where}.hash_ids", file, None)
    assert isinstance(n_in, int) and isinstance(n_out, int)
    call_lengths(file, None, (f"{where}.in", n_in), (f"{where}.out", n_out))
    if not (len(hashes) - 1) * block_size < n_in < (len(hashes) + 1) * block_size:
        raise bad("hash_ids", f"{len(hashes)} blocks of {block_size} do not cover in={n_in}")
    api = _seconds(r, "api_time", file, where)
    start = offset_s + t
    return _Req(
        start_s=start,
        end_s=start + (api if api is not None else 0.0),
        timed=api is not None,
        think_s=_seconds(r, "think_time", file, where),
        in_tokens=n_in,
        out_tokens=n_out,
        hash_ids=hashes,
        ttft_s=_seconds(r, "ttft", file, where),
        where=where,
    )


def _check_order(reqs: list[_Req], file: str) -> None:
    """Requests must be in time order: the importer pairs each with the one before it (prefix
    kept, think time), so a shuffled file would import as a different conversation."""
    for a, b in zip(reqs, reqs[1:], strict=False):
        if b.start_s < a.start_s:
            raise TraceError(
                file,
                None,
                f"{b.where}.t",
                f"starts before {a.where} ({b.start_s:g} s < {a.start_s:g} s); "
                "requests must be in time order",
            )


def _calls(
    task: str, ns: str, reqs: list[_Req], first_gap_s: float | None, parent: CallRef | None
) -> list[Call]:
    out: list[Call] = []
    prev: _Req | None = None
    for i, r in enumerate(reqs):
        keep = common_prefix(prev.hash_ids, r.hash_ids) if prev is not None else 0
        if i == 0:
            gap = first_gap_s if first_gap_s is not None else (r.think_s or 0.0)
        else:
            assert prev is not None
            # think_time counts from the end of the last request that had an api_time: after
            # one without (its end unknown, taken as its start) it also spans that request and
            # the idle time before it (trace_0219 call 5: think_time 3,425 s, 13 s after call 4),
            # so there the idle time since that request's start bounds it.
            idle = r.start_s - prev.end_s
            think = idle if r.think_s is None else r.think_s
            gap = think if prev.timed else min(think, idle)
        recorded = {"start_s": round(r.start_s, 6), "end_s": round(r.end_s, 6)}
        if r.ttft_s is not None:
            recorded["ttft_s"] = r.ttft_s
        out.append(
            Call(
                task=task,
                index=i,
                gap_s=max(0.0, round(gap, 6)),
                keep=keep,
                append=np.asarray(r.hash_ids[keep:], dtype=np.int64),
                prompt_len=r.in_tokens,
                output_len=r.out_tokens,
                parent=parent if i == 0 else None,
                recorded=recorded,
                ns=ns,
            )
        )
        prev = r
    return out


def _conversation(path: Path, data: dict, task: str, block_size: int) -> list[Call]:
    file = str(path)
    reqs = data.get("requests")
    if not isinstance(reqs, list):
        raise TraceError(file, None, "requests", "missing or not an array")
    ns = task if data.get("hash_id_scope", "local") == "local" else "weka"
    parent_reqs: list[_Req] = []
    subs: list[_Sub] = []
    agents: dict[str, str] = {}  # sub-agent id -> where it was first seen
    for i, r in enumerate(reqs):
        where = f"requests[{i}]"
        if not isinstance(r, dict):
            raise TraceError(file, None, where, "must be an object")
        if r.get("type") != "subagent":
            parent_reqs.append(_req(r, 0.0, file, where, block_size))
            continue
        t_end = _seconds(r, "t", file, where, required=True)
        assert t_end is not None
        inner = r.get("requests")
        if not isinstance(inner, list) or not inner:
            raise TraceError(file, None, f"{where}.requests", "missing or empty")
        # Every sub-agent entry of the published traces has it; `t` alone does not place the start.
        dur_ms = _seconds(r, "duration_ms", file, where, required=True)
        assert dur_ms is not None
        start = t_end - dur_ms / 1000.0
        sub_reqs = []
        for j, q in enumerate(inner):
            if not isinstance(q, dict):
                raise TraceError(file, None, f"{where}.requests[{j}]", "must be an object")
            sub_reqs.append(_req(q, start, file, f"{where}.requests[{j}]", block_size))
        _check_order(sub_reqs, file)
        agent = str(r.get("agent_id") or f"agent_{len(subs) + 1:03d}")
        if agent in agents:
            raise TraceError(
                file,
                None,
                f"{where}.agent_id",
                f"{agent!r} is also {agents[agent]}'s; sub-agent ids must be unique",
            )
        agents[agent] = where
        subs.append(_Sub(agent, start, t_end, sub_reqs, where))
    if not parent_reqs:
        raise TraceError(file, None, "requests", "no parent requests")
    _check_order(parent_reqs, file)
    # A parent call spawns each sub-agent, so one cannot start before the parent's first call
    # (less the whole-second tolerance), nor before the conversation (0 s): its duration_ms is
    # wrong (1e15 put one 31,700 years back, spawned by nothing, and it ran as a detached root
    # task). A start just before its spawning call *ended* stays possible: that gap is clamped
    # to 0 in _calls.
    earliest_s = max(0.0, parent_reqs[0].start_s - _TOL_S)
    for s in subs:
        if s.start_s < earliest_s:
            raise TraceError(
                file,
                None,
                f"{s.where}.duration_ms",
                f"{(s.end_s - s.start_s) * 1000:g} ms before its end (t = {s.end_s:g} s) starts "
                f"it at {s.start_s:g} s, before the parent's first request "
                f"({parent_reqs[0].start_s:g} s); duration_ms is in milliseconds",
            )
        ended = [i for i, p in enumerate(parent_reqs) if p.end_s <= s.start_s + _TOL_S]
        started = [i for i, p in enumerate(parent_reqs) if p.start_s <= s.start_s]
        # neither: it started within the tolerance before the first call
        s.spawn = ended[-1] if ended else (started[-1] if started else 0)
        if s.spawn + 1 < len(parent_reqs):
            nxt = s.spawn + 1
            if parent_reqs[nxt].start_s >= s.end_s - _TOL_S:  # the parent waited for it
                s.join = nxt
    calls = _calls(task, ns, parent_reqs, None, None)
    sub_calls: list[Call] = []
    joins: dict[int, list[tuple[CallRef, float]]] = {}
    for s in subs:
        sub_task = f"{task}/{s.agent_id}"
        first_gap = s.reqs[0].start_s - parent_reqs[s.spawn].end_s
        sc = _calls(sub_task, ns, s.reqs, first_gap, (task, s.spawn))
        sub_calls.extend(sc)
        if s.join is not None:
            # The join waits on the sub-agent's last call, which ended before the entry's `t`
            # (when it reported back): the gap counts from that call's end, as `after` means.
            joins.setdefault(s.join, []).append(((sub_task, sc[-1].index), s.reqs[-1].end_s))
    for j, deps in joins.items():
        dep_end = max(end for _, end in deps)
        gap = min(calls[j].gap_s, max(0.0, parent_reqs[j].start_s - dep_end))
        calls[j] = replace(calls[j], after=tuple(ref for ref, _ in deps), gap_s=round(gap, 6))
    return calls + sub_calls


def import_weka(sources: Sequence[str | os.PathLike], vocab_size: int | None = None) -> Trace:
    """Import WEKA conversation files (or directories of `*.json`) into one blocks trace."""
    files = [p for p in expand_sources(sources, "*.json") if p.name != "LICENSE"]
    if not files:
        raise TraceError(", ".join(map(str, sources)), None, None, "no WEKA *.json files found")
    block_size: int | None = None
    calls: list[Call] = []
    seen: set[str] = set()
    owner: dict[str, Path] = {}  # every task name (sub-agents too) -> the file it came from
    models: set[str] = set()
    for path in files:
        data = load_json(path)
        if not isinstance(data, dict):
            raise TraceError(str(path), None, None, "a WEKA trace is one JSON object")
        bs = data.get("block_size")
        if isinstance(bs, bool) or not isinstance(bs, int) or bs <= 0:
            raise TraceError(str(path), None, "block_size", "missing or not a positive integer")
        if block_size is None:
            block_size = bs
        elif bs != block_size:
            raise TraceError(str(path), None, "block_size", f"{bs} differs from {block_size}")
        task = str(data.get("id") or path.stem)
        if task in seen:
            task = f"{task}@{path.stem}"
        seen.add(task)
        for r in data.get("requests") or ():
            if isinstance(r, dict) and isinstance(r.get("model"), str):
                models.add(r["model"])
        conversation = _conversation(path, data, task, bs)
        for name in dict.fromkeys(c.task for c in conversation):
            other = owner.setdefault(name, path)
            if other is not path:
                raise TraceError(
                    str(path), None, "id",
                    f"its task {name!r} is also a task of {other}: give one of them another id",
                )  # fmt: skip
        calls.extend(conversation)
    header = TraceHeader(
        tokens="blocks",
        vocab_size=vocab_size or DEFAULT_VOCAB,
        block_size=block_size,
        source="weka",
        meta={"files": [p.name for p in files], "models": sorted(models)},
    )
    return Trace(header, calls)
