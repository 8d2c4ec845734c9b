"""The drift warning names the measured cause; provenance names the trace and engine version."""

from __future__ import annotations

import pytest

from replay.driver.diagnose import diagnose_drift


def _diag(**kw):
    args = dict(
        client_cpu_fraction=0.3, encode_s=0.0002, max_prompt_tokens=14000, transport="raw",
        encode_share=0.01,
    )  # fmt: skip
    args.update(kw)
    return diagnose_drift(0.025, 0.010, **args)


def test_long_bodies_are_named_even_with_raw_transport():
    d = _diag(encode_s=0.006)
    assert d.cause == "encoding" and "14000-token body takes 6.00 ms" in d.message
    assert "--transport raw" not in d.message  # the advice of the old warning, wrong here
    assert _diag(encode_share=0.4).cause == "encoding"  # many bodies, each quick


def test_cpu_saturation_transport_and_machine():
    d = _diag(client_cpu_fraction=0.97)
    assert d.cause == "client_cpu" and "97%" in d.message
    d = _diag(transport="aiohttp", client_cpu_fraction=0.6)
    assert d.cause == "transport" and "--transport raw" in d.message
    d = _diag()
    assert d.cause == "machine" and "other processes" in d.message
    assert d.message.startswith("p99 send drift 25.0 ms exceeds 10 ms")
    # a slower client at a quarter of a core: not what made it late (raw drifted as much)
    d = _diag(transport="aiohttp", client_cpu_fraction=0.26)
    assert d.cause == "machine" and "--transport raw" not in d.message


def test_the_cpu_figure_names_the_polling_apart():
    d = _diag(client_cpu_fraction=0.17, spin_fraction=0.1)
    assert "17% of a core (besides 10% polling before deadlines)" in d.message


def test_generated_traces_get_a_content_hash():
    from replay.driver.run import trace_content_sha256
    from replay.trace.synth import synth

    def trace(seed):
        return synth("swe-agent", tasks=2, seed=seed, max_calls_per_task=3)

    assert trace_content_sha256(trace(1)) == trace_content_sha256(trace(1))
    assert trace_content_sha256(trace(1)) != trace_content_sha256(trace(2))
    assert len(trace_content_sha256(trace(1))) == 64


@pytest.mark.parametrize("virtual", [True, False])
def test_simulator_version_is_recorded(virtual):
    from replay.driver.run import _provenance
    from replay.trace.synth import synth

    prov = _provenance(synth("swe-agent", tasks=1, seed=1, max_calls_per_task=2), {}, virtual)
    assert (prov.get("engine_version") or "").startswith("replay-sim ") == virtual
    assert len(prov["trace_sha256"]) == 64


def test_a_drifting_run_names_its_cause_and_its_transport(tmp_path):
    from replay.driver.http import http_transport_factory
    from replay.driver.options import RunOptions
    from replay.driver.run import run_replay
    from tests.servers import FaultServer, make_trace

    trace = make_trace({f"t{i}": [{"gap": 0.0, "new": 50, "out": 3}] * 3 for i in range(3)})
    options = RunOptions(pool=3, drift_warn_s=0.0)  # any drift at all warns
    with FaultServer() as srv:
        factory = http_transport_factory(srv.url, trace, options, transport="aiohttp")
        # no transport in the provenance (as in a sweep run): the run learns it from the factory
        s = run_replay(trace, factory, options, tmp_path / "o", provenance={})
    if not s["drift_p99_s"]:
        pytest.skip("no measurable drift at all on this run")
    assert s["drift_cause"] in ("encoding", "client_cpu", "transport", "machine")
    (w,) = [w for w in s["warnings"] if w.startswith("p99 send drift")]
    assert "cause: " in w and "unknown" not in w
    if s["drift_cause"] == "transport":
        assert "the aiohttp client" in w
