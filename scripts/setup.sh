#!/usr/bin/env bash
# Set up trainwell in ./.venv: a virtual environment, PyTorch (a CPU build where there is
# no NVIDIA GPU, so no multi-GB CUDA download), and trainwell with its test tools.
# Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}

step() { echo "setup: [$1/4] $2"; }

step 1 "virtual environment in .venv"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
VPY=.venv/bin/python
"$VPY" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true

if "$VPY" -c "import torch" >/dev/null 2>&1; then
  step 2 "torch is installed: $("$VPY" -c 'import torch; print(torch.__version__)')"
elif command -v nvidia-smi >/dev/null 2>&1; then
  # The newest CUDA wheel the driver runs (a wheel built for a newer CUDA than the driver
  # fails at its first kernel); the plain index where PyTorch's cannot be reached.
  CU=$(nvidia-smi 2>/dev/null | "$VPY" scripts/cuda_wheel.py)
  step 2 "NVIDIA GPU found; installing torch $TORCH_VERSION for $CU (a few GB, several minutes)"
  "$VPY" -m pip install --progress-bar on "torch==$TORCH_VERSION" \
      --index-url "https://download.pytorch.org/whl/$CU" \
    || "$VPY" -m pip install --progress-bar on "torch==$TORCH_VERSION"
else
  step 2 "no NVIDIA GPU; installing the CPU build of torch $TORCH_VERSION (about a minute)"
  # PyTorch's CPU wheel index first; where it cannot be reached, a plain install
  # (which on machines with a local CPU wheel picks it).
  "$VPY" -m pip install --quiet --timeout 15 --retries 0 "torch==$TORCH_VERSION" \
      --index-url https://download.pytorch.org/whl/cpu 2>/dev/null \
    || "$VPY" -m pip install --quiet "torch==$TORCH_VERSION"
fi
# numpy is listed explicitly: some torch wheels do not pull it in. The optional parts
# (TensorBoard, MLflow, ONNX, the HTML report) come too, so every feature and its tests work.
step 3 "trainwell with TensorBoard, MLflow, ONNX, the report and the test tools (a minute or two)"
"$VPY" -m pip install --quiet numpy -e ".[dev,all]" 2>&1 | grep -v -E "^(WARNING|  )|DEPRECATION" || true
# Bytecode ahead of time: where PYTHONDONTWRITEBYTECODE is set (as on these machines)
# every process would compile the package from source again, 0.6 s of each
# `trainwell train` here (5.6 s against 4.8 s of CPU for a 2-step run).
"$VPY" -m compileall -q trainwell tests benchmarks >/dev/null || true
step 4 "check"
"$VPY" -c "import torch, trainwell; print(f'setup: trainwell {trainwell.__version__}, torch {torch.__version__}')"
