"""Traces: the v1 model, reading/writing with validation, importers, synthesis and statistics."""

from replay.trace.io import read_header, read_trace, write_trace
from replay.trace.model import FORMAT_NAME, FORMAT_VERSION, Call, CallRef, Step, Trace, TraceHeader
from replay.trace.stats import TraceStats, trace_stats
from replay.trace.synth import PRESETS, synth

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "Call",
    "CallRef",
    "Step",
    "Trace",
    "TraceHeader",
    "read_trace",
    "read_header",
    "write_trace",
    "synth",
    "PRESETS",
    "trace_stats",
    "TraceStats",
]
