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
    d = _diag(transport="aiohttp")
    assert d.cause == "transport" and "--transport raw" in d.message
    d = _diag()
    assert d.cause == "machine" and "other processes" in d.message
    assert d.message.startswith("p99 send drift 25.0 ms exceeds 10 ms")


def test_generated_traces_get_a_content_hash():
    from replay.driver.run import _content_sha256
    from replay.trace.synth import synth

    def trace(seed):
        return synth("swe-agent", tasks=2, seed=seed, max_calls_per_task=3)

    assert _content_sha256(trace(1)) == _content_sha256(trace(1))
    assert _content_sha256(trace(1)) != _content_sha256(trace(2))
    assert len(_content_sha256(trace(1))) == 64


@pytest.mark.parametrize("virtual", [True, False])
def test_simulator_version_is_recorded(virtual):
    from replay.driver.run import _provenance
    from replay.trace.synth import synth

    prov = _provenance(synth("swe-agent", tasks=1, seed=1, max_calls_per_task=2), {}, virtual)
    assert (prov.get("engine_version") or "").startswith("replay-sim ") == virtual
    assert len(prov["trace_sha256"]) == 64
