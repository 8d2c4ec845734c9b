"""Closed-loop driver: a pool of agents replaying a trace through a transport.

Import what you need from its modules: `options` (RunOptions), `pool` (replay, RunControl,
RunResult), `run` (run_replay), `http` (http_transport_factory, DEFAULT_TRANSPORT), `records`
(call records and the summary). Nothing is imported here, so that reading results
(`replay.driver.records`) does not load the HTTP clients.
"""
