# First image: the appliance on the official vLLM GPU build.
# Build on the connected side, ship with `docker save | sha256sum`, load on the air-gapped host.
# Run (example):
#   docker run --init --gpus all --read-only --tmpfs /tmp --cap-drop=ALL \
#     --security-opt=no-new-privileges --shm-size=8g -p 8000:8000 \
#     -v /srv/models/current:/models/current:ro -v /srv/appliance/etc:/etc/appliance:ro \
#     -v appliance-cache:/var/cache/appliance appliance:0.1.0
# The gateway refuses plaintext HTTP on 0.0.0.0 (error[plaintext_not_allowed]): the mounted
# /etc/appliance/policy.toml sets [gateway.tls] (certificate and key, e.g. under
# /etc/appliance/tls), or `allow_plaintext = true` only behind a TLS-terminating proxy
# (README "Transport security").
ARG BASE=nvidia/cuda:12.8.1-runtime-ubuntu24.04
FROM ${BASE} AS runtime

# gcc + headers stay: Triton/inductor compile small launchers at run time.
RUN apt-get update && apt-get install -y --no-install-recommends \
        python3 python3-venv python3-dev gcc libc6-dev ca-certificates tini \
    && rm -rf /var/lib/apt/lists/*

RUN groupadd --system --gid 10001 appliance \
 && useradd --system --uid 10001 --gid appliance --home-dir /var/cache/appliance \
        --create-home appliance

WORKDIR /opt/appliance
COPY pyproject.toml README.md ./
COPY appliance ./appliance
COPY scanner ./scanner
COPY policies ./policies
RUN python3 -m venv /opt/appliance/.venv \
 && /opt/appliance/.venv/bin/pip install --no-cache-dir '.[gpu]' \
 && /opt/appliance/.venv/bin/pip uninstall -y torchvision torchaudio torchcodec || true

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
