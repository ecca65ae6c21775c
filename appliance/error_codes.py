"""Every registry of error codes in the project, and ``docs/errors.md`` generated from them.

One :class:`~scanner.diagnostic.CodeRegistry` per area (its ``title`` is the section heading
in ``docs/errors.md``):

=================  ===================================================  ====================
area               registry                                             raised as
=================  ===================================================  ====================
``appliance``      :data:`appliance.errors.APPLIANCE_CODES`             ``ApplianceError``
``store``          :data:`appliance.store._layout.STORE_CODES`          ``StoreError``
``preflight``      :data:`appliance.preflight.PREFLIGHT_CODES`          ``preflight.Problem``
``engine kernels`` :data:`appliance.preflight.kernels.KERNEL_CODES`     ``KernelError``
``advisory feed``  :data:`appliance.preflight.feed.FEED_CODES`          ``FeedError``
``bench``          :data:`appliance.toolbench.errors.BENCH_CODES`      ``BenchError``
``convert``        :data:`appliance.convert.CONVERT_CODES`              ``ConvertError``
``audit``          :data:`appliance.audit.errors.AUDIT_CODES`           ``AuditError``
``gateway``        :class:`appliance.gateway.errors.GatewayCode`        ``GatewayError``,
                                                                        ``SchemaProblem``
``scanner CLI``    :data:`scanner.cli.CLI_CODES`                        ``Diagnostic``
=================  ===================================================  ====================

Scanner findings are keyed by rule ids instead (``python -m scanner --list-rules``,
``docs/scanner.md``). Regenerate the document with
``python -m appliance.error_codes > docs/errors.md``; ``tests/test_error_codes.py``
checks that it lists exactly the registered codes and that every code literal in the source
is registered.
"""

from __future__ import annotations

from appliance.audit.errors import AUDIT_CODES
from appliance.convert import CONVERT_CODES
from appliance.errors import APPLIANCE_CODES
from appliance.gateway.errors import GATEWAY_CODES, GatewayCode
from appliance.preflight import PREFLIGHT_CODES
from appliance.preflight.feed import FEED_CODES
from appliance.preflight.kernels import KERNEL_CODES
from appliance.store._layout import STORE_CODES
from appliance.toolbench.errors import BENCH_CODES
from scanner.cli import CLI_CODES
from scanner.diagnostic import CodeRegistry

REGISTRIES: tuple[CodeRegistry, ...] = (
    APPLIANCE_CODES, STORE_CODES, PREFLIGHT_CODES, KERNEL_CODES, FEED_CODES, BENCH_CODES,
    CONVERT_CODES, GATEWAY_CODES, CLI_CODES, AUDIT_CODES)

_INTRO = """\
# Error codes

Every error the appliance, the gateway and the scanner CLI report is a *diagnostic*:
a stable `code`, a message, where (`at:` — a path, field, JSON pointer or variable) and the fix
(`scanner/core/diagnostic.py`, public as `scanner.diagnostic`). On a terminal:

```
error[<code>]: <message>
  at: <where>
  fix: <what to do>
```

Several problems (e.g. two preflight refusals) print one after another, each with its own
`at:` and `fix:` lines. As JSON (`Diagnostic.to_json()`): `{"code", "message", "at", "fix"}`;
the gateway answers in the OpenAI error shape `{"error": {"message", "type", "param", "code"}}`
with `param` as `at`. Exit status: 1 refused, 2 usage error / no verdict (policy errors and
`appliance bench` errors are 2).

Codes live in one registry per area: `appliance`, `store`, `preflight`, `bench`, `gateway`
(the `GatewayCode` enum, which carries each code's HTTP status) and `scanner CLI`. The tables
below are generated from those registries (`python -m appliance.error_codes > docs/errors.md`);
tests check that this document lists exactly the registered codes and that every code the
source raises is registered. Scanner findings use rule ids instead ([scanner.md](scanner.md)).
"""


def _gateway_table() -> str:
    rows = ["| code | status | meaning |", "|---|---|---|"]
    kept = "4xx (the engine's)"
    rows += [f"| `{c}` | {c.status or kept} | {c.meaning.replace('|', '/')} |"
             for c in sorted(GatewayCode, key=str)]
    return "\n".join(rows)


def markdown() -> str:
    """The whole ``docs/errors.md``."""
    parts = [_INTRO]
    for registry in REGISTRIES:
        table = _gateway_table() if registry is GATEWAY_CODES else registry.markdown()
        parts.append(f"## {registry.title}\n\n{table}\n")
    return "\n".join(parts)


if __name__ == "__main__":
    print(markdown(), end="")
