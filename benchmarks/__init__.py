"""Benchmarks (`make bench`): each module measures ours against a baseline side by side and
returns a dict of numbers that is merged into results/bench.json. Not timed tests."""
