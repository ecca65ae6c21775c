"""Offline model signing and verification in the OpenSSF Model Signing (OMS) format.

Compatible with sigstore/model-transparency ``model_signing`` 1.1.1, key method, ``files``
serialization with SHA-256: bundles it writes verify here and ours verify there. Stricter on
purpose, closing gaps measured in ``model_signing`` 1.1.1 (a file under ``.git/`` or a
changed ``.gitattributes`` verified; a symlinked directory was neither hashed nor descended
into; a verifier-side ``--allow_symlinks`` overrode the signed policy, issue #666):

* no ignore list: every file in the folder except the signature itself must be signed, and
  signed ``ignore_paths`` are never honoured (no ``.git`` exemption, no ignore-unsigned mode);
* symlinks and special files are refused when signing and verifying, and a signed
  ``allow_symlinks: true`` is refused whatever the caller wants (PR#667);
* manifest names are checked before any file is opened (``../`` escape, PR#647);
* ``verify_and_stage`` copies while hashing so the engine loads exactly the verified bytes.

Every failure is ``appliance.errors.SigningError`` with a stable ``code``.

May import: :mod:`appliance.errors` and ``scanner`` (its strict JSON parser) only; the store,
the policy and everything above use it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from appliance.atomic_file import replace_file
from appliance.errors import SigningError
from appliance.signing._bundle import (
    STATEMENT_TYPE,
    check_signature,
    encode_bundle,
    encode_statement,
    parse_bundle,
    parse_statement,
)
from appliance.signing._fs import ModelTree, read_small_file
from appliance.signing._keys import (
    algorithm,
    fingerprint,
    keygen,
    load_private_key,
    load_public_key,
    signature_hash,
)
from appliance.signing._manifest import (
    Manifest,
    compare_names,
    digest_mismatch,
    hash_fd,
    hash_tree,
    run_parallel,
    workers,
)
from appliance.signing._stage import copy_verified, discard_stage, stage
from appliance.signing._trust import Signer, TrustedKey, TrustStore, authenticate

__all__ = [
    "DEFAULT_SIGNATURE_NAME", "STATEMENT_TYPE", "Keys", "Manifest", "ModelTree", "SignedFolder",
    "Signer", "TrustStore", "TrustedKey",
    "authenticate", "authenticate_bundle", "compare_names", "copy_verified", "digest_mismatch",
    "discard_stage",
    "fingerprint", "hash_fd", "keygen", "load_private_key", "load_public_key", "open_payload",
    "open_signed", "read_bundle_file", "require_servable", "run_parallel", "sign",
    "sign_payload", "signature_hash", "verify", "verify_and_stage", "workers",
]

DEFAULT_SIGNATURE_NAME = "model.sig"
MAX_BUNDLE_BYTES = 64 * 1024 * 1024


def _signature_path(model_dir: Path, signature_path: Path | None) -> Path:
    return Path(signature_path) if signature_path is not None else (
        Path(model_dir) / DEFAULT_SIGNATURE_NAME)


def _signature_rel(model_dir: Path, signature: Path) -> str | None:
    """The signature's path relative to the model folder, or None when it lies outside."""
    base = os.path.realpath(model_dir)
    full = os.path.join(os.path.realpath(signature.parent), signature.name)
    rel = os.path.relpath(full, base)
    if rel == "." or rel == ".." or rel.startswith("../") or os.path.isabs(rel):
        return None
    return Path(rel).as_posix()


def _model_name(model_dir: Path) -> str:
    name = Path(model_dir).name
    if not name or name in (".", ".."):
        name = os.path.basename(os.path.realpath(model_dir))
    return name


def _write_atomic(path: Path, data: bytes) -> None:
    try:
        replace_file(path, data, 0o644)
    except OSError as exc:
        raise SigningError(
            f"cannot write signature '{path}': {exc.strerror or exc}", code="io_error",
            where=str(path),
            fix="pass a file path (not a folder) in a folder that exists and is writable",
        ) from None


