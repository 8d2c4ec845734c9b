#!/usr/bin/env bash
# Build one engine's GPU environment, .venv-gpu-ENGINE, at the versions replay's adapters are
# checked against (make test-contracts), with this project installed into it.
#
# Usage: scripts/setup-gpu.sh vllm|sglang|lmcache [VENV_DIR]   (run from the repository root)
# Environment: PYTHON (interpreter to create the venv with), REPLAY_PYTHON (one where replay is
# importable, to read the pins; default .venv/bin/python).
#
# Why each step:
# - One environment per engine: vLLM and SGLang pin different torch builds; LMCache runs inside
#   vLLM's workers, so its environment is vLLM's plus LMCache.
# - The pins come from the adapters (PINNED_VERSION), so the environment, the contract tests and
#   the preflight's version check cannot disagree.
# - replay goes in with --no-deps: the servers only import its forcing processors
#   (replay.engines.vllm_forcing_v2, replay.engines.sglang_forcing), which need nothing beyond the
#   engine; its own dependencies would fight the engine's pins.
# - huggingface_hub (a dependency of every engine) is what `replay model fetch` downloads with.
set -euo pipefail

ENGINE=${1:-}
case "$ENGINE" in
  vllm|sglang|lmcache) ;;
  *) echo "setup-gpu: ENGINE must be vllm, sglang or lmcache (make setup-gpu ENGINE=vllm)" >&2; exit 2 ;;
esac
VENV=${2:-.venv-gpu-$ENGINE}
PYTHON=${PYTHON:-python3}
REPLAY_PYTHON=${REPLAY_PYTHON:-.venv/bin/python}
REQS=$("$REPLAY_PYTHON" -c "from replay.engines.preflight import requirements; print(*requirements('$ENGINE'))")
MODULES=$("$REPLAY_PYTHON" -c "from replay.engines.preflight import ENGINE_PACKAGES as P; print(','.join(m for m, _, _ in P['$ENGINE']))")
STAMP="$VENV/.installed"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$REQS" ]; then
  echo "setup-gpu: $VENV already has $REQS"
  exit 0
fi
if [ "${DRY_RUN:-0}" = 1 ]; then
  echo "would build $VENV with: $REQS huggingface_hub, then replay --no-deps (modules $MODULES)"
  exit 0
fi
start=$(date +%s)
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
"${PIP[@]}" install -q --upgrade pip
# shellcheck disable=SC2086  # REQS is a list of requirement specifiers
"${PIP[@]}" install $REQS huggingface_hub
"${PIP[@]}" install -q --no-deps -e .
"$VENV/bin/python" - "$MODULES" <<'PY'
import importlib
import sys

import replay.engines.sglang_forcing  # noqa: F401  (stdlib only: proves replay imports here)

for name in sys.argv[1].split(","):
    module = importlib.import_module(name)
    print(f"{name} {getattr(module, '__version__', '?')} ready")
PY
echo "$REQS" > "$STAMP"
echo "setup-gpu: $VENV ready in $(( $(date +%s) - start )) s; set [engine] python = \"$VENV/bin/python\""
