"""HTTP transports over real loopback sockets: request bodies, SSE parsing, every fault class,
server gone, and the run directory written by `run_replay`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading

import numpy as np
import orjson
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.driver.http import DEFAULT_TRANSPORT, TRANSPORTS, http_transport_factory
from replay.driver.http_common import (
    HttpOptions,
    PromptEncoder,
    build_body,
    prompt_json,
)
from replay.driver.http_errors import (
    ErrorMap,
    StaleConnection,
)
from replay.driver.options import RunOptions
from replay.driver.pool import replay
from replay.driver.records import read_jsonl
from replay.driver.run import run_replay
from replay.driver.sse import (
    SseAccumulator,
)
from replay.errors import RequestFailed
from replay.protocol import CompletionRequest
from tests.servers import FaultServer, ScriptServer, free_port, make_trace, sse_body

TRANSPORT_NAMES = sorted(TRANSPORTS)


# --- bodies and parsing (pure) ---------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    prompts=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), min_size=1, max_size=6),
    seed=st.integers(0, 2**16),
)
def test_incremental_prompt_encoding_equals_plain_json(prompts, seed):
    """Whatever a task's prompts do (grow, shrink, repeat), the bytes are json.dumps(list)."""
    rng = np.random.default_rng(seed)
    enc = PromptEncoder(max_tasks=2)
    ctx = np.empty(0, np.int32)
    for keep, new in prompts:
        prompt = np.concatenate([ctx[:keep], rng.integers(-5, 200_000, new, dtype=np.int32)])
        for task in ("a", "b", "c"):
            assert orjson.loads(prompt_json(enc.encode(task, prompt))) == prompt.tolist()
        ctx = prompt


def test_prompt_encoder_reuses_a_kept_prefix():
    enc = PromptEncoder()
    p1 = np.arange(1000, dtype=np.int32)
    enc.encode("t", p1)
    p2 = np.concatenate([p1, np.arange(5, dtype=np.int32)])
    assert orjson.loads(prompt_json(enc.encode("t", p2))) == p2.tolist()
    assert enc.reused_tokens == 1000


def test_body_has_the_default_openai_fields_then_extras():
    req = CompletionRequest(
        task="agent-7",
        call=3,
        prompt=np.array([5, 6, 7], np.int32),
        max_tokens=12,
        extras={"vllm_xargs": {"x": 1}, "temperature": 0.5},
    )
    body = orjson.loads(build_body("m", req))
    assert body["prompt"] == [5, 6, 7]
    assert body["model"] == "m" and body["user"] == "agent-7"
    assert body["max_tokens"] == body["min_tokens"] == 12
    assert body["ignore_eos"] is True and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["vllm_xargs"] == {"x": 1} and body["temperature"] == 0.5  # adapter wins


def test_sse_lines_split_anywhere_parse_the_same():
    events = [
        {"choices": [{"text": "he", "token_ids": [1, 2]}]},
        {"choices": [{"text": "llo", "token_ids": [3]}]},
        {
            "choices": [],
            "usage": {
                "prompt_tokens": 9,
                "completion_tokens": 3,
                "prompt_tokens_details": {"cached_tokens": 4, "device": 3, "host": 1},
            },
        },
    ]
    raw = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    for cut in range(0, len(raw), 7):
        acc = SseAccumulator()
        acc.feed_bytes(raw[:cut], 1.0)
        acc.feed_bytes(raw[cut:], 2.0)
        acc.flush(2.0)
        res = acc.result(3.0, streamed=True)
        assert (res.prompt_tokens, res.completion_tokens, res.cached_tokens) == (9, 3, 4)
        assert res.output_ids == [1, 2, 3]
        assert res.cached_by_source == {"device": 3, "host": 1}
        assert res.t_first_token == (1.0 if cut > raw.index(b"\n") else 2.0)


