"""Security-hardened model-loading and serving appliance.

Spine: verify (OpenSSF Model Signing) -> scan (``scanner``) -> preflight (advisory floors,
environment) -> launch vLLM (hardened argv, xgrammar, strict tool calling) -> async gateway.

Layout (one package per role; a layer imports only the layers below it, never one above,
enforced by the import-linter contracts in ``pyproject.toml``; where each kind of fact goes:
``docs/where-things-go.md``)::

    cli/          the ``appliance`` command: one module per command group, cli.GROUPS
    error_codes   every error-code registry and ``docs/errors.md`` generated from them
    owasp         the OWASP Top 10 for LLM Applications table, ``docs/owasp-llm-2026.md``
    toolbench/    ``appliance bench``: the tool-calling benchmark, the raw-vLLM comparison
    convert/      ``appliance convert``: pickle checkpoints -> safetensors, read by the
                  scanner's pickle machine, never unpickled
    builtin/      the built-in demo model: prepare, GGUF convert, demo, chat template
    serve         the spine: verify -> scan -> preflight -> engine -> gateway (Appliance)
    runtime/      the policy read into runtime settings once: gateway_settings(policy, ...)
    gateway/      the OpenAI-compatible gateway: http/ (app, http.routes.ROUTES, server),
                  chat/, responses, admission/, models/, auth/, telemetry/, schema/
    engine/       vLLM launch (the one engine argv), supervisor, EngineStatus, sd_notify
    preflight/    package floors, environment rules (preflight.RULES), the signed advisory
                  feed (feed/), engine quirks, TLS files
    config/       the policy: one strict pydantic model per TOML table, named API keys
    store/        the trusted model store
    audit/        the audit log's hash chain, signed checkpoints and sinks; ``appliance
                  audit verify``
    signing/      OpenSSF Model Signing: sign, verify, stage
    errors        ApplianceError and its codes; resources: shipped policies and data;
                  atomic_file: the file-writing primitives (replace a file atomically,
                  create a new file fsynced, fsync a folder)

``scanner`` (the model scanner) sits below all of them and never imports ``appliance``.
"""

__version__ = "0.1.0"
