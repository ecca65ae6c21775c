#!/usr/bin/env bash
# Write requirements-gpu.lock, the hash lock the Dockerfile's GPU stage (`runtime`) installs
# with `pip --require-hashes --no-deps`, on the CONNECTED side:
#   bash scripts/gpu_lock.sh [OUT]          (default OUT: requirements-gpu.lock at the root)
# It resolves the project's [gpu] extra (vllm, torch, xgrammar, openai) plus its base
# dependencies and setuptools (the image builds the project from source without a network
# build environment) for the GPU image's interpreter and platform, not this machine's:
#   GPU_PYTHON   Python version of the image's python3 (default 3.12: ubuntu24.04)
#   GPU_GLIBC    glibc minor version of the base (default 39: ubuntu24.04); wheels tagged
#                manylinux_2_5 .. manylinux_2_<GPU_GLIBC> x86_64 (and the legacy aliases) fit
#   INDEX_URL    the package index (default https://pypi.org/simple)
# pip downloads every wheel to read its metadata where the index serves none (several GB of
# CUDA wheels; nothing is installed). Each line is `name==version --hash=sha256:...` from the
# index (scripts/bundle_lock.py); the project itself is not in the lock (the image builds it
# from the copied source). torchvision/torchaudio/torchcodec are left out, as on CPU.
# pip checks wheel tags and Requires-Python against GPU_PYTHON but evaluates environment
# markers with the interpreter that runs it: run it as PYTHON=python3.12 where one exists
# (torch's `setuptools; python_version >= "3.12"` is covered by the explicit pin either way).
# Re-run after changing a pin in pyproject.toml or the GPU base image, and commit the lock.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/requirements-gpu.lock}
PYTHON=${PYTHON:-python3}
GPU_PYTHON=${GPU_PYTHON:-3.12}
GPU_GLIBC=${GPU_GLIBC:-39}
GPU_PLATFORMS="manylinux2014_x86_64 manylinux2010_x86_64 manylinux1_x86_64"
for ((minor = GPU_GLIBC; minor >= 5; minor--)); do GPU_PLATFORMS+=" manylinux_2_${minor}_x86_64"; done
INDEX_URL=${INDEX_URL:-https://pypi.org/simple}
PINS=(torch==2.14.0 setuptools==80.9.0)
ABI=cp${GPU_PYTHON/./}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
PIP=("$PYTHON" -m pip --isolated --disable-pip-version-check --no-input)

echo "gpu_lock: building the project wheel (for its metadata)" >&2
"${PIP[@]}" wheel -q --no-deps --no-build-isolation -w "$WORK/project" "$ROOT"
WHEEL=$(ls "$WORK"/project/model_appliance-*.whl)

PLATFORM_ARGS=()
for p in $GPU_PLATFORMS; do PLATFORM_ARGS+=(--platform "$p"); done
echo "gpu_lock: resolving [gpu] for cp${GPU_PYTHON/./}, glibc <= 2.$GPU_GLIBC, from $INDEX_URL" >&2
"${PIP[@]}" install -q --dry-run --ignore-installed --only-binary=:all: \
    --index-url "$INDEX_URL" --target "$WORK/target" \
    --python-version "$GPU_PYTHON" --implementation cp --abi "$ABI" --abi abi3 --abi none \
    "${PLATFORM_ARGS[@]}" --platform any \
    --report "$WORK/gpu.json" "${PINS[@]}" "$WHEEL[gpu]"
"$PYTHON" "$ROOT/scripts/bundle_lock.py" --exclude model-appliance,torchvision,torchaudio,torchcodec \
    --out "$OUT" "$WORK/gpu.json"
sed -i '1,2c\# Hash-pinned lock of the GPU image (Dockerfile, stage runtime), written by scripts/gpu_lock.sh\n#   for cp'"${GPU_PYTHON/./}"' x86_64; install: pip install --no-deps --require-hashes -r THIS_FILE' "$OUT"
echo "gpu_lock: wrote $OUT ($(grep -c '^[a-z0-9]' "$OUT") wheels)" >&2
