"""Benchmark errors: one ``BenchError`` with a stable ``code``, the offending field and a fix.

Codes: :data:`BENCH_CODES` (the table is in ``docs/errors.md``).

All exit with status 2 (no verdict); a regression against the baseline exits 1.
"""

from __future__ import annotations

from typing import ClassVar

from appliance.errors import ApplianceError
from scanner.diagnostic import CodeRegistry

BENCH_CODES = CodeRegistry("bench", {
    "bench_error": "a benchmark error without a more specific code",
    "endpoint_unreachable": "connection refused / DNS / TLS failure / timeout on the endpoint",
    "bad_api_key": "the endpoint answered 401 or 403",
    "unknown_model": "the model is not served there (404 or not in GET /models)",
    "no_such_route": "the endpoint has no chat completions route (404 on the route)",
    "garbage_response": "the endpoint answered something that is not an OpenAI response",
    "suite_invalid": "a suite name that does not exist or a suite file that is wrong",
    "baseline_invalid": "the --baseline file is not a report of this tool",
    "bad_argument": "a command-line value out of range (--concurrency 0 ...)",
    "missing_dependency": "openai (or matplotlib for plots) is not installed",
    "bench_aborted": "too many unusable answers in a row during the run",
    "bench_interrupted": "the run was interrupted (Ctrl-C); the partial report is kept",
})
"""Codes of :class:`BenchError` (one-line meanings)."""


class BenchError(ApplianceError):
    code = "bench_error"
    exit_status = 2
    registry: ClassVar[CodeRegistry] = BENCH_CODES
