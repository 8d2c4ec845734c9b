"""`replay predict` end to end: JSON on stdout, the same JSON in -o FILE, one-line errors."""

import subprocess
import sys

import numpy as np
import orjson
import pytest

from replay.cli.main import main
from replay.trace.io import write_trace
from tests.model_traces import agent_tasks, make_trace


def run_cli(capsys, *argv):
    with pytest.raises(SystemExit) as e:
        main(list(argv))
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def ok_json(capsys, *argv):
    try:
        main(list(argv))
    except SystemExit as e:
        assert e.code in (0, None), capsys.readouterr().err
    return orjson.loads(capsys.readouterr().out)


def _sim_run(trace_file, run):
    """A recorded run of `trace_file` on the simulator (pool 2), for --order run:DIR."""
    ran = subprocess.run(
        [sys.executable, "-m", "replay.cli.main", "run", "--trace", str(trace_file), "--pool",
         "2", "--engine", "sim", "--device-kv-gib", "1", "--out", str(run), "--quiet"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    return run


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("t") / "small.jsonl.gz"
    write_trace(make_trace(agent_tasks(np.random.default_rng(5), 4, 5, head=20)), path)
    return path


def test_closed_form_json(capsys):
    doc = ok_json(
        capsys,
        "predict",
        "--closed-form",
        "--pool",
        "16",
        "--mean-prompt-tokens",
        "33000",
        "--bytes-per-token",
        "24576",
        "--tiers-gib",
        "5,10,20",
        "--json",
    )
    assert round(doc["working_set_gib"], 1) == 11.3
    assert [round(p, 1) for p in doc["pressure_ratio"]] == [2.3, 1.1, 0.6]


def test_trace_mode_prints_and_writes_the_same_prediction(capsys, trace_file, tmp_path):
    out = tmp_path / "predictions.json"
    argv = [
        "predict",
        "--trace",
        str(trace_file),
        "--pool",
        "2",
        "--bytes-per-token",
        "1",
        "--chunk-tokens",
        "4",
        "--device-tokens",
        "64",
        "--block-tokens",
        "4",
        "--tiers-gib",
        "0,1",
        "--json",
        "-o",
        str(out),
    ]
    doc = ok_json(capsys, *argv)
    assert orjson.loads(out.read_bytes()) == doc
    assert [t["host_tier_gib"] for t in doc["tiers"]] == [0, 1]
    assert doc["order"] == "pool" and doc["calls"] == 20
    for t in doc["tiers"]:
        assert (
            t["computed_prefill_tokens"] + t["host_restore_tokens"] + t["device_hit_tokens"]
            == doc["prompt_tokens"]
        )
    again = ok_json(capsys, *argv[:-2])  # deterministic: same inputs, same prediction
    assert again == doc


def test_trace_mode_with_model_and_hardware_service_times(capsys, trace_file):
    doc = ok_json(
        capsys,
        "predict",
        "--trace",
        str(trace_file),
        "--pool",
        "3",
        "--model",
        "llama-3-8b",
        "--hardware",
        "h100",
        "--tiers-gib",
        "0.001",
        "--chunk-tokens",
        "4",
        "--no-pays",
        "--json",
    )
    assert doc["bytes_per_token"] == 131072 and doc["offload_pays_from_gib"] is None
    assert "range" not in doc and doc["engine_queue"] is False


def test_trace_mode_queue_and_ranges(capsys, trace_file):
    argv = ["predict", "--trace", str(trace_file), "--pool", "3", "--model", "llama-3-8b"]
    argv += ["--hardware", "h100", "--tiers-gib", "0,0.001", "--chunk-tokens", "4", "--no-pays"]
    doc = ok_json(capsys, *argv, "--queue", "--ranges", "--json")
    assert doc["engine_queue"] is True and doc["range"]["method"] == "service_bounds"
    for row in doc["tiers"]:
        q = "computed_prefill_tokens"
        assert row[f"{q}_low"] <= row[q] <= row[f"{q}_high"]
    # ranges need service times from a roofline: without --hardware the JSON says why
    flat = ["predict", "--trace", str(trace_file), "--pool", "3", "--bytes-per-token", "1"]
    doc = ok_json(capsys, *flat, "--ranges", "--no-pays", "--json")
    assert "unavailable" in doc["range"]

    # and the table says it too (it printed no range and no word of why)
    def table(*args: str) -> str:
        try:
            main(list(args))
        except SystemExit as e:
            assert e.code in (0, None)
        return capsys.readouterr().out

    assert "ranges: unavailable: ranges need a roofline" in table(*flat, "--ranges", "--no-pays")
    out = table(*argv, "--ranges")
    assert "ranges (low-high):" in out and "computed " in out.split("ranges (low-high):")[1]
    # with the queue each tier has its own device hits: a column of the JSON's, not one total
    # in the header that was the first tier's
    lines = table(*argv, "--queue").splitlines()
    header = next(i for i, x in enumerate(lines) if "tier GiB" in x)
    assert lines[header].split()[-2:] == ["device", "hits"] and "device hits" not in lines[0]
    doc = ok_json(capsys, *argv, "--queue", "--json")
    for row, line in zip(doc["tiers"], lines[header + 1 :], strict=False):
        assert line.split()[-1] == f"{row['device_hit_tokens']:,}"


def test_economics_and_sessions(capsys):
    eco = ok_json(
        capsys,
        "predict",
        "--economics",
        "--model",
        "llama-3-70b",
        "--hardware",
        "h20,h800",
        "--json",
    )
    assert [h["hardware"] for h in eco["hardware"]] == ["h20", "h800"]
    ses = ok_json(
        capsys,
        "predict",
        "--sessions",
        "--model",
        "llama-3-70b",
        "--hardware",
        "explainer-4xa100",
        "--session-tokens",
        "100000",
        "--device-gib",
        "167.6",
        "--max-sessions",
        "6",
        "--json",
    )
    assert [r["device_hit_rate"] for r in ses["curve"]] == [1, 1, 1, 1, 1, 0]


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--closed-form", "--mean-prompt-tokens", "5", "--bytes-per-token", "1"], "--pool"),
        (
            ["--trace", "/nonexistent/t.jsonl", "--pool", "2", "--bytes-per-token", "1"],
            "nonexistent",
        ),
        (["--economics", "--model", "gpt-9"], "valid: llama-3-70b"),
        (  # printed a table; the simulator refuses it
            [
                "--trace",
                "t.jsonl",
                "--pool",
                "2",
                "--bytes-per-token",
                "1",
                "--chunk-tokens",
                "100",
                "--device-gib",
                "1",
            ],  # fmt: skip
            "--chunk-tokens: must be a multiple of --block-tokens",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys, argv, says):
    code, out, err = run_cli(capsys, "predict", *argv)
    assert code == 2
    assert err.startswith("replay: ") and says in err and "Traceback" not in err


def test_unknown_run_directory(capsys, trace_file):
    code, _, err = run_cli(
        capsys,
        "predict",
        "--trace",
        str(trace_file),
        "--pool",
        "2",
        "--bytes-per-token",
        "1",
        "--order",
        "run:/nonexistent",
    )
    assert code == 2 and "run directory" in err


def test_a_run_of_another_trace_is_refused_as_the_order(capsys, trace_file, tmp_path):
    """A run's order predicts the trace it replayed; another trace with the same task ids gave
    a prediction for the run's calls under the other trace's name."""
    other = tmp_path / "other.jsonl.gz"
    write_trace(make_trace(agent_tasks(np.random.default_rng(6), 4, 5, head=20)), other)
    run = _sim_run(trace_file, tmp_path / "run")
    argv = ["predict", "--pool", "2", "--bytes-per-token", "1", "--order", f"run:{run}"]
    code, _, err = run_cli(capsys, *argv, "--trace", str(other))
    assert code == 2 and f"run:{run} replayed another trace" in err
    assert ok_json(capsys, *argv, "--trace", str(trace_file), "--json")["calls"] > 0


def test_no_traceback_from_the_real_entry_point():
    r = subprocess.run(
        [sys.executable, "-m", "replay.cli.main", "predict", "--economics"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and r.stderr.startswith("replay: ") and "Traceback" not in r.stderr


def test_a_trace_prediction_without_a_device_says_so_whole_and_lists_its_tiers_alike(
    capsys, trace_file
):
    """The note stopped at "give --device-gib for the run's"; the tier column printed 5 beside
    10.00."""
    argv = ["predict", "--trace", str(trace_file), "--pool", "3", "--bytes-per-token", "1"]
    try:
        main([*argv, "--tiers-gib", "0,2.5,5,10,20", "--no-pays"])
    except SystemExit as e:
        assert e.code in (0, None)
    out, err = capsys.readouterr()
    assert "give --device-gib for the run's device KV per rank (the engine's device_kv_gib)" in err
    tiers = [line.split()[0] for line in out.splitlines()[3:8]]
    assert tiers == ["0", "2.5", "5", "10", "20"], out


def test_more_slots_than_tasks_count_only_the_tasks_in_the_working_set(capsys, trace_file):
    """4 tasks on 100 slots: at most 4 agents are ever active, so the working set is (4 - 1) x
    the mean prompt, as --pool 4 gives (it was 99 x)."""
    common = ["--trace", str(trace_file), "--bytes-per-token", "1000", "--tiers-gib", "1"]
    for mode in (["--closed-form"], ["--device-gib", "1", "--no-pays"]):
        docs = {}
        for pool in ("4", "100"):
            try:
                main(["predict", *mode, *common, "--pool", pool, "--json"])
            except SystemExit as e:
                assert e.code in (0, None)
            out, err = capsys.readouterr()
            docs[pool] = orjson.loads(out)
            assert ("at most 4 are active at once" in err) == (pool == "100"), err
        assert docs["100"]["working_set_gib"] == docs["4"]["working_set_gib"] > 0


def test_prompts_in_flight_past_the_device_get_a_note(capsys, trace_file):
    """The model neither pins running calls' blocks nor queues admission: where pool x the
    prompts' 90th percentile outgrows the device it counts device hits high (docs/model.md), and
    says so (pool x mean missed a heavy tail of long prompts)."""
    argv = ["predict", "--trace", str(trace_file), "--pool", "4", "--bytes-per-token", "1",
            "--tiers-gib", "0", "--no-pays"]  # fmt: skip
    errs = {}
    for device_tokens in (64, 10**6):
        try:
            main([*argv, "--device-gib", str(device_tokens / 2**30)])
        except SystemExit as e:
            assert e.code in (0, None)
        errs[device_tokens] = capsys.readouterr().err
    assert "does not pin running calls' blocks or queue admission" in errs[64]
    assert "in flight" not in errs[10**6]


def test_a_model_prediction_at_the_default_tp_says_its_sizes_are_per_rank_of_one(
    capsys, trace_file
):
    """--model without --tp predicted at TP 1 in silence, while the simulator runs TP 8 by
    default: the same tier size held 8x the tokens in the run as in the prediction."""
    argv = ["predict", "--trace", str(trace_file), "--pool", "3", "--model", "llama-3-8b"]
    for tp, noted in (([], True), (["--tp", "1"], False), (["--tp", "8"], False)):
        try:
            main([*argv, *tp, "--tiers-gib", "0,1", "--device-gib", "1"])
        except SystemExit as e:
            assert e.code in (0, None)
        err = capsys.readouterr().err
        assert ("--tp 1 (the default): sizes are per rank" in err) is noted, (tp, err)


def test_a_run_of_the_same_trace_stored_otherwise_or_generated_is_its_order(
    capsys, trace_file, tmp_path
):
    """The run's sha256 is of its file's bytes, or of a generated trace's JSONL text: the same
    trace gzip-compressed on one side and plain on the other, or generated by a sweep's `synth`,
    was refused as another trace, and the message named the generated one's path `None`."""
    import gzip

    from replay.driver.run import trace_content_sha256
    from replay.trace.io import read_trace

    plain = tmp_path / "small.jsonl"
    plain.write_bytes(gzip.decompress(trace_file.read_bytes()))
    run = _sim_run(trace_file, tmp_path / "run")
    argv = ["predict", "--pool", "2", "--bytes-per-token", "1", "--order", f"run:{run}", "--json"]
    assert ok_json(capsys, *argv, "--trace", str(plain))["calls"] > 0  # the run's was gzip
    doc = orjson.loads((run / "run.json").read_bytes())
    doc["provenance"] |= {"trace": None,  # as a sweep's `synth` trace records it
                          "trace_sha256": trace_content_sha256(read_trace(trace_file))}  # fmt: skip
    (run / "run.json").write_bytes(orjson.dumps(doc))
    for given in (trace_file, plain):
        assert ok_json(capsys, *argv, "--trace", str(given))["calls"] > 0
    other = tmp_path / "other.jsonl.gz"
    write_trace(make_trace(agent_tasks(np.random.default_rng(6), 4, 5, head=20)), other)
    code, _, err = run_cli(capsys, *argv, "--trace", str(other))
    assert code == 2 and "replayed another trace (generated, sha256" in err and "None" not in err


def test_the_in_flight_note_sees_a_heavy_tail_the_mean_hides(capsys, tmp_path):
    from replay.trace.synth import synth
    from replay.trace.write import write_trace

    trace = synth("claude-code", tasks=8, seed=1)
    path = tmp_path / "cc.jsonl.gz"
    write_trace(trace, path)
    lengths = sorted(c.prompt_len for c in trace.calls)
    p90 = lengths[int(0.9 * (len(lengths) - 1))]
    mean = trace.prompt_tokens / len(trace)
    device_tokens = int(mean + p90)  # between 2 x mean and 2 x p90
    assert 2 * mean < device_tokens < 2 * p90
    try:
        main(["predict", "--trace", str(path), "--pool", "2", "--bytes-per-token", "1",
              "--device-gib", str(device_tokens / 2**30), "--tiers-gib", "0", "--no-pays"])  # fmt: skip
    except SystemExit as e:
        assert e.code in (0, None)
    assert "does not pin running calls' blocks" in capsys.readouterr().err


def test_no_pays_says_the_search_was_skipped_not_never(capsys, trace_file):
    argv = ["predict", "--trace", str(trace_file), "--pool", "3", "--bytes-per-token", "1",
            "--tiers-gib", "0,0.001", "--no-pays"]  # fmt: skip
    try:
        main(argv)
    except SystemExit as e:
        assert e.code in (0, None)
    out = capsys.readouterr().out
    assert "offload pays (restores >= writes) from: not searched (--no-pays)" in out
    doc = ok_json(capsys, *argv, "--json")
    assert doc["offload_pays_searched"] is False and doc["offload_pays_from_gib"] is None


def test_an_output_inside_the_run_it_reads_is_refused(capsys, trace_file, tmp_path):
    # `predict --order run:DIR -o DIR/run.json` replaced the run with the prediction
    run = _sim_run(trace_file, tmp_path / "run")
    before = (run / "run.json").read_bytes()
    argv = ["predict", "--trace", str(trace_file), "--pool", "2", "--bytes-per-token", "1",
            "--order", f"run:{run}", "-o", str(run / "run.json")]  # fmt: skip
    code, _, err = run_cli(capsys, *argv)
    assert code == 2 and "which this command reads" in err, err
    assert (run / "run.json").read_bytes() == before
