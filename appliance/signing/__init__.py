"""Offline model signing and verification in the OpenSSF Model Signing (OMS) format.

Compatible with sigstore/model-transparency ``model_signing`` 1.1.1, key method, ``files``
serialization with SHA-256: bundles it writes verify here and ours verify there. Stricter on
purpose (see /work/shared/research/signing.md §1.7, §1.9, §6):

* no ignore list: every file in the folder except the signature itself must be signed, and
  signed ``ignore_paths`` are never honoured (no ``.git`` exemption, no ignore-unsigned mode);
* symlinks and special files are refused when signing and verifying, and a signed
  ``allow_symlinks: true`` is refused whatever the caller wants (PR#667);
* manifest names are checked before any file is opened (``../`` escape, PR#647);
* ``verify_and_stage`` copies while hashing so the engine loads exactly the verified bytes.

Every failure is ``appliance.errors.SigningError`` with a stable ``code``.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from appliance.errors import SigningError
from appliance.signing._bundle import (
    check_signature,
    encode_bundle,
    encode_statement,
    parse_bundle,
    parse_statement,
)
from appliance.signing._fs import ModelTree, read_small_file
from appliance.signing._keys import keygen, load_private_key, load_public_key
from appliance.signing._manifest import (
    Manifest,
    compare_names,
    hash_tree,
)
from appliance.signing._stage import discard_stage, stage

__all__ = [
    "DEFAULT_SIGNATURE_NAME", "Manifest", "discard_stage", "keygen", "require_servable",
    "sign", "verify", "verify_and_stage",
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
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise SigningError(
            f"cannot write signature next to '{path}': {exc.strerror}", code="io_error",
            where=str(path), fix="check the directory exists and is writable",
        ) from None
    try:
        with open(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        os.unlink(tmp)
        raise SigningError(
            f"cannot write signature '{path}': {exc.strerror or exc}", code="io_error",
            where=str(path), fix="pass a writable file path (not a directory)",
        ) from None


def sign(model_dir: Path, private_key_path: Path, signature_path: Path | None = None) -> Path:
    """Sign every file of ``model_dir`` and write the OMS bundle atomically.

    ``signature_path`` defaults to ``model_dir/model.sig``; it is the only file excluded from
    the manifest and is recorded in ``ignore_paths`` when it lies inside the folder. Model
    files are opened read-only and never modified. Returns the signature path.

    Raises ``SigningError``: ``empty_model`` (no file besides the signature),
    ``symlink_not_allowed``, ``special_file``, ``bad_file_name``, ``model_not_found``,
    ``model_too_deep``, key errors (``key_missing``, ``key_invalid``, ``key_unsupported``),
    ``io_error``."""
    model_dir = Path(model_dir)
    signature = _signature_path(model_dir, signature_path)
    key = load_private_key(Path(private_key_path))
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


def _authenticate(public_key_path: Path, signature: Path) -> Manifest:
    key = load_public_key(Path(public_key_path))
    data = read_small_file(signature, MAX_BUNDLE_BYTES, "signature", "bundle_malformed")
    envelope = parse_bundle(data, str(signature))
    check_signature(envelope, key, str(signature))
    return parse_statement(envelope.payload)


def verify(model_dir: Path, public_key_path: Path, signature_path: Path | None = None,
           ) -> Manifest:
    """Verify ``model_dir`` against its OMS signature, offline, failing closed.

    Order: bundle parse and type checks, key hint, ECDSA over the DSSE PAE, statement and
    manifest checks (names before any file is opened), then a walk with lstat semantics
    (symlinks/special files refused) requiring the on-disk file set to equal the signed set,
    then SHA-256 of every file (a thread per file). Returns the verified ``Manifest``.

    Raises ``SigningError`` with code: ``signature_missing``, ``bundle_malformed``,
    ``bundle_unsupported``, ``key_mismatch``, ``signature_invalid``, ``unsupported_hashing``,
    ``symlink_not_allowed``, ``manifest_path_escape``, ``empty_model``,
    ``manifest_inconsistent``, ``special_file``, ``bad_file_name``, ``unsigned_file_present``,
    ``missing_file``, ``digest_mismatch``, ``model_not_found``, key errors, ``io_error``."""
    with _signed_tree(model_dir, public_key_path, signature_path) as (tree, manifest):
        hash_tree(tree, list(manifest), expected=manifest)
    return manifest


def verify_and_stage(model_dir: Path, public_key_path: Path, dest: Path,
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


@contextlib.contextmanager
def _signed_tree(model_dir: Path, public_key_path: Path, signature_path: Path | None,
                 ) -> Iterator[tuple[ModelTree, Manifest]]:
    """The first steps of ``verify``: authenticate the bundle, open the model folder and
    require its file names to equal the signed ones. Yields (open tree, manifest)."""
    signature = _signature_path(model_dir, signature_path)
    manifest = _authenticate(public_key_path, signature)
    with ModelTree(Path(model_dir)) as tree:
        compare_names(manifest, tree.walk(_signature_rel(Path(model_dir), signature)))
        yield tree, manifest


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
