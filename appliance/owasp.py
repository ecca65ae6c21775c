"""The appliance against the OWASP Top 10 for LLM Applications 2026: one table, one document.

:data:`RISKS` holds, for each of the ten risks (numbering and names of the 2026 edition,
published 2026-08-04: ``2026/README.md`` of GenAI-Security-Project/GenAI-LLM-Top10), what
the appliance enforces, the policy keys that steer it, the tests that prove it (pytest node
ids, ``tests/<file>.py::<test function>``) and what it does not cover. ``docs/owasp-llm-2026.md``
is generated from it::

    python -m appliance.owasp > docs/owasp-llm-2026.md

``tests/test_owasp_map.py`` keeps the document equal to :func:`render` and every
named test existing, so a renamed or deleted test breaks the build instead of leaving a
claim without proof.
"""

from __future__ import annotations

from dataclasses import dataclass

SOURCE = "https://genai.owasp.org/resource/owasp-genai-llm-top-10-2026/"


@dataclass(frozen=True)
class Risk:
    """One risk: ``id`` (``LLM01``), ``name``, ``enforced`` (sentences), ``policy_keys``
    (``[table] key``), ``tests`` (node ids), ``out_of_scope`` (sentences)."""

    id: str
    name: str
    enforced: tuple[str, ...]
    policy_keys: tuple[str, ...]
    tests: tuple[str, ...]
    out_of_scope: tuple[str, ...]


