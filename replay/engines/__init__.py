"""Engine adapters, one per serving engine, in one explicit registry (see replay.engines.registry)."""