@pytest.mark.parametrize(
    "raw",
    [b"data: {nope\n\n", b"data: [1, 2]\n\n", b"hello\n\n", b'data: {"choices": "x"}\n\n'],
)
def test_sse_malformed_bodies_raise_malformed(raw):
    acc = SseAccumulator()
    with pytest.raises(RequestFailed) as e:
        acc.feed_bytes(raw, 0.0)
        acc.result(0.0, streamed=True)
    assert e.value.kind == "malformed"


@pytest.mark.parametrize(
    "usage_extra, meta",
    [
        ({"cached_tokens_details": {"device": 5, "host": 2}}, None),
        ({}, {"cached_tokens_details": {"device": 5, "host": 2}}),
        ({"prompt_tokens_details": {"cached_tokens": 7, "device": 5, "host": 2}}, None),
    ],
)
def test_cached_tokens_per_source_from_either_place(usage_extra, meta):
    usage = {"prompt_tokens": 9, "completion_tokens": 1, **usage_extra}
    event = {"choices": [{"text": "x"}], "usage": usage}
    if meta is not None:
        event["meta_info"] = meta
    acc = SseAccumulator()
    acc.feed_bytes(b"data: " + orjson.dumps(event) + b"\n\ndata: [DONE]\n\n", 0.0)
    assert acc.result(0.0, streamed=True).cached_by_source == {"device": 5, "host": 2}


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": 10**30, "completion_tokens": 1},  # lost every row of the run (int64)
        {"prompt_tokens": -5, "completion_tokens": 1},
        {"prompt_tokens": 9, "completion_tokens": 1.5},
        {"prompt_tokens": 9, "completion_tokens": 1, "prompt_tokens_details": {"device": -1}},
        {"prompt_tokens": 9, "completion_tokens": 1, "prompt_tokens_details": {"host": 2e19}},
    ],
)
def test_a_usage_count_no_server_could_mean_is_malformed(usage):
    acc = SseAccumulator()
    event = {"choices": [{"text": "x"}], "usage": usage}
    body = json.dumps(event).encode()  # orjson cannot write 10**30; a server can
    acc.feed_bytes(b"data: " + body + b"\n\ndata: [DONE]\n\n", 0.0)
    with pytest.raises(RequestFailed, match="usage count out of range") as e:
        acc.result(0.0, streamed=True)
    assert e.value.kind == "malformed"


def test_stream_without_usage_or_done_is_malformed():
    acc = SseAccumulator()
    acc.feed_bytes(b'data: {"choices": [{"text": "x"}]}\n\n', 0.0)
    with pytest.raises(RequestFailed, match="without usage"):
        acc.result(0.0, streamed=True)


# --- real loopback ---------------------------------------------------------------------------


def _complete(name, url, req, **http):
    async def main():
        t = TRANSPORTS[name](HttpOptions(url, model="m", **http))
        await t.start()
        try:
            return await t.complete(req)
        finally:
            await t.close()

    return asyncio.run(main())


def _req(task="a", n=5, max_tokens=7):
    return CompletionRequest(task, 0, np.arange(n, dtype=np.int32), max_tokens)


@pytest.mark.parametrize("name", TRANSPORT_NAMES)
def test_transport_sends_exact_tokens_and_reads_usage(name):
    with FaultServer(cached_tokens=3) as srv:
        res = _complete(name, srv.url, _req(n=300, max_tokens=9))
    (seen,) = srv.seen
    assert seen.body["prompt"] == list(range(300)) and seen.body["model"] == "m"
    assert (res.prompt_tokens, res.completion_tokens, res.cached_tokens) == (300, 9, 3)
    assert res.t_first_token is not None and res.t_first_token <= res.t_end


FAULT_KINDS = {
    "http_400": "http_4xx",
    "http_500": "http_5xx",
    "http_503": "http_5xx",
    "hang": "timeout",
    "reset": "connection",
    "cut": "connection",
    "malformed_json": "malformed",
    "malformed_shape": "malformed",
}