def sign(model_dir: Path, private_key_path: Path, signature_path: Path | None = None,
         passphrase: bytes | None = None) -> Path:
    """Sign every file of ``model_dir`` and write the OMS bundle atomically.

    ``signature_path`` defaults to ``model_dir/model.sig``; it is the only file excluded from
    the manifest and is recorded in ``ignore_paths`` when it lies inside the folder. Model
    files are opened read-only and never modified. Returns the signature path.

    Raises ``SigningError``: ``empty_model`` (no file besides the signature),
    ``symlink_not_allowed``, ``special_file``, ``hard_link_not_allowed``, ``bad_file_name``,
    ``model_not_found``, ``model_too_deep``, key errors (``key_missing``, ``key_invalid``,
    ``key_unsupported``, ``passphrase_required``, ``passphrase_invalid``), ``io_error``.
    ``passphrase`` decrypts an encrypted private key."""
    model_dir = Path(model_dir)
    signature = _signature_path(model_dir, signature_path)
    key = load_private_key(Path(private_key_path), passphrase)
    exclude = _signature_rel(model_dir, signature)
    with ModelTree(model_dir) as tree:
        names = tree.walk(exclude)
        if not names:
            raise SigningError(
                f"model folder '{model_dir}' holds no files to sign", code="empty_model",
                where=str(model_dir), fix="sign the folder that holds the model files",
            )
        digests = hash_tree(tree, names)
    manifest = Manifest(_model_name(model_dir), [(name, digests[name]) for name in names])
    payload = encode_statement(manifest.model_name, manifest, [exclude] if exclude else [])
    _write_atomic(signature, encode_bundle(payload, key))
    return signature


Keys = Path | TrustStore
"""Who may sign: one PEM public key file, or a policy's trust store."""


def read_bundle_file(signature: Path) -> bytes:
    """The bytes of a signature bundle file (at most ``MAX_BUNDLE_BYTES``)."""
    return read_small_file(Path(signature), MAX_BUNDLE_BYTES, "signature", "bundle_malformed")


def authenticate_bundle(data: bytes, keys: Keys, source: str) -> Manifest:
    """Authenticate bundle bytes with ``keys`` and return the signed manifest, its
    ``signer`` set. Raises the bundle, key and trust ``SigningError`` codes."""
    envelope = parse_bundle(data, source)
    if isinstance(keys, TrustStore):
        signer = authenticate(envelope, keys, source)
    else:
        key = load_public_key(Path(keys))
        check_signature(envelope, key, source)
        signer = Signer(Path(keys).name, fingerprint(key), algorithm(key))
    manifest = parse_statement(envelope.payload)
    manifest.signer = signer
    return manifest


def sign_payload(payload: bytes, private_key_path: Path, passphrase: bytes | None = None,
                 ) -> bytes:
    """The bundle bytes (same format as a model signature: Sigstore bundle v0.3, DSSE, in-toto
    payload type) signing ``payload``, an in-toto Statement v1 the caller built with its own
    ``predicateType`` (a signed document other than a model: the advisory feed,
    :mod:`appliance.preflight.feed`). Raises the key ``SigningError`` codes."""
    return encode_bundle(payload, load_private_key(Path(private_key_path), passphrase))


def open_payload(data: bytes, trust: TrustStore, source: str,
                 now: dt.datetime | None = None) -> tuple[bytes, Signer]:
    """Authenticate bundle bytes against ``trust`` at ``now`` (default: the current time) and
    return the signed payload, not yet parsed, and the signer. The caller must check the
    payload's ``predicateType`` before trusting its meaning. Raises the bundle, key and trust
    ``SigningError`` codes (``bundle_malformed``, ``bundle_unsupported``, ``key_untrusted``,
    ``key_revoked``, ``key_expired``, ``key_not_yet_valid``, ``trust_key_invalid``,
    ``signature_invalid``)."""
    envelope = parse_bundle(data, source)
    return envelope.payload, authenticate(envelope, trust, source, now)


