"""Sweeps: experiment TOML -> points x repeats; one server lifecycle per run; resumable results."""
