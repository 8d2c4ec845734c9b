"""The `swe-agent` preset against the EfficientAgent study's trace statistics:
4,427 calls, ~147M prompt tokens, contexts up to ~238K growing within tasks, 97-98% reuse of the
previous call, 97.3% of new KV reappearing in the next call."""

from __future__ import annotations

import numpy as np
import pytest

from replay.studies.efficientagent import reappearing_fraction, trace_facts
from replay.trace.model import Call, Trace, TraceHeader
from replay.trace.synth import synth


@pytest.fixture(scope="module")
def paper_trace() -> Trace:
    return synth("swe-agent", tasks=100, seed=0)  # the paper-* experiments' workload


def test_preset_matches_the_study_trace(paper_trace):
    f = trace_facts(paper_trace)
    assert abs(f["calls"] - 4427) / 4427 <= 0.05
    assert abs(f["prompt_tokens"] - 147e6) / 147e6 <= 0.10
    assert 100_000 <= f["max_context"] <= 238_000
    assert 0.97 <= f["reuse"] <= 0.985
    assert abs(f["reappears"] - 0.973) <= 0.02


def test_contexts_grow_within_tasks_but_for_rare_edits(paper_trace):
    edits = 0
    for calls in paper_trace.tasks.values():
        # every later call keeps the whole previous context (prompt + output) and grows it,
        # unless a context edit elided an old tool result: it then diverges inside the prompt
        for prev, c in zip(calls, calls[1:], strict=False):
            if c.keep == prev.prompt_len + prev.output_len:
                assert c.prompt_len > prev.prompt_len
            else:
                edits += 1
                assert c.keep < prev.prompt_len
    assert 0 < edits < 0.012 * len(paper_trace.calls)


@pytest.mark.parametrize("seed", [1, 2])
def test_other_seeds_stay_near_the_study(seed):
    # the workload is a distribution, not one draw: neighbouring seeds stay close
    f = trace_facts(synth("swe-agent", tasks=100, seed=seed))
    assert abs(f["calls"] - 4427) / 4427 <= 0.05
    assert abs(f["prompt_tokens"] - 147e6) / 147e6 <= 0.15
    assert f["max_context"] <= 238_000


def _call(task, i, keep, n_append, out):
    return Call(
        task=task,
        index=i,
        gap_s=0.0,
        keep=keep,
        append=np.arange(n_append, dtype=np.int32),
        prompt_len=keep + n_append,
        output_len=out,
    )


def test_reappearing_fraction_by_hand():
    # task a: call 0 adds 100 + 10; call 1 keeps all 110 and adds 20 + 5 (last call: lost)
    # task b: call 0 adds 50 + 10; call 1 keeps only 30 of them (rewrote history), adds 40 + 5
    calls = [
        _call("a", 0, 0, 100, 10),
        _call("a", 1, 110, 20, 5),
        _call("b", 0, 0, 50, 10),
        _call("b", 1, 30, 40, 5),
    ]
    trace = Trace(TraceHeader(), calls)
    added = 110 + 25 + 60 + 45
    kept = 110 + 0 + 30 + 0
    assert reappearing_fraction(trace) == pytest.approx(kept / added)
