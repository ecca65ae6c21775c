"""ECDSA key files for the OMS key method: generation, loading and the bundle key hint.

Curves are the OMS algorithm registry's (P-256, P-384, P-521), each with its SHA-2 digest
(as model_signing 1.1.1 ``_signing/sign_ec_key.py``). ``keygen`` makes P-256.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from appliance.errors import SigningError
from appliance.signing._fs import read_small_file

_MAX_KEY_BYTES = 64 * 1024
_HASHES: dict[str, type[hashes.HashAlgorithm]] = {
    "secp256r1": hashes.SHA256,
    "secp384r1": hashes.SHA384,
    "secp521r1": hashes.SHA512,
}


def _exists(path: Path) -> SigningError:
    return SigningError(
        f"key file '{path}' already exists; refusing to overwrite it", code="key_exists",
        where=str(path), fix="choose new paths, or move the old key away first",
    )


def _write_new(path: Path, data: bytes, mode: int) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     mode)
    except FileExistsError:
        raise _exists(path) from None
    except OSError as exc:
        raise SigningError(
            f"cannot create key file '{path}': {exc.strerror}", code="io_error",
            where=str(path), fix="check the directory exists and is writable",
        ) from None
    try:
        os.fchmod(fd, mode)
        with open(fd, "wb", closefd=False) as handle:
            handle.write(data)
            handle.flush()
            os.fsync(fd)
    finally:
        os.close(fd)


def keygen(private_key_path: Path, public_key_path: Path) -> None:
    """Create an ECDSA P-256 key pair as PEM files.

    The private key is unencrypted PKCS#8 written with mode 0600; the public key is
    SubjectPublicKeyInfo (mode 0644). Existing files are never overwritten.

    Raises ``SigningError``: ``key_exists`` (either path exists, or both are the same path),
    ``io_error`` (cannot create)."""
    private_key_path, public_key_path = Path(private_key_path), Path(public_key_path)
    if os.path.abspath(private_key_path) == os.path.abspath(public_key_path):
        raise SigningError(
            "private and public key paths are the same file", code="key_exists",
            where=str(private_key_path), fix="pass two different paths",
        )
    for path in (private_key_path, public_key_path):
        if os.path.lexists(path):
            raise _exists(path)
    key = ec.generate_private_key(ec.SECP256R1())
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    _write_new(private_key_path, private_pem, 0o600)
    try:
        _write_new(public_key_path, public_pem(key.public_key()), 0o644)
    except BaseException:
        os.unlink(private_key_path)
        raise


def public_pem(key: ec.EllipticCurvePublicKey) -> bytes:
    """Canonical PEM SubjectPublicKeyInfo bytes of ``key``."""
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo,
    )


def key_hint(key: ec.EllipticCurvePublicKey) -> str:
    """The bundle's ``verificationMaterial.publicKey.hint``: SHA-256 hex of the key's
    canonical PEM SubjectPublicKeyInfo, re-serialized (not the .pub file's raw bytes), as
    model_signing 1.1.1 computes it (``sign_ec_key.py`` ``_get_verification_material``)."""
    return hashlib.sha256(public_pem(key)).hexdigest()


def signature_hash(key: ec.EllipticCurvePublicKey) -> hashes.HashAlgorithm:
    """The ECDSA digest for the key's curve (P-256 -> SHA-256, P-384 -> SHA-384,
    P-521 -> SHA-512)."""
    return _HASHES[key.curve.name]()


def _unsupported(path: Path, what: str) -> SigningError:
    return SigningError(
        f"{what} key '{path}' is not an ECDSA P-256, P-384 or P-521 key",
        code="key_unsupported", where=str(path),
        fix="use a key made by `appliance keygen` (ECDSA P-256)",
    )


def load_private_key(path: Path) -> ec.EllipticCurvePrivateKey:
    """Load an unencrypted PEM private key. Raises ``SigningError``: ``key_missing``,
    ``key_invalid`` (not PEM, encrypted, unreadable), ``key_unsupported`` (not P-256/384/521)."""
    data = read_small_file(Path(path), _MAX_KEY_BYTES, "key", "key_invalid")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise SigningError(
            f"private key '{path}' is encrypted", code="key_invalid", where=str(path),
            fix="use an unencrypted PKCS#8 key file protected by file permissions",
        ) from None
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise SigningError(
            f"'{path}' is not a PEM private key ({type(exc).__name__})", code="key_invalid",
            where=str(path), fix="pass the private key written by `appliance keygen`",
        ) from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name not in _HASHES:
        raise _unsupported(Path(path), "private")
    return key


def load_public_key(path: Path) -> ec.EllipticCurvePublicKey:
    """Load a PEM SubjectPublicKeyInfo public key. Raises ``SigningError``: ``key_missing``,
    ``key_invalid``, ``key_unsupported``."""
    data = read_small_file(Path(path), _MAX_KEY_BYTES, "key", "key_invalid")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise SigningError(
            f"'{path}' is not a PEM public key ({type(exc).__name__})", code="key_invalid",
            where=str(path), fix="pass the public key written by `appliance keygen`",
        ) from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name not in _HASHES:
        raise _unsupported(Path(path), "public")
    return key
