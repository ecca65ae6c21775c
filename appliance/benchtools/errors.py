"""Benchmark errors: one ``BenchError`` with a stable ``code``, the offending field and a fix.

Codes:

=========================  ===============================================================
``endpoint_unreachable``   connection refused / DNS / TLS failure / timeout on the endpoint
``bad_api_key``            the endpoint answered 401 or 403
``unknown_model``          the model is not served there (404 or not in ``GET /models``)
``garbage_response``       the endpoint answered something that is not an OpenAI response
``suite_invalid``          a suite name that does not exist or a suite file that is wrong
``baseline_invalid``       the ``--baseline`` file is not a report of this tool
``bad_argument``           a command-line value out of range (``--concurrency 0`` …)
``missing_dependency``     ``openai`` (or ``matplotlib`` for plots) is not installed
``bench_aborted``          too many transport errors in a row during the run
=========================  ===============================================================

All exit with status 2 (no verdict); a regression against the baseline exits 1.
"""

from __future__ import annotations

from appliance.errors import ApplianceError


class BenchError(ApplianceError):
    code = "bench_error"
    exit_status = 2
