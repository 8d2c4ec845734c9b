"""Closed-loop driver: a pool of agents replaying a trace through a transport."""
