"""Run many `replay` command lines in one interpreter (the CLI corpus test's worker).

Reads a JSON list of {"cwd": DIR, "argv": [...]} on stdin and prints a JSON list of
{"code": exit status, "out": stdout, "err": stderr}: each command goes through the real entry
point `replay.cli.main.main`, as the console script does, with its streams captured. An exception
that escapes the entry point is reported as exit 99 with its traceback in `err`, which the test
then shows. One interpreter for the whole corpus keeps it quick on a small machine (the imports
of a `replay` process cost about a second each).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import traceback

import orjson

from replay.cli.main import main


def run_one(cwd: str, argv: list[str]) -> dict:
    out, err = io.StringIO(), io.StringIO()
    code = 0
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(argv)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException:  # what a user would see as a traceback
                code = 99
                err.write(traceback.format_exc())
    finally:
        os.chdir(old)
    return {"code": code, "out": out.getvalue(), "err": err.getvalue()}


if __name__ == "__main__":
    jobs = orjson.loads(sys.stdin.buffer.read())
    results = [run_one(j["cwd"], j["argv"]) for j in jobs]
    sys.stdout.buffer.write(orjson.dumps(results))
