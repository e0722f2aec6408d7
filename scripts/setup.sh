#!/usr/bin/env bash
# Set up trainwell in ./.venv: a virtual environment, PyTorch (a CPU build where there is
# no NVIDIA GPU, so no multi-GB CUDA download), and trainwell with its test tools.
# Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}

[ -x .venv/bin/python ] || "$PY" -m venv .venv
VPY=.venv/bin/python
"$VPY" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true

if ! "$VPY" -c "import torch" >/dev/null 2>&1; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    echo "setup: NVIDIA GPU found; installing torch $TORCH_VERSION (CUDA build)"
    "$VPY" -m pip install --quiet "torch==$TORCH_VERSION"
  else
    echo "setup: no NVIDIA GPU; installing the CPU build of torch $TORCH_VERSION"
    # PyTorch's CPU wheel index first; where it cannot be reached, a plain install
    # (which on machines with a local CPU wheel picks it).
    "$VPY" -m pip install --quiet --timeout 15 --retries 0 "torch==$TORCH_VERSION" \
        --index-url https://download.pytorch.org/whl/cpu 2>/dev/null \
      || "$VPY" -m pip install --quiet "torch==$TORCH_VERSION"
  fi
fi
# numpy is listed explicitly: some torch wheels do not pull it in. The optional parts
# (TensorBoard, MLflow, ONNX, the HTML report) come too, so every feature and its tests work.
"$VPY" -m pip install --quiet numpy -e ".[dev,all]" 2>&1 | grep -v -E "^(WARNING|  )|DEPRECATION" || true
"$VPY" -c "import torch, trainwell; print(f'setup: trainwell {trainwell.__version__}, torch {torch.__version__}')"
