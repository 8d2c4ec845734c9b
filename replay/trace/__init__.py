"""Traces: the v1 model, reading/writing with validation, importers, synthesis and statistics."""

from replay.trace.model import FORMAT_NAME, FORMAT_VERSION, Call, CallRef, Step, Trace, TraceHeader

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "Call", "CallRef", "Step", "Trace", "TraceHeader"]