def verify(model_dir: Path, public_key_path: Keys, signature_path: Path | None = None,
           ) -> Manifest:
    """Verify ``model_dir`` against its OMS signature, offline, failing closed.

    ``public_key_path`` is one trusted PEM key or a ``TrustStore`` (then the trust codes
    ``key_untrusted``, ``key_revoked``, ``key_expired``, ``key_not_yet_valid``,
    ``trust_key_invalid`` apply too).

    Order: bundle parse and type checks, key hint, ECDSA over the DSSE PAE, statement and
    manifest checks (names before any file is opened), then a walk with lstat semantics
    (symlinks/special files refused) requiring the on-disk file set to equal the signed set,
    then SHA-256 of every file (a thread per file). Returns the verified ``Manifest``.

    Raises ``SigningError`` with code: ``signature_missing``, ``bundle_malformed``,
    ``bundle_unsupported``, ``key_mismatch``, ``signature_invalid``, ``unsupported_hashing``,
    ``symlink_not_allowed``, ``manifest_path_escape``, ``empty_model``,
    ``manifest_inconsistent``, ``special_file``, ``hard_link_not_allowed``, ``bad_file_name``,
    ``unsigned_file_present``, ``missing_file``, ``digest_mismatch``, ``model_not_found``,
    key errors, ``io_error``."""
    with _signed_tree(model_dir, public_key_path, signature_path) as (tree, manifest):
        hash_tree(tree, list(manifest), expected=manifest)
    return manifest


def verify_and_stage(model_dir: Path, public_key_path: Keys, dest: Path,
                     signature_path: Path | None = None) -> Manifest:
    """Verify like ``verify`` and copy the signed files into ``dest`` in the same pass.

    ``dest`` must not exist; it is created (0700 while staging), every signed file is copied
    while its bytes are hashed, each digest is compared with the signed manifest, and the
    copy is then made read-only (files 0444, directories 0555). The engine must load from
    ``dest``: that closes the verify-then-load swap window (public bug
    ``unsigned-extra-files`` F). On error nothing is left at ``dest``. Remove a stage with
    ``discard_stage``.

    Raises every ``verify`` code plus ``stage_dest_exists``."""
    with _signed_tree(model_dir, public_key_path, signature_path) as (tree, manifest):
        stage(tree, manifest, Path(dest))
    return manifest


@dataclass(frozen=True)
class SignedFolder:
    """A model folder opened by descriptor whose file names equal its authenticated
    manifest. ``bundle`` is the exact signature bytes that were authenticated."""

    tree: ModelTree
    manifest: Manifest
    bundle: bytes


@contextlib.contextmanager
def open_signed(model_dir: Path, keys: Keys, signature_path: Path | None = None,
                ) -> Iterator[SignedFolder]:
    """The first steps of ``verify``: authenticate the bundle, open the model folder and
    require its file names to equal the signed ones (only plain files: symlinks, hard links
    and special files are refused). File contents are not hashed yet: the caller does that
    (``verify``, ``verify_and_stage``, the store's import)."""
    signature = _signature_path(model_dir, signature_path)
    data = read_bundle_file(signature)
    manifest = authenticate_bundle(data, keys, str(signature))
    with ModelTree(Path(model_dir)) as tree:
        compare_names(manifest, tree.walk(_signature_rel(Path(model_dir), signature)))
        yield SignedFolder(tree, manifest, data)


@contextlib.contextmanager
def _signed_tree(model_dir: Path, public_key_path: Keys, signature_path: Path | None,
                 ) -> Iterator[tuple[ModelTree, Manifest]]:
    with open_signed(model_dir, public_key_path, signature_path) as folder:
        yield folder.tree, folder.manifest


def require_servable(manifest: Manifest) -> None:
    """Deployment gate on a verified manifest: it must list ``config.json`` and at least one
    ``*.safetensors`` file at the model root (public bug ``empty-model-signature``,
    sigstore/model-transparency#661).

    Raises ``SigningError(code='manifest_incomplete')`` naming what is missing."""
    lacking = []
    if "config.json" not in manifest:
        lacking.append("config.json")
    if not any(name.endswith(".safetensors") and "/" not in name for name in manifest):
        lacking.append("a *.safetensors weight file")
    if lacking:
        raise SigningError(
            f"the signed manifest of '{manifest.model_name}' does not list "
            f"{' or '.join(lacking)}; it cannot be served",
            code="manifest_incomplete", where=manifest.model_name,
            fix="sign the complete model folder (config.json and its .safetensors weights)",
        )
