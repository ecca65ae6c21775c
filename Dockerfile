# Two images from the same stages: `runtime` (GPU, official vLLM; the default, built on the
# connected side) and `cpu` (the CPU engine stack from an air-gap bundle; builds with
# --network=none). Ship either with `docker save | sha256sum`, load on the air-gapped host.
#
# GPU (connected side; BuildKit builds only the stages a target needs). Its third-party wheels
# are exactly requirements-gpu.lock (hash-checked; regenerate with bash scripts/gpu_lock.sh
# after changing a pin or this base, and commit it):
#   docker build -t appliance:0.1.0 .
#   docker run --gpus all --read-only --tmpfs /tmp --cap-drop=ALL \
#     --security-opt=no-new-privileges --shm-size=8g -p 8000:8000 \
#     -v /srv/models/current:/models/current:ro -v /srv/appliance/etc:/etc/appliance:ro \
#     -v appliance-cache:/var/cache/appliance appliance:0.1.0
# The gateway refuses plaintext HTTP on 0.0.0.0 (error[plaintext_not_allowed]): the mounted
# /etc/appliance/policy.toml sets [gateway.tls] (certificate and key, e.g. under
# /etc/appliance/tls), or `allow_plaintext = true` only behind a TLS-terminating proxy
# (docs/tls.md).
# (no --init: tini is already the entrypoint, a second init only warns.)
#
# CPU, offline: a base with python3, python3-venv, libnuma1, tini (e.g. made locally:
# mmdebstrap --variant=minbase --include=python3,python3-venv,libnuma1,tini,ca-certificates
# bookworm - | docker import - localbase/bookworm-py:12), and the bundle in ./bundle
# (bash scripts/bundle.sh bundle):
#   docker build --network=none --target cpu --build-arg CPU_BASE=localbase/bookworm-py:12 \
#     -t appliance:cpu .          (BuildKit: the default since Docker 23; DOCKER_BUILDKIT=1 on
#                                  Debian bookworm's docker.io 20.10. A rebuilt bundle rebuilds
#                                  only the project wheel's layer.)
#   docker run --read-only --tmpfs /tmp --tmpfs /var/cache/appliance:uid=10001,gid=10001 \
#     --cap-drop=ALL --security-opt=no-new-privileges --network=none \
#     -v MODEL:/models/current:ro -v ETC:/etc/appliance:ro appliance:cpu
# (tests/deploy/test_container.py does exactly this and waits for the health check.)
ARG BASE=nvidia/cuda:12.8.1-runtime-ubuntu24.04
ARG CPU_BASE=debian:bookworm-slim

# --- CPU: the bundle installed offline (hash-checked) ----------------------------------
# BuildKit only (RUN --mount; the default builder since Docker 23, DOCKER_BUILDKIT=1 before).
# Three steps so that a rebuilt bundle (a new project wheel) reuses the big layer: the
# wheelhouse stage checks the whole bundle against SHA256SUMS and keeps the third-party wheels
# and the lock without the project's line; the venv layer installs exactly those (cached by
# their content); the last layer adds only the project wheel. No bundle layer is kept.
FROM ${CPU_BASE} AS cpu-wheelhouse
RUN --mount=type=bind,source=bundle,target=/bundle \
    cd /bundle && sha256sum --quiet --strict -c SHA256SUMS \
 && mkdir -p /wheelhouse/wheels \
 && grep -v '^model-appliance==' requirements-cpu.lock > /wheelhouse/requirements.lock \
 && for w in wheels/*.whl; do \
        case ${w##*/} in model_appliance-*) ;; *) cp "$w" /wheelhouse/wheels/ ;; esac; \
    done

FROM ${CPU_BASE} AS cpu
RUN --mount=type=bind,from=cpu-wheelhouse,source=/wheelhouse,target=/wheelhouse \
    groupadd --system --gid 10001 appliance \
 && useradd --system --uid 10001 --gid appliance --home-dir /var/cache/appliance \
        --create-home appliance \
 && python3 -m venv /opt/appliance/.venv \
 && /opt/appliance/.venv/bin/python -m pip --isolated install --no-input -q --no-cache-dir \
        --disable-pip-version-check --no-index --no-deps --require-hashes --only-binary=:all: \
        --find-links /wheelhouse/wheels \
        -r /wheelhouse/requirements.lock
RUN --mount=type=bind,source=bundle,target=/bundle \
    cd /bundle && sha256sum --quiet --strict -c SHA256SUMS \
 && grep '^model-appliance==' requirements-cpu.lock > /tmp/appliance.lock \
 && /opt/appliance/.venv/bin/python -m pip --isolated install --no-input -q --no-cache-dir \
        --disable-pip-version-check --no-index --no-deps --require-hashes --only-binary=:all: \
        --find-links /bundle/wheels \
        -r /tmp/appliance.lock \
 && rm /tmp/appliance.lock \
 && /opt/appliance/.venv/bin/python -c "import appliance.cli" \
 && /opt/appliance/.venv/bin/python -m appliance.preflight.kernels
