"""ECDSA key files for the OMS key method: generation, loading and the bundle key hint.

Curves are the OMS algorithm registry's (P-256, P-384, P-521), each with its SHA-2 digest
(as model_signing 1.1.1 ``_signing/sign_ec_key.py``). ``keygen`` makes P-256 or P-384, the
private key optionally encrypted (PKCS#8 PBES2, ``BestAvailableEncryption``): model_signing's
API reads it with ``use_elliptic_key_signer(private_key=..., password=b"...")``.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from appliance.atomic_file import write_new_file
from appliance.errors import SigningError
from appliance.signing._fs import read_small_file

_MAX_KEY_BYTES = 64 * 1024
CURVES: dict[str, ec.EllipticCurve] = {"p256": ec.SECP256R1(), "p384": ec.SECP384R1()}
"""``keygen`` curves by CLI name."""
ALGORITHMS: dict[str, str] = {"secp256r1": "P-256", "secp384r1": "P-384", "secp521r1": "P-521"}
"""Curve name (cryptography) -> the algorithm name a trust-store entry uses."""
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
        write_new_file(path, data, mode, final_mode=mode)
    except FileExistsError:
        raise _exists(path) from None
    except OSError as exc:
        raise SigningError(
            f"cannot create key file '{path}': {exc.strerror}", code="io_error",
            where=str(path), fix="check the directory exists and is writable",
        ) from None


def keygen(private_key_path: Path, public_key_path: Path, curve: str = "p256",
           passphrase: bytes | None = None) -> str:
    """Create an ECDSA key pair (``curve`` ``p256`` or ``p384``) as PEM files.

    The private key is PKCS#8 written with mode 0600, encrypted with ``passphrase`` when one
    is given (never pass it on a command line: the CLI reads it from an environment variable
    or a file); the public key is SubjectPublicKeyInfo (mode 0644). Existing files are never
    overwritten. Returns the public key's ``fingerprint``.

    Raises ``SigningError``: ``key_exists`` (either path exists, or both are the same path),
    ``key_unsupported`` (another curve), ``passphrase_invalid`` (empty), ``io_error``."""
    private_key_path, public_key_path = Path(private_key_path), Path(public_key_path)
    if os.path.abspath(private_key_path) == os.path.abspath(public_key_path):
        raise SigningError(
            "private and public key paths are the same file", code="key_exists",
            where=str(private_key_path), fix="pass two different paths",
        )
    if curve not in CURVES:
        raise SigningError(
            f"curve {curve!r} is not supported", code="key_unsupported", where=curve,
            fix=f"choose one of: {', '.join(CURVES)}",
        )
    if passphrase is not None and not passphrase:
        raise SigningError(
            "the passphrase is empty", code="passphrase_invalid", where="passphrase",
            fix="set a non-empty passphrase, or generate an unencrypted key",
        )
    for path in (private_key_path, public_key_path):
        if os.path.lexists(path):
            raise _exists(path)
    key = ec.generate_private_key(CURVES[curve])
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(passphrase) if passphrase
        else serialization.NoEncryption())
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption,
    )
    _write_new(private_key_path, private_pem, 0o600)
    try:
        _write_new(public_key_path, public_pem(key.public_key()), 0o644)
    except BaseException:
        os.unlink(private_key_path)
        raise
    return fingerprint(key.public_key())


def fingerprint(key: ec.EllipticCurvePublicKey) -> str:
    """The key's fingerprint as trust stores and ``[trust] revoked`` write it: SHA-256 hex
    of the DER SubjectPublicKeyInfo (``openssl pkey -pubin -outform DER | sha256sum``)."""
    der = key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo,
    )
    return hashlib.sha256(der).hexdigest()


def algorithm(key: ec.EllipticCurvePublicKey) -> str:
    """``P-256``, ``P-384`` or ``P-521``."""
    return ALGORITHMS[key.curve.name]


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
        fix="use a key made by `appliance keygen` (ECDSA P-256 or P-384)",
    )


def load_private_key(path: Path, passphrase: bytes | None = None,
                     ) -> ec.EllipticCurvePrivateKey:
    """Load a PEM private key, decrypting it with ``passphrase`` when it is encrypted.

    Raises ``SigningError``: ``key_missing``, ``passphrase_required`` (encrypted, none
    given), ``passphrase_invalid`` (wrong passphrase), ``key_invalid`` (not PEM,
    unreadable), ``key_unsupported`` (not P-256/384/521)."""
    data = read_small_file(Path(path), _MAX_KEY_BYTES, "key", "key_invalid")
    encrypted = b"-----BEGIN ENCRYPTED PRIVATE KEY-----" in data or (
        b"Proc-Type: 4,ENCRYPTED" in data)
    if encrypted and not passphrase:
        raise SigningError(
            f"private key '{path}' is encrypted and no passphrase was given",
            code="passphrase_required", where=str(path),
            fix="pass --passphrase-env VAR or --passphrase-file FILE",
        )
    try:
        key = serialization.load_pem_private_key(data, password=passphrase if encrypted
                                                 else None)
    except TypeError:
        raise SigningError(
            f"private key '{path}' is encrypted and no passphrase was given",
            code="passphrase_required", where=str(path),
            fix="pass --passphrase-env VAR or --passphrase-file FILE",
        ) from None
    except ValueError as exc:
        if encrypted:
            raise SigningError(
                f"cannot decrypt private key '{path}': wrong passphrase or damaged file",
                code="passphrase_invalid", where=str(path),
                fix="check the passphrase source (environment variable or file)",
            ) from None
        raise SigningError(
            f"'{path}' is not a PEM private key ({type(exc).__name__})", code="key_invalid",
            where=str(path), fix="pass the private key written by `appliance keygen`",
        ) from None
    except UnsupportedAlgorithm as exc:
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