GW = "tests/gateway/"
RISKS: tuple[Risk, ...] = (
    Risk(
        "LLM01", "Prompt Injection",
        ("The model's prompt is built only by the signed, scanned chat template: engine "
         "extensions that would replace or bypass it (`chat_template`, `guided_*`, "
         "`prompt_embeds` ...) are refused 400 `forbidden_parameter`, and the legacy "
         "`/v1/completions` (raw prompts) is not served.",
         "An injected model can only call the tools the request offered, with arguments "
         "valid against their schemas, honouring `tool_choice` and `parallel_tool_calls`: "
         "every call is validated before the client sees it (502 `invalid_tool_call`).",
         "Message fields are allow-listed; response-only fields in user messages are "
         "refused."),
        ("[engine] chat_template", "[engine] tool_call_parser", "[gateway] max_messages"),
        (GW + "test_gateway_requests.py::test_forbidden_engine_extensions",
         GW + "test_gateway_core.py::test_routes_outside_allowlist_are_404_without_engine",
         GW + "test_gateway_tools.py::test_invalid_tool_calls_are_502",
         GW + "test_gateway_tools.py::test_named_tool_choice_enforced",
         GW + "test_gateway_clients.py::test_response_only_fields_refused_on_user_messages"),
        ("Detecting or filtering injected instructions in user content, retrieved documents "
         "or tool results: the appliance has no prompt classifier. Whatever the model "
         "decides within the offered tools is the calling application's to authorise.",)),
    Risk(
        "LLM02", "Sensitive Information Disclosure",
        ("No prompt or answer text is written to the audit log, metrics or traces unless "
         "`[audit] include_prompts = true`; keys are stored and logged only as SHA-256 "
         "digests or ids.",
         "Access is by key, OIDC token or client certificate, with per-key and per-group "
         "model allow-lists (403 `model_not_allowed`) and source-address allow-lists "
         "(403 `source_not_allowed`); TLS and mutual TLS on the listener.",
         "The engine listens only on a Unix socket or loopback behind the gateway."),
        ("[audit] include_prompts", "[gateway] allowed_sources", "[gateway] trusted_proxies",
         "[auth.groups.<name>] models", "[auth.groups.<name>] allowed_sources",
         "[gateway.tls]"),
        (GW + "test_gateway_audit.py::test_records_say_who_what_and_how_much_never_the_prompt"
              "_and_verify",
         GW + "test_gateway_audit.py::test_prompts_are_recorded_only_when_the_policy_says_so",
         GW + "test_gateway_core.py::test_settings_keep_only_key_hashes",
         GW + "test_gateway_model_access.py::test_keys_see_and_use_only_their_models",
         GW + "test_gateway_source_address.py::test_key_limited_to_10_8_is_refused_from_"
              "loopback_and_served_once_allowed",
         GW + "test_gateway_source_address.py::test_forwarded_for_from_an_untrusted_peer_is"
              "_ignored"),
        ("What the model memorised from its training data, and personal data in prompts: "
         "no redaction or data-loss-prevention filter runs on requests or answers.",)),
    Risk(
        "LLM03", "Excessive Agency",
        ("The appliance executes no tool: it returns validated calls, and the application "
         "runs them. A call to a tool that was not offered, or another than the named "
         "`tool_choice`, is refused; a call cut by `max_tokens` is withheld, never returned "
         "as a call; `tool_choice: none` means no call reaches the client.",
         "Tool requests are refused when the engine would not constrain them (no vetted "
         "parser: `tools_unavailable`)."),
        ("[engine] tool_call_parser", "[gateway] max_tokens_cap"),
        (GW + "test_gateway_tools.py::test_calls_refused_when_tool_choice_none_or_no_tools",
         GW + "test_gateway_tools.py::test_cut_tool_call_in_stream_is_withheld",
         GW + "test_gateway_core.py::test_tools_disabled_gives_400",
         "tests/engine/test_launcher_public_bugs.py::test_tool_choice_without_parser_"
         "refused"),
        ("Which tools an application offers and what they may do (permissions, human "
         "approval): that is the agent's design.",)),
    Risk(
        "LLM04", "Supply Chain",
        ("Models are served only when their OpenSSF Model Signing signature verifies offline "
         "against the policy's trust store, from a read-only store; pickle weights, "
         "`auto_map` / `trust_remote_code` code and unsafe chat templates are refused by the "
         "scanner before load.",
         "Engine packages are held to version floors from a signed advisory list; engine "
         "flags that open attack surface are never passed."),
        ("[trust] keys", "[trust] revoked", "[store] root", "[scan] deep",
         "[preflight] advisories", "[preflight] advisory_feed",
         "[preflight] advisories_max_age_days"),
        ("tests/signing/test_signing_tamper.py::test_file_added_is_unsigned",
         "tests/signing/test_signing_tamper.py::test_byte_flipped_names_path_and_hex_digests",
         "tests/scanner/formats/test_pickle_streams.py::test_payload_in_third_stream_is_"
         "malicious_and_located",
         "tests/scanner/scan/test_folder.py::test_config_auto_map_anywhere",
         "tests/scanner/formats/test_template.py::test_sandbox_escape_constructs_are_"
         "malicious",
         "tests/preflight/test_preflight.py::test_vllm_below_floor_is_refused_with_advisory_"
         "id",
         "tests/engine/test_launcher.py::test_argv_never_contains_dangerous_flags"),
        ("Whether a signer's model is trustworthy: the trust store decides whom to believe. "
         "Python dependencies other than the engine stack are pinned, not scanned.",)),
    Risk(
        "LLM05", "Data and Model Poisoning",
        ("The served weights are exactly the signed ones: any added, removed or changed "
         "byte refuses the model, so poisoning after signing is caught.",
         "Checkpoints in PyTorch formats are converted to safetensors without unpickling "
         "them; malicious pickles are refused."),
        ("[trust] keys", "[store] root"),
        ("tests/signing/test_signing_tamper.py::test_file_removed",
         "tests/signing/test_signing_golden.py::test_golden_tampered_copy_fails",
         "tests/convert/test_convert_refusals.py::test_malicious_corpus_case_is_refused"),
        ("Poisoned training or fine-tuning data inside a model its publisher signed: the "
         "appliance proves where the weights came from, not how they behave.",)),
    Risk(
        "LLM06", "Unbounded Consumption",
        ("Per-key and per-group requests per minute, tokens per minute, concurrency, daily "
         "and monthly token quotas (429 `rate_limited` / `quota_exceeded`), a global "
         "in-flight bound and a bounded queue wait (503 `overloaded`), a `max_tokens` cap, "
         "body, message, header and response size limits, request timeouts.",
         "Token usage by model (and by key where the policy opts in) is exported for "
         "charge-back, with alert rules on queue wait and time to first token."),
        ("[admission] max_pending", "[admission.default_limits]", "[auth.groups.<name>] tpm",
         "[gateway] max_tokens_cap", "[gateway] max_body_bytes", "[gateway] request_timeout_s",
         "[telemetry] metrics_by_key"),
        (GW + "test_gateway_admission.py::test_rpm_bucket_refuses_with_retry_after",
         GW + "test_gateway_admission.py::test_tpm_charges_prompt_and_max_tokens",
         GW + "test_gateway_admission.py::test_global_bound_503_overloaded",
         GW + "test_gateway_bounded_wait.py::test_daily_quota_refuses_and_is_kept_across_"
              "restart",
         GW + "test_gateway_requests.py::test_oversize_request",
         GW + "test_gateway_genai_metrics.py::test_streamed_request_moves_tokens_ttft_and_"
              "tpot"),
        ("Cost controls on a provider's bill: the appliance runs the model itself, so "
         "consumption is bounded in requests, tokens and time, not money.",)),
    Risk(
        "LLM07", "Misinformation",
        ("Structured output is checked: a `response_format` JSON-schema answer is validated "
         "against its schema (and strict JSON, no repeated keys) before the client sees it; "
         "an answer cut by `max_tokens` is marked `finish_reason: length`, never passed off "
         "as complete.",),
        ("[gateway] max_tokens_cap",),
        (GW + "test_gateway_tools.py::test_structured_output_is_validated",
         GW + "test_gateway_tools.py::test_json_schema_answer_with_a_repeated_key_is_refused",
         GW + "test_gateway_clients.py::test_openai_parse_cut_structured_output_raises_length_"
              "error"),
        ("Whether an answer is true: no fact checking, grounding or citation checks. Users "
         "and applications must treat model output as unverified.",)),
    Risk(
        "LLM08", "Hidden Context Exposure",
        ("The appliance adds no hidden context of its own: the prompt is the client's "
         "messages rendered by the signed chat template, and `chat_template_kwargs` are "
         "limited to an allow-list. Tool schemas and system prompts are never logged "
         "(the audit log keeps tool names only).",),
        ("[engine] chat_template", "[audit] include_prompts"),
        (GW + "test_gateway_audit.py::test_records_say_who_what_and_how_much_never_the_prompt"
              "_and_verify",
         GW + "test_gateway_requests.py::test_forbidden_engine_extensions"),
        ("A system prompt or tool list an application sends can be repeated by the model to "
         "its user: keep secrets out of prompts; the appliance cannot stop a model from "
         "echoing its context.",)),
    Risk(
        "LLM09", "Vector and Embedding Weaknesses",
        ("Not applicable to what the appliance serves: it has no embeddings endpoint, vector "
         "store or retrieval step (only chat completions and responses).",),
        (),
        (GW + "test_gateway_core.py::test_routes_outside_allowlist_are_404_without_engine",),
        ("Retrieval-augmented applications built on the appliance own their vector stores, "
         "access control on documents and ingestion checks.",)),
    Risk(
        "LLM10", "Improper Output Handling",
        ("Every tool call and structured answer is parsed strictly and validated before it "
         "leaves the gateway (JSON, object, schema, size; streams reassembled and checked "
         "before release); engine errors become stable error codes, never raw tracebacks.",),
        ("[gateway] max_body_bytes",),
        (GW + "test_gateway_tools.py::test_invalid_tool_calls_are_502",
         GW + "test_gateway_tools.py::test_stream_tool_delta_reassembly",
         GW + "test_gateway_core.py::test_upstream_4xx_keeps_status_and_5xx_becomes_502"),
        ("Free text is returned as the model wrote it: escaping it for HTML, SQL or a shell "
         "is the consuming application's job.",)),
)


