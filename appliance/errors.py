"""One error base for the appliance, with a stable ``code`` and user diagnostics.

Tree::

    ApplianceError
    ├── PolicyError        policy file missing, unreadable or invalid
    ├── SigningError       keygen / sign / verify failures (``code`` names the case)
    ├── ScanRefused        the scanner's verdict is not clean
    ├── PreflightError     a package below its advisory floor, a forbidden environment
    ├── LaunchError        the engine did not start, died or timed out
    ├── TlsError           a gateway TLS file is unreadable, invalid or expired
    ├── StoreError         (appliance.store) a store operation refused; ``STORE_CODES``
    └── BenchError         (appliance.toolbench) ``appliance bench``; ``BENCH_CODES``

Every error is a :class:`scanner.diagnostic.Diagnostic` (``diagnostic``) and prints as
``error[<code>]: <message>`` plus, when known, the offending path or field (``at:``) and the
fix; an error that groups several problems (``details``) prints each of them after its own
head line. The CLI maps any ``ApplianceError`` to exit status 1 (refused) or 2 (usage / no
verdict) without a traceback.

Codes: each class names its :class:`~scanner.diagnostic.CodeRegistry` in ``registry``
(:data:`APPLIANCE_CODES` here); ``docs/errors.md`` lists every registered code, and a test
checks that every code literal in the source is registered.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from scanner.diagnostic import CodeRegistry, Diagnostic, render_many

APPLIANCE_CODES = CodeRegistry("appliance", {
    # generic / CLI
    "appliance_error": "an appliance error without a more specific code",
    "usage": "a command-line value is malformed (e.g. --expires not an ISO date)",
    "no_api_key": "serve has no API key: no --api-key-file, $APPLIANCE_API_KEYS or keys file",
    "invalid_api_key": "an API key from --api-key-file / $APPLIANCE_API_KEYS is malformed",
    "no_public_key": "verify / import / serve has no trusted key (--public-key or [trust])",
    "keys_invalid": "the named API keys file is unreadable or not a valid keys file",
    "quota_state_invalid": "the token-quota state file is unreadable or not a valid state "
                           "file (refused: starting from zero would renew every quota)",
    "key_exists": "keygen / keys add would overwrite an existing key or key id",
    "key_not_found": "keys revoke: no key with that id",
    "builtin_model_missing": "the package holding the built-in model's GGUF is not installed",
    "builtin_model_digest": "the built-in model's GGUF does not have its pinned SHA-256",
    "builtin_model_convert": "converting the built-in GGUF model to safetensors failed",
    # policy
    "policy_invalid": "the policy file is missing, unreadable or invalid",
    "advisories_invalid": "the advisory file (policies/advisories.json) is invalid",
    "quirks_invalid": "the engine quirks file (policies/engine-quirks.json) is invalid",
    "incomplete_tool_config": "tools enabled but no tool-call parser configured",
    "parser_not_vetted": "the configured tool-call parser is not on the vetted list",
    "plaintext_not_allowed": "the gateway would listen in plaintext beyond loopback",
    "tls_credentials_unset": "a TLS file names a systemd credential but "
                             "$CREDENTIALS_DIRECTORY is not set",
    "cache_salt_secret_invalid": "[gateway] cache_salt_secret is unreadable, not text, or "
                                 "shorter than 32 bytes",
    # parallel layout and cluster (appliance.engine_parallel, appliance.cluster)
    "pipeline_parallel_cpu": "pipeline parallel asked on the CPU build (its engine crashes)",
    "tensor_parallel_heads": "tensor_parallel_size does not divide the model's heads",
    "model_config_unreadable": "the model's config.json does not give its attention heads",
    "cluster_world_size": "TP*PP is not a multiple of the cluster's node count",
    "cluster_data_parallel": "data parallel asked together with [cluster]",
    "parallel_exceeds_devices": "the node's engine ranks exceed its visible GPUs",
    "cpu_binding_mismatch": "engine.cpu.omp_threads_bind does not give one CPU group per rank",
    "cluster_node_rank": "the node rank is out of range or this host holds no cluster address",
    "cluster_secret_invalid": "the cluster secret file is unreadable or shorter than 32 bytes",
    "cluster_model_mismatch": "the cluster's nodes would load different signed models",
    "cluster_handshake_failed": "the cluster handshake failed (timeout, bad proof, protocol)",
    "cluster_firewall_failed": "the cluster firewall (nftables) could not be installed",
    # several models ([[models]], appliance.config.models)
    "models_conflict": "[[models]] given together with [model] or serve --model",
    "models_duplicate": "two [[models]] entries have one served_name",
    "models_cpu_overlap": "two models' CPU engines are bound to a common core",
    "models_gpu_overlap": "two models' GPU engines would share a GPU",
    "models_cluster": "several [[models]] together with [cluster] (one model per cluster)",
    "models_workers": "several [[models]] together with gateway.workers > 1",
    "models_over_host": "the models' engines need cores or memory this host does not give",
    # signing and staging
    "signature_invalid": "the signature does not verify against the trusted key",
    "signature_missing": "the signature bundle file does not exist",
    "bundle_malformed": "the signature bundle is not a valid OMS / DSSE bundle",
    "bundle_unsupported": "the bundle's media type is not supported",
    "unsupported_hashing": "the manifest's serialization is not files/sha256",
    "manifest_inconsistent": "the manifest's subject digest does not match its resources",
    "manifest_incomplete": "a file the engine needs (config, tokenizer ...) is not signed",
    "manifest_path_escape": "a signed path is absolute or climbs out of the model folder",
    "empty_model": "the model folder or the signed manifest holds no files",
    "model_not_found": "the model folder does not exist or is not a directory",
    "model_too_deep": "the model folder nests deeper than the limit",
    "missing_file": "a signed file is missing from the model folder",
    "unsigned_file_present": "the model folder holds a file the signature does not cover",
    "digest_mismatch": "a file does not match its signed SHA-256",
    "bad_file_name": "a file name is not UTF-8, holds a backslash or a control character",
    "symlink_not_allowed": "the model folder holds a symbolic link",
    "hard_link_not_allowed": "a model file has more than one hard link",
    "special_file": "the model folder holds a FIFO, socket or device",
    "io_error": "a file cannot be read or written",
    "stage_dest_exists": "the staging folder already exists",
    "chat_template_unsigned": "the policy's chat template is not in the signed manifest",
    "key_missing": "the key file does not exist",
    "key_invalid": "the key file is not a PEM key or cannot be read",
    "key_unsupported": "the key is not ECDSA P-256 / P-384 / P-521 (or the curve is unknown)",
    "key_mismatch": "the signature was made for a different public key",
    "key_untrusted": "the signing key is not in the policy's trust store",
    "key_revoked": "the signing key's fingerprint is in [trust] revoked",
    "key_expired": "the signing key's not_after has passed",
    "key_not_yet_valid": "the signing key's not_before is in the future",
    "trust_key_invalid": "a [[trust.keys]] entry cannot be used (unreadable, wrong algorithm)",
    "passphrase_missing": "the passphrase variable or file is unset or empty",
    "passphrase_required": "the private key is encrypted and no passphrase was given",
    "passphrase_invalid": "the passphrase is empty or does not decrypt the key",
    # scan, preflight, launch
    "scan_refused": "the scanner's verdict on the model is not clean",
    "preflight_failed": "preflight found several problems (each is listed after it)",
    "engine_start_failed": "the engine did not start",
    "engine_not_started": "the engine was used before it was started",
    "engine_exited": "the engine exited before it was ready",
    "engine_start_timeout": "the engine was not ready within the start timeout",
    "log_dir_unusable": "the engine log folder cannot be created or written",
    # gateway TLS (appliance.preflight.tls_files)
    "tls_invalid": "a gateway TLS setting is invalid",
    "tls_file_unreadable": "a TLS file cannot be read",
    "tls_certificate_invalid": "no parsable PEM certificate in certificate",
    "tls_key_invalid": "private_key is not an unencrypted PEM private key",
    "tls_key_mismatch": "the private key does not belong to the leaf certificate",
    "tls_certificate_expired": "the certificate chain is expired or not yet valid",
    "tls_client_ca_invalid": "client_ca holds no parsable PEM certificate",
    "tls_crl_invalid": "a CRL is unparsable, not signed by a client CA, or expired",
    # gateway OIDC ([auth.oidc], appliance.gateway.auth.oidc)
    "jwks_invalid": "the identity provider's JWKS cannot be read, fetched or used",
})
"""Codes of :class:`ApplianceError` and its subclasses in this module (one-line meanings)."""


class ApplianceError(Exception):
    """Base error. ``code`` is stable (JSON, logs, tests key on it) and registered in the
    class's ``registry``; ``where`` is the offending path or field (``Diagnostic.at``);
    ``details`` are further diagnostics this error groups (printed after it)."""

    code = "appliance_error"
    exit_status = 1
    registry: ClassVar[CodeRegistry] = APPLIANCE_CODES

    def __init__(
        self, message: str, *, code: str | None = None, where: str | None = None,
        fix: str | None = None, details: Sequence[Diagnostic] = (),
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.where = where
        self.fix = fix
        self.details = tuple(details)

    @property
    def at(self) -> str | None:
        """The offending path or field (the same as ``where``)."""
        return self.where

    @property
    def diagnostic(self) -> Diagnostic:
        """This error as a :class:`~scanner.diagnostic.Diagnostic`."""
        return Diagnostic(self.code, self.message, self.where, self.fix)

    def diagnostics(self) -> str:
        """Human-readable, multi-line explanation for stderr: this error, then each of
        ``details``, each with its own ``at:`` / ``fix:`` lines."""
        return render_many((self.diagnostic, *self.details))

    def to_json(self) -> dict[str, object]:
        """``Diagnostic.to_json()`` plus ``details`` (a list of the same shape)."""
        return {**self.diagnostic.to_json(), "details": [d.to_json() for d in self.details]}


class PolicyError(ApplianceError):
    code = "policy_invalid"
    exit_status = 2


class SigningError(ApplianceError):
    code = "signature_invalid"


class ScanRefused(ApplianceError):
    code = "scan_refused"


class PreflightError(ApplianceError):
    code = "preflight_failed"


class LaunchError(ApplianceError):
    code = "engine_start_failed"


class TlsError(ApplianceError):
    code = "tls_invalid"
