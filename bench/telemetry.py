"""Tracing overhead benchmark: the gateway with OpenTelemetry off, exporting to a collector
that is up, and exporting to a collector that is down (nothing listens on its port).

Same rig as ``bench/gateway.py`` (whose engine, gateway run path, load generator and
statistics it reuses): a fake engine with a fixed delay, three gateway processes on the
gateway CPU (``off``, ``up``, ``down``), an OTLP/HTTP receiver process (decodes each
``ExportTraceServiceRequest`` with ``opentelemetry-proto`` and counts the spans) on the rig
CPU, and a closed-loop load generator alternating the three targets within each round.
Reported per mode: throughput, latency p50 / p99, gateway CPU per request, and for ``up`` and
``down`` the paired median differences against ``off`` (same round). Target (issue 23): with
the collector down, latency unchanged within noise (added p50 well under 1 ms and throughput
within a few per cent of ``off``).

Usage::

    PYTHONPATH=. python bench/telemetry.py [--rounds 3] [--duration 5] [--conns 16]
        [--delay-ms 50] [--modes ns,stream] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gateway as rig  # noqa: E402  (bench/gateway.py: engine, load generator, statistics)


def run_gateway(port: int, engine_port: int, otlp: str | None) -> None:
    """A gateway process (production run path) with tracing to ``otlp`` (``None``: off)."""
    from appliance.config.telemetry import TelemetryPolicy
    from appliance.gateway import GatewaySettings, serve_until_signal

    telemetry = TelemetryPolicy(otlp_endpoint=otlp) if otlp else None
    settings = GatewaySettings(
        upstream_url=f"http://127.0.0.1:{engine_port}", served_model_name=rig.MODEL,
        api_keys=[rig.KEY], tools_enabled=True, telemetry=telemetry)
    serve_until_signal(settings, "127.0.0.1", port)


def run_receiver(port: int, count_file: str) -> None:
    """The OTLP/HTTP receiver process: counts spans into ``count_file`` on exit."""
    import http.server
    import signal

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    counts = {"spans": 0, "requests": 0}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            request = ExportTraceServiceRequest()
            request.ParseFromString(self.rfile.read(int(self.headers["content-length"])))
            counts["requests"] += 1
            counts["spans"] += sum(len(s.spans) for r in request.resource_spans
                                   for s in r.scope_spans)
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)

    def _stop(*_: Any) -> None:
        Path(count_file).write_text(json.dumps(counts))
        os._exit(0)

    signal.signal(signal.SIGTERM, _stop)
    server.serve_forever()


def _paired(base: list[dict[str, Any]], other: list[dict[str, Any]], key: str,
            ratio: bool = False) -> float:
    values = [(o[key] / b[key]) if ratio else (o[key] - b[key])
              for b, o in zip(base, other, strict=True) if b[key] and o[key]]
    return statistics.median(values) if values else float("nan")


def report(results: dict[tuple[str, str], list[dict[str, Any]]], modes: list[str]) -> None:
    print()
    for mode in modes:
        off = results[(mode, "off")]
        for name in ("off", "up", "down"):
            rows = results[(mode, name)]
            line = (f"{mode:6s} {name:4s} {rig._median(rows, 'rps'):7.0f} req/s  p50 "
                    f"{rig._median(rows, 'p50'):6.2f} ms  p99 {rig._median(rows, 'p99'):6.2f} ms"
                    f"  cpu/req {rig._median(rows, 'cpu_us_per_req'):5.0f} us")
            if name != "off":
                line += (f"  | vs off: {_paired(off, rows, 'rps', True):.3f}x req/s, p50 "
                         f"{_paired(off, rows, 'p50'):+.2f} ms, p99 "
                         f"{_paired(off, rows, 'p99'):+.2f} ms, cpu/req "
                         f"{_paired(off, rows, 'cpu_us_per_req'):+.0f} us")
            print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--role", choices=["bench", "engine", "gateway", "receiver"],
                    default="bench")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--engine-port", type=int, default=0)
    ap.add_argument("--otlp", default=None)
    ap.add_argument("--count-file", default=None)
    ap.add_argument("--delay-ms", type=float, default=50.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.5)
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--modes", default="ns,stream")
    ap.add_argument("--cpu", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--json", default=None, help="write raw per-round results here")
    args = ap.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    if args.role == "engine":
        rig.run_engine(args.port, args.delay_ms)
        return
    if args.role == "gateway":
        run_gateway(args.port, args.engine_port, args.otlp)
        return
    if args.role == "receiver":
        run_receiver(args.port, args.count_file)
        return

    cpus = sorted(os.sched_getaffinity(0))
    gw_cpu, rig_cpu = (cpus[0], cpus[1]) if len(cpus) >= 2 else (None, None)
    engine_port, receiver_port, dead_port = (rig._free_port() for _ in range(3))
    ports = {name: rig._free_port() for name in ("off", "up", "down")}
    otlp = {"off": None, "up": f"http://127.0.0.1:{receiver_port}",
            "down": f"http://127.0.0.1:{dead_port}"}
    count_file = os.path.join(tempfile.mkdtemp(prefix="otel-bench-"), "count.json")

    def spawn(extra: list[str], cpu: int | None) -> Any:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent) + os.pathsep + \
            env.get("PYTHONPATH", "")
        pin = ["--cpu", str(cpu)] if cpu is not None else []
        import subprocess

        return subprocess.Popen([sys.executable, __file__, *extra, *pin], env=env)

    procs = [spawn(["--role", "engine", "--port", str(engine_port), "--delay-ms",
                    str(args.delay_ms)], rig_cpu),
             spawn(["--role", "receiver", "--port", str(receiver_port), "--count-file",
                    count_file], rig_cpu)]
    gateways = {}
    for name, port in ports.items():
        extra = ["--role", "gateway", "--port", str(port), "--engine-port", str(engine_port)]
        if otlp[name]:
            extra += ["--otlp", str(otlp[name])]
        gateways[name] = spawn(extra, gw_cpu)
    procs = [*gateways.values(), *procs]
    try:
        if rig_cpu is not None:
            os.sched_setaffinity(0, {rig_cpu})
        rig._wait_ready(f"http://127.0.0.1:{engine_port}/health")
        for port in ports.values():
            rig._wait_ready(f"http://127.0.0.1:{port}/health/ready")
        modes = args.modes.split(",")
        print(f"# engine delay {args.delay_ms} ms, {args.conns} connections, {args.rounds} "
              f"rounds x {args.duration}s (+{args.warmup}s warm-up), gateway CPU {gw_cpu}, "
              f"engine+receiver+loadgen CPU {rig_cpu}, {os.cpu_count()} CPUs")
        pids = tuple(p.pid for p in procs)
        results: dict[tuple[str, str], list[dict[str, Any]]] = {
            (m, t): [] for m in modes for t in ports}
        import uvloop

        for rnd in range(args.rounds):
            for mode in modes:
                for name, port in ports.items():
                    url = f"http://127.0.0.1:{port}/v1/chat/completions"
                    row = uvloop.run(rig.measure(url, mode == "stream", args.conns,
                                                 args.warmup, args.duration,
                                                 gateways[name].pid, pids))
                    results[(mode, name)].append(row)
                    print(f"round {rnd + 1} {mode:6s} {name:4s} {row['rps']:7.0f} req/s p50 "
                          f"{row['p50']:.2f} p99 {row['p99']:.2f} errors {row['errors']} "
                          f"cpu/req {row['cpu_us_per_req'] or 0:.0f} us, outside load "
                          f"{row['outside_cores']:.2f} cores", flush=True)
        report(results, modes)
        if args.json:
            Path(args.json).write_text(json.dumps(
                {f"{m}/{t}": rows for (m, t), rows in results.items()}, indent=1))
    finally:
        rig.stop_processes(procs)
    if os.path.exists(count_file):
        counts = json.loads(Path(count_file).read_text())
        served = sum(r["n"] for (m, t), rows in results.items() if t == "up" for r in rows)
        print(f"receiver: {counts['spans']} spans in {counts['requests']} exports "
              f"(~5 per traced request; {served} 'up' requests counted in the windows)")


if __name__ == "__main__":
    main()