def _cell(items: tuple[str, ...], code: bool = False) -> str:
    if not items:
        return "none"
    return "<br>".join(f"`{i}`" if code else i for i in items)


def render() -> str:
    """``docs/owasp-llm-2026.md`` (Markdown) from :data:`RISKS`."""
    out = [
        "# OWASP Top 10 for LLM Applications 2026: what the appliance enforces",
        "",
        "<!-- Generated by `python -m appliance.owasp > docs/owasp-llm-2026.md` from the "
        "table in appliance/owasp.py; tests/test_owasp_map.py keeps it in sync "
        "and every test named here existing. -->",
        "",
        f"The ten risks of the [2026 edition]({SOURCE}) (published 2026-08-04, renumbered "
        "from 2025), and for each: what the appliance enforces, the policy keys that steer "
        "it, the tests that prove it, and what it does not cover, said plainly. The "
        "appliance is a model server and gateway: it controls what is loaded, who may call "
        "it, how much, and what leaves it; it does not judge what a model says.",
        "",
        "| risk | enforced | policy keys | out of scope |",
        "|---|---|---|---|",
    ]
    for risk in RISKS:
        out.append(f"| **{risk.id}** {risk.name} | {_cell(risk.enforced)} | "
                   f"{_cell(risk.policy_keys, code=True)} | {_cell(risk.out_of_scope)} |")
    out += ["", "## Tests that prove it", ""]
    for risk in RISKS:
        out.append(f"* **{risk.id} {risk.name}**: "
                   + ", ".join(f"`{t}`" for t in risk.tests))
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(render(), end="")