ENV HOME=/var/cache/appliance \
    XDG_CACHE_HOME=/var/cache/appliance \
    VLLM_CACHE_ROOT=/var/cache/appliance/vllm \
    TORCHINDUCTOR_CACHE_DIR=/var/cache/appliance/inductor \
    HF_HOME=/var/cache/appliance/hf \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 \
    VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
    PATH=/opt/appliance/.venv/bin:$PATH
USER appliance:appliance
EXPOSE 8000
STOPSIGNAL SIGTERM
HEALTHCHECK --start-period=15m --interval=10s --timeout=5s \
    CMD ["python3", "-c", "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/health/ready', timeout=4).status != 200)"]
ENTRYPOINT ["/usr/bin/tini", "--", "appliance", "serve"]
CMD ["--model", "/models/current", \
     "--policy", "/opt/appliance/.venv/lib/python3.11/site-packages/appliance/data/cpu-demo.toml", \
     "--public-key", "/etc/appliance/signing.pub", "--api-key-file", "/etc/appliance/api-keys", \
     "--host", "127.0.0.1", "--port", "8000"]
# (--network=none: only loopback exists; plaintext off loopback is refused, see above.)

# --- GPU (default target): official vLLM, built on the connected side ----------------------
FROM ${BASE} AS runtime

# gcc + headers stay: Triton/inductor compile small launchers at run time.
RUN apt-get update && apt-get install -y --no-install-recommends \
        python3 python3-venv python3-dev gcc libc6-dev ca-certificates tini \
    && rm -rf /var/lib/apt/lists/*

RUN groupadd --system --gid 10001 appliance \
 && useradd --system --uid 10001 --gid appliance --home-dir /var/cache/appliance \
        --create-home appliance

# Third-party wheels exactly as hash-locked in requirements-gpu.lock (scripts/gpu_lock.sh
# writes it for this base's python3 and x86_64; torchvision/torchaudio/torchcodec are not in
# it: vLLM declares them, the appliance serves text only), then the project from the copied
# source, offline, with the lock's setuptools. Every step must succeed (no `|| true`): a
# failed install fails the build. The last line proves the stack imports (vLLM's CUDA kernels
# need a GPU at run time, not here).
WORKDIR /opt/appliance
COPY requirements-gpu.lock ./
RUN python3 -m venv /opt/appliance/.venv \
 && /opt/appliance/.venv/bin/python -m pip --isolated install --no-input -q --no-cache-dir \
        --disable-pip-version-check --no-deps --require-hashes --only-binary=:all: \
        -r requirements-gpu.lock
COPY pyproject.toml setup.py MANIFEST.in README.md ./
COPY appliance ./appliance
COPY scanner ./scanner
COPY policies ./policies
RUN /opt/appliance/.venv/bin/python -m pip --isolated install --no-input -q --no-cache-dir \
        --disable-pip-version-check --no-deps --no-index --no-build-isolation . \
 && ! /opt/appliance/.venv/bin/python -m pip show -q torchvision torchaudio torchcodec \
 && /opt/appliance/.venv/bin/python -c "import vllm, torch, xgrammar, appliance.cli"

ENV HOME=/var/cache/appliance \
    XDG_CACHE_HOME=/var/cache/appliance \
    VLLM_CACHE_ROOT=/var/cache/appliance/vllm \
    TRITON_CACHE_DIR=/var/cache/appliance/triton \
    TORCHINDUCTOR_CACHE_DIR=/var/cache/appliance/inductor \
    HF_HOME=/var/cache/appliance/hf \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 \
    VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
    PATH=/opt/appliance/.venv/bin:$PATH

USER appliance:appliance
EXPOSE 8000
STOPSIGNAL SIGTERM
HEALTHCHECK --start-period=15m --interval=30s --timeout=5s \
    CMD ["python3", "-c", "import ssl,sys,urllib.request as u\nc=ssl._create_unverified_context()\nfor s in ('https','http'):\n try: sys.exit(u.urlopen(s+'://127.0.0.1:8000/health/ready',timeout=4,context=c).status!=200)\n except OSError: pass\nsys.exit(1)"]
ENTRYPOINT ["/usr/bin/tini", "--", "appliance", "serve"]
CMD ["--model", "/models/current", "--policy", "/etc/appliance/policy.toml", \
     "--public-key", "/etc/appliance/signing.pub", "--api-key-file", "/etc/appliance/api-keys", \
     "--host", "0.0.0.0", "--port", "8000"]
