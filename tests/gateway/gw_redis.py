"""A real ``redis-server`` for admission tests: localhost, a free port, a password, optional
TLS (certificates made by trustme), stopped and started again on the same port.

Tests using it skip (with the reason) when ``redis-server`` is not installed
(``apt-get install redis-server``; ``.ci/run`` installs it and sets
``APPLIANCE_REQUIRE_REDIS=1``, which turns the skip into a failure).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
import trustme

PASSWORD = "test-redis-password-0001"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """``start()`` / ``stop()`` a redis-server on ``127.0.0.1:port`` (same port each time);
    with ``tls`` it listens with TLS only and ``ca`` is its trustme CA (client certificates
    required when ``client_auth``)."""

    def __init__(self, workdir: Path, tls: bool = False, client_auth: bool = False) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            reason = "redis-server is not installed (apt-get install redis-server)"
            if os.environ.get("APPLIANCE_REQUIRE_REDIS") == "1":
                pytest.fail(reason)
            pytest.skip(reason)
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.tls = tls
        self.client_auth = client_auth
        self.proc: subprocess.Popen[bytes] | None = None
        self.ca: trustme.CA | None = None
        if tls:
            self.ca = trustme.CA()
            server = self.ca.issue_cert("127.0.0.1", "localhost")
            server.cert_chain_pems[0].write_to_path(str(workdir / "redis.crt"))
            server.private_key_pem.write_to_path(str(workdir / "redis.key"))
            self.ca.cert_pem.write_to_path(str(workdir / "ca.crt"))
            client = self.ca.issue_cert("gateway@test")
            client.cert_chain_pems[0].write_to_path(str(workdir / "client.crt"))
            client.private_key_pem.write_to_path(str(workdir / "client.key"))

    @property
    def url(self) -> str:
        return f"{'rediss' if self.tls else 'redis'}://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        args = [self.binary, "--bind", "127.0.0.1", "--requirepass", PASSWORD,
                "--save", "", "--appendonly", "no", "--dir", str(self.workdir),
                "--protected-mode", "yes", "--loglevel", "warning"]
        if self.tls:
            args += ["--port", "0", "--tls-port", str(self.port),
                     "--tls-cert-file", str(self.workdir / "redis.crt"),
                     "--tls-key-file", str(self.workdir / "redis.key"),
                     "--tls-ca-cert-file", str(self.workdir / "ca.crt"),
                     "--tls-auth-clients", "yes" if self.client_auth else "no"]
        else:
            args += ["--port", str(self.port)]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL,  # noqa: S603
                                     stderr=subprocess.PIPE)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"redis-server exited: {err[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not listen within 15 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None