@pytest.mark.parametrize("name", TRANSPORT_NAMES)
@pytest.mark.parametrize("fault", sorted(FAULT_KINDS))
def test_each_fault_maps_to_its_error_kind(name, fault):
    with FaultServer(faults={("a", 0): fault}) as srv:
        with pytest.raises(RequestFailed) as e:
            _complete(name, srv.url, _req(), request_timeout_s=0.3)
        # the connection pool survives the fault: the next request works
        res = _complete(name, srv.url, _req())
    assert e.value.kind == FAULT_KINDS[fault], str(e.value)
    assert res.completion_tokens == 7


def _words(e: RequestFailed, url: str) -> str:
    """An error message without the library's own words (the parenthesised tail)."""
    return str(e).replace(url, "URL").split(" (", 1)[0]


@pytest.mark.parametrize("fault", [*sorted(FAULT_KINDS), "refused"])
def test_every_transport_words_each_fault_the_same(fault):
    """One error map: a fault gives the same kind and the same words whatever client sent the
    request (only the library's own detail, in parentheses, differs)."""
    words = {}
    for name in TRANSPORT_NAMES:
        with FaultServer(faults={("a", 0): fault} if fault != "refused" else {}) as srv:
            url = srv.url if fault != "refused" else f"http://127.0.0.1:{free_port()}"
            with pytest.raises(RequestFailed) as e:
                _complete(name, url, _req(), request_timeout_s=0.3)
        words[name] = (e.value.kind, type(e.value).__name__, _words(e.value, url))
    assert len(set(words.values())) == 1, words
    if fault == "refused":
        assert words[TRANSPORT_NAMES[0]][1] == "ConnectionRefused"  # the pool's retry signal


def _scripted(answer: bytes):
    async def script(ex) -> bool:
        ex.writer.write(answer)
        await ex.writer.drain()
        return False  # then close

    return script


@pytest.mark.parametrize(
    ("answer", "kind", "words"),
    [
        (b"SPAM SPAM SPAM\r\n\r\n", "malformed", "malformed: bad HTTP response"),
        (
            b"HTTP/1.1 302 Found\r\nlocation: /elsewhere\r\ncontent-length: 0\r\n\r\n",
            "http_4xx",
            "http_4xx: HTTP 302: a redirect, which replay does not follow: give --url the "
            "server's own address",
        ),
        (
            b"HTTP/1.1 307 Temporary Redirect\r\nlocation: /x\r\ncontent-length: 0\r\n\r\n",
            "http_4xx",
            "http_4xx: HTTP 307: a redirect, which replay does not follow: give --url the "
            "server's own address",
        ),
        (None, "connection", "connection: TLS handshake with URL failed"),  # https to plain
    ],
)
def test_every_transport_names_a_bad_answer_redirect_and_tls_failure_alike(answer, kind, words):
    """httpx called a reply that is not HTTP a lost connection, aiohttp followed a 302 as a GET
    elsewhere (a 404) and failed on a 307, and both called a failed TLS handshake a failure to
    connect: the same fault read differently by transport."""
    got = {}
    for name in TRANSPORT_NAMES:
        if answer is None:  # plain HTTP bytes where the client expects a TLS handshake
            with _plain_http_port() as port:
                url = f"https://127.0.0.1:{port}"
                with pytest.raises(RequestFailed) as e:
                    _complete(name, url, _req(), request_timeout_s=5)
        else:
            with ScriptServer(_scripted(answer)) as srv:
                url = srv.url
                with pytest.raises(RequestFailed) as e:
                    _complete(name, url, _req(), request_timeout_s=5)
        got[name] = (e.value.kind, _words(e.value, url))
    assert set(got.values()) == {(kind, words)}, got


