"""``appliance keygen``, ``sign`` and ``verify``: the signing commands (:mod:`appliance.signing`).

Passphrase options and the ``--policy`` trust store come from :mod:`appliance.cli.store`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from appliance.cli import store as cli_store


def _cmd_keygen(args: argparse.Namespace) -> int:
    from appliance import signing
    from appliance.cli.store import read_passphrase

    passphrase = read_passphrase(args)
    printed = signing.keygen(args.private_key, args.public_key, args.curve, passphrase)
    state = "encrypted" if passphrase else "NOT encrypted: pass --passphrase-env/-file"
    print(f"wrote {args.private_key} (private, 0600, {state}) and {args.public_key}")
    print(f"fingerprint (sha256 of the DER public key): {printed}")
    return 0


def _cmd_sign(args: argparse.Namespace) -> int:
    from appliance import signing
    from appliance.cli.store import read_passphrase

    out = signing.sign(args.model_dir, args.private_key, args.signature, read_passphrase(args))
    print(f"signed {args.model_dir} -> {out}")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from appliance import signing
    from appliance.cli.store import keys_for

    manifest = signing.verify(args.model_dir, keys_for(args), args.signature)
    signer = manifest.signer
    who = f", signer '{signer.name}'" if isinstance(signer, signing.Signer) else ""
    print(f"verified {args.model_dir}: {len(manifest)} files match the signature{who}")
    return 0


def register(sub: Any) -> None:
    """Add ``keygen``, ``sign`` and ``verify`` to the ``appliance`` subparsers."""
    p = sub.add_parser("keygen", help="create an ECDSA P-256 or P-384 signing key pair")
    p.add_argument("--private-key", type=Path, required=True,
                   help="PEM (PKCS#8) file to create, mode 0600; never overwritten")
    p.add_argument("--public-key", type=Path, required=True,
                   help="PEM public key file to create (give it to verifiers)")
    p.add_argument("--curve", choices=("p256", "p384"), default="p256", help="ECDSA curve")
    cli_store.add_passphrase_args(p, "encrypt")
    p.set_defaults(func=_cmd_keygen)

    p = sub.add_parser("sign", help="sign a model folder (OpenSSF Model Signing bundle)")
    p.add_argument("model_dir", type=Path, help="model folder; every file in it is signed")
    p.add_argument("--private-key", type=Path, required=True, help="signer's PEM private key")
    p.add_argument("--signature", type=Path, default=None,
                   help="bundle to write (default MODEL_DIR/model.sig)")
    cli_store.add_passphrase_args(p, "decrypt")
    p.set_defaults(func=_cmd_sign)

    p = sub.add_parser("verify", help="verify a model folder against its signature, offline")
    p.add_argument("model_dir", type=Path, help="model folder to check")
    p.add_argument("--public-key", type=Path, default=None, help="trusted signer's PEM key")
    p.add_argument("--policy", type=Path, default=None,
                   help="policy TOML whose [trust] keys decide (instead of --public-key)")
    p.add_argument("--signature", type=Path, default=None,
                   help="bundle to check (default MODEL_DIR/model.sig)")
    p.set_defaults(func=_cmd_verify)