@contextlib.contextmanager
def _plain_http_port():
    """A port that answers every connection with a plain HTTP 400 at once, then closes."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.05)  # accept() is not woken by close() from another thread
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield srv.getsockname()[1]
    finally:
        done.set()
        thread.join(5)
        srv.close()


def test_error_map_rejects_an_unknown_class_and_leaves_unknown_exceptions_alone():
    with pytest.raises(ValueError, match="unknown error classes"):
        ErrorMap(((OSError, "gremlins"),))
    errors = ErrorMap(((ConnectionError, "lost"),))
    opts = HttpOptions("http://h:1")
    assert errors.error(KeyError("bug"), opts) is None  # a bug propagates, it is not a fault
    # a lost connection: resendable only when neither written whole nor answered
    assert isinstance(errors.error(ConnectionError(), opts, written_whole=False), StaleConnection)
    for answered, whole in [(True, False), (False, True), (True, True)]:
        err = errors.error(ConnectionError(), opts, answered=answered, written_whole=whole)
        assert isinstance(err, RequestFailed) and err.kind == "connection"


@pytest.mark.parametrize("name", TRANSPORT_NAMES)
def test_plain_json_response_is_accepted_without_ttft(name):
    with FaultServer(faults={("a", 0): "no_stream"}) as srv:
        res = _complete(name, srv.url, _req())
    assert res.t_first_token is None and res.completion_tokens == 7


def _trace_with_faults():
    trace = make_trace({f"t{i}": [{"new": 64, "out": 3}] * 4 for i in range(3)})
    faults = {
        ("t0", 1): "http_500",
        ("t0", 2): "usage_off",
        ("t1", 1): "reset",
        ("t2", 0): "malformed_json",
    }
    return trace, faults


@pytest.mark.parametrize("name", TRANSPORT_NAMES)
def test_run_records_faults_and_goes_on(name, tmp_path):
    trace, faults = _trace_with_faults()
    opts = RunOptions(pool=3, request_timeout_s=5)
    with FaultServer(faults=faults) as srv:
        factory = http_transport_factory(srv.url, trace, opts, transport=name, model="m")
        summary = run_replay(trace, factory, opts, tmp_path, provenance={"url": srv.url})
    assert summary["status"] == "errors"
    assert summary["calls"] == 12 and summary["errors"] == 3
    assert summary["error_kinds"] == {"http_5xx": 1, "connection": 1, "malformed": 1}
    assert summary["prompt_mismatches"] == 1 and summary["completion_mismatches"] == 1
    # the server saw the calls of each task in order, one at a time
    for t in ("t0", "t1", "t2"):
        assert [s.index for s in srv.seen if s.user == t] == [0, 1, 2, 3]
    df = pd.read_parquet(tmp_path / "calls.parquet")
    assert len(df) == 12 and list(df.columns)[:4] == ["task", "call", "slot", "t_ready"]
    assert (df["t_send"] >= df["t_ready"]).all() and (df["t_end"] >= df["t_send"]).all()
    assert len(read_jsonl(tmp_path / "calls.jsonl")) == 12
    run = orjson.loads((tmp_path / "run.json").read_bytes())
    assert run["status"] == "errors" and run["provenance"]["url"] == srv.url
    assert run["summary"]["calls"] == 12 and run["provenance"]["ended_at"]
    # the reason names the failed calls by kind and quotes the first one
    assert run["reason"] == summary["reason"]
    assert run["reason"].startswith(
        "3 of 12 calls failed (connection x1, http_5xx x1, malformed x1)"
    )
    first = df[df["status"] != "ok"].sort_values("t_end").iloc[0]
    assert f"first: {first['task']} call {first['call']}: {first['error']}" in run["reason"]


def test_abort_task_stops_the_task_after_a_fault(tmp_path):
    trace, faults = _trace_with_faults()
    opts = RunOptions(pool=3, on_error="abort-task")
    with FaultServer(faults=faults) as srv:
        summary = run_replay(
            trace, http_transport_factory(srv.url, trace, opts, model="m"), opts, tmp_path
        )
        users = [s.user for s in srv.seen]
    assert users.count("t0") == 2 and users.count("t1") == 2 and users.count("t2") == 1
    assert summary["calls_skipped"] == 12 - 5


@pytest.mark.parametrize("name", TRANSPORT_NAMES)
def test_nothing_listening_fails_the_run_after_the_grace(name, tmp_path):
    trace = make_trace({"a": [{}, {}]})
    opts = RunOptions(pool=1, server_gone_grace_s=0.4)
    url = f"http://127.0.0.1:{free_port()}"
    summary = run_replay(
        trace, http_transport_factory(url, trace, opts, transport=name), opts, tmp_path
    )
    assert summary["status"] == "failed" and "server gone" in summary["reason"]
    assert summary["connection_retries"] >= 2
    run = orjson.loads((tmp_path / "run.json").read_bytes())
    assert run["status"] == "failed"


def test_server_dying_mid_run_fails_it_and_keeps_the_records(tmp_path):
    trace = make_trace({f"t{i}": [{"gap": 0.01}] * 10 for i in range(2)})
    opts = RunOptions(pool=2, server_gone_grace_s=0.3)
    with FaultServer(stop_after=6) as srv:
        summary = run_replay(
            trace, http_transport_factory(srv.url, trace, opts, model="m"), opts, tmp_path
        )
    assert summary["status"] == "failed"
    rows = read_jsonl(tmp_path / "calls.jsonl")
    # the 7th request finds the server dying; the other agent's call may be cut with it
    assert sum(r["status"] == "ok" for r in rows) in (5, 6)
    assert len(pd.read_parquet(tmp_path / "calls.parquet")) == len(rows)


def test_refused_connections_are_retried_until_the_server_is_back():
    """A server that comes up within the grace loses no call."""
    port = free_port()
    trace = make_trace({"a": [{}, {}]})
    opts = RunOptions(pool=1, server_gone_grace_s=5.0)
    srv = FaultServer(bind_port=port)

    async def main():
        factory = http_transport_factory(f"http://127.0.0.1:{port}", trace, opts, model="m")
        loop = asyncio.get_running_loop()
        loop.call_later(0.3, srv.start)
        return await replay(trace, factory(), opts)

    try:
        result = asyncio.run(main())
    finally:
        srv.stop()
    assert result.status == "ok" and len(result.rows) == 2 and result.connection_retries >= 1
    assert result.rows[0]["t_send"] >= 0.3
    # the wait for the server is not the client's lateness: drift is the first attempt's
    assert result.rows[0]["drift_s"] < 0.1


def test_drift_above_10ms_warns_that_the_client_shaped_the_run(tmp_path, capsys):
    # a send-rate cap holds calls back: that is client-side drift, and the run says so
    trace = make_trace({f"t{i}": [{}] for i in range(6)})
    opts = RunOptions(pool=6, max_rps=20.0)
    with FaultServer() as srv:
        summary = run_replay(
            trace, http_transport_factory(srv.url, trace, opts, model="m"), opts, tmp_path
        )
    assert summary["drift_p99_s"] > 0.2  # the 6th call waits 5 x 50 ms
    assert summary["warnings"] and "drift" in summary["warnings"][0]
    assert "p99 send drift" in capsys.readouterr().err
    sends = sorted(r["t_send"] for r in read_jsonl(tmp_path / "calls.jsonl"))
    # deadlines 50 ms apart: the k-th send is never before k x 50 ms after the first
    assert all(t - sends[0] >= k * 0.05 - 1e-3 for k, t in enumerate(sends))


# larger than the loopback socket buffers: a request this size is still being written when the
# server resets the connection after reading its head
_HUGE_PROMPT_TOKENS = 2_500_000


async def _answer_sse(ex) -> bool:
    payload = sse_body(len(orjson.loads(ex.body)["prompt"]), 7)
    ex.writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(payload), payload)
    )
    return True


@pytest.mark.parametrize("name", TRANSPORT_NAMES)
def test_request_cut_off_while_being_written_is_sent_once_more(name):
    """The server resets the connection after the request's head, before its body: it cannot
    have acted on the request, so the transport sends it again on a fresh connection, once."""
    with ScriptServer(_answer_sse, reset_after_head=lambda conn, n: conn == 0) as srv:
        res = _complete(name, srv.url, _req(n=_HUGE_PROMPT_TOKENS), request_timeout_s=30)
    assert res.prompt_tokens == _HUGE_PROMPT_TOKENS and res.completion_tokens == 7
    assert res.extra.get("stale_connection_retries") == 1
    assert srv.resets_after_head == 1 and srv.opened == 2
    assert [e.conn_id for e in srv.exchanges] == [1]  # run once, on the second connection


@pytest.mark.parametrize("name", TRANSPORT_NAMES)
def test_dead_keep_alive_connection_is_resent_once(name):
    """A kept-alive connection dies as it is reused: the server answered the first request on
    it, kept it open, and resets it the moment the second request's head arrives (the request
    is still being written). Every transport sends that request once more, on a new connection,
    and the server runs it exactly once."""

    async def main():
        t = TRANSPORTS[name](HttpOptions(srv.url, model="m", request_timeout_s=30))
        await t.start()
        try:
            first = await t.complete(_req(n=50))
            second = await t.complete(_req(n=_HUGE_PROMPT_TOKENS))
            return first, second
        finally:
            await t.close()

    with ScriptServer(_answer_sse, reset_after_head=lambda conn, n: (conn, n) == (0, 1)) as srv:
        first, second = asyncio.run(main())
    assert "stale_connection_retries" not in first.extra
    assert second.prompt_tokens == _HUGE_PROMPT_TOKENS
    assert second.extra.get("stale_connection_retries") == 1
    assert srv.resets_after_head == 1 and srv.opened == 2
    # the first request on the kept-alive connection, the second once, on the new one
    assert [(e.conn_id, e.on_conn) for e in srv.exchanges] == [(0, 0), (1, 0)]


@pytest.mark.parametrize("name", TRANSPORT_NAMES)
def test_two_dead_connections_in_a_row_fail_the_request(name):
    """The resend is once: a request whose second connection dies the same way fails."""
    always = ScriptServer(_answer_sse, reset_after_head=lambda conn, n: True)
    with always as srv, pytest.raises(RequestFailed) as e:
        _complete(name, srv.url, _req(n=_HUGE_PROMPT_TOKENS), request_timeout_s=30)
    assert e.value.kind == "connection" and "connection lost" in str(e.value)
    assert srv.resets_after_head == 2 and srv.exchanges == []


@pytest.mark.parametrize("name", TRANSPORT_NAMES)
@pytest.mark.parametrize("prompt_tokens", [50, _HUGE_PROMPT_TOKENS])
def test_a_request_written_whole_is_not_resent(name, prompt_tokens):
    """The server read the whole request and closed without answering: it may have acted on it,
    so no second send."""

    async def script(ex) -> bool:
        return False

    with ScriptServer(script) as srv, pytest.raises(RequestFailed) as e:
        _complete(name, srv.url, _req(n=prompt_tokens), request_timeout_s=30)
    assert e.value.kind == "connection"
    assert len(srv.exchanges) == 1 and srv.opened == 1


def test_raw_resends_a_request_crossing_a_kept_alive_connections_clean_close():
    """The server answered once on a connection, then closes it cleanly (FIN) as the next request
    arrives, before answering: it was retiring the connection (llama.cpp's server did this about
    once in 400 calls). The raw transport sends that request once more on a new connection; on a
    connection that never answered, the same close is not resent (see the test above)."""

    async def script(ex) -> bool:
        if (ex.conn_id, ex.on_conn) == (0, 1):
            return False  # read the whole request, close without a byte of answer
        return await _answer_sse(ex)

    async def main():
        t = TRANSPORTS["raw"](HttpOptions(srv.url, model="m", request_timeout_s=30))
        await t.start()
        try:
            return await t.complete(_req(n=50)), await t.complete(_req(n=60))
        finally:
            await t.close()

    with ScriptServer(script) as srv:
        first, second = asyncio.run(main())
    assert "stale_connection_retries" not in first.extra
    assert second.prompt_tokens == 60 and second.extra.get("stale_connection_retries") == 1
    assert [(e.conn_id, e.on_conn) for e in srv.exchanges] == [(0, 0), (0, 1), (1, 0)]


def test_cli_offers_exactly_the_registered_transports_and_default():
    from replay.cli.run_cmd import command

    (opt,) = [p for p in command.params if p.name == "transport_name"]
    assert sorted(opt.type.choices) == TRANSPORT_NAMES
    assert opt.default == DEFAULT_TRANSPORT


# --- legal SSE forms, token counting without ids, in-stream errors (an audit's findings) --------


def _stream(events: list, sep: bytes = b"\n") -> bytes:
    body = b"".join(b"data: " + orjson.dumps(e) + sep + sep for e in events)
    return body + b"data: [DONE]" + sep + sep


_USAGE = {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3}}


@pytest.mark.parametrize(
    "raw",
    [
        _stream([{"choices": [{"text": "a"}]}, _USAGE], sep=b"\r"),  # bare CR line ends
        b"\xef\xbb\xbf" + _stream([{"choices": [{"text": "a"}]}, _USAGE]),  # byte-order mark
        b"foo: bar\ndata\nevent: x\n\n" + _stream([{"choices": [{"text": "a"}]}, _USAGE]),
    ],
    ids=["bare-cr", "bom", "unknown-field-and-bare-data"],
)
def test_legal_sse_forms_parse(raw):
    """The SSE spec's three line ends, a leading BOM, fields the spec says to ignore: each was
    recorded as malformed."""
    for cut in range(0, len(raw), 5):
        acc = SseAccumulator()
        acc.feed_bytes(raw[:cut], 1.0)
        acc.feed_bytes(raw[cut:], 2.0)
        acc.flush(2.0)
        res = acc.result(3.0, streamed=True)
        assert (res.prompt_tokens, res.completion_tokens, acc.stream_tokens) == (9, 3, 1)


def test_tokens_with_empty_text_count_and_a_bare_finish_chunk_does_not():
    """Without token ids, a chunk of empty text is a token (vLLM streams a token that ends inside
    a UTF-8 character so): they were skipped, which made TTFT late by two tokens here. A last
    chunk carrying only the finish reason is not a token; nor is an empty id list."""
    acc = SseAccumulator()
    for t, text in ((1.0, ""), (2.0, ""), (3.0, "a"), (4.0, "b")):
        acc.feed_object({"choices": [{"text": text, "finish_reason": None}]}, t)
    acc.feed_object({"choices": [{"text": "", "finish_reason": "length"}]}, 5.0)
    acc.feed_object({"choices": [{"text": "", "token_ids": []}]}, 6.0)
    assert (acc.t_first_token, acc.t_second_token, acc.t_last_token) == (1.0, 2.0, 4.0)
    assert acc.stream_tokens == 4


@pytest.mark.parametrize(("code", "kind"), [(500, "http_5xx"), ("503", "http_5xx"),
                                            (400, "http_4xx"), (None, "http_5xx")])  # fmt: skip
def test_an_error_object_inside_a_200_stream_is_the_servers_failure(code, kind):
    """vLLM and SGLang report a failure after the 200 as an error object in the stream, with
    the HTTP code it would have had: it was recorded as a malformed response."""
    acc = SseAccumulator()
    with pytest.raises(RequestFailed) as e:
        acc.feed_object({"error": {"message": "engine died", "code": code}}, 1.0)
    assert e.value.kind == kind and "engine died" in str(e.value)


@pytest.mark.parametrize("name", TRANSPORT_NAMES)
def test_the_event_stream_content_type_is_read_case_blind(name):
    """`Text/Event-Stream` is the same media type (RFC 9110): httpx read the body as JSON."""

    async def answer(ex) -> bool:
        payload = sse_body(len(orjson.loads(ex.body)["prompt"]), 7)
        ex.writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: Text/Event-Stream\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(payload), payload)
        )
        return True

    with ScriptServer(answer) as srv:
        res = _complete(name, srv.url, _req())
    assert res.completion_tokens == 7 and res.t_first_token is not None
