"""CLI pieces for keys and the model store: passphrase options, ``appliance import``,
``appliance models list|show|use|rollback|remove`` and the ``--policy`` trust store of
``appliance verify``. ``register(sub)`` adds ``import`` and ``models`` (listed in
:data:`appliance.cli.COMMANDS`); the passphrase and trust helpers serve
:mod:`appliance.cli.signing` and :mod:`appliance.cli.serve` too.

Passphrases are never read from argv: ``--passphrase-env VAR`` names an environment
variable, ``--passphrase-file F`` a file (its first line is the passphrase).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from appliance.errors import ApplianceError, SigningError

_STORE_HELP = ("model store root (default: [store] root of the policy, else "
               "/var/lib/appliance/models)")


def add_passphrase_args(parser: argparse.ArgumentParser, verb: str) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--passphrase-env", metavar="VAR", default=None,
                       help=f"environment variable holding the passphrase to {verb} the "
                            "private key")
    group.add_argument("--passphrase-file", metavar="FILE", type=Path, default=None,
                       help=f"file whose first line is the passphrase to {verb} the private key")


def read_passphrase(args: argparse.Namespace) -> bytes | None:
    """The passphrase from ``--passphrase-env`` / ``--passphrase-file``, or None.

    Raises ``SigningError(code='passphrase_missing')`` for an unset/empty variable or an
    unreadable/empty file."""
    if getattr(args, "passphrase_env", None):
        value = os.environ.get(args.passphrase_env, "")
        if not value:
            raise SigningError(f"environment variable {args.passphrase_env} is unset or empty",
                               code="passphrase_missing", where=args.passphrase_env,
                               fix="export the passphrase in that variable first")
        return value.encode("utf-8")
    if getattr(args, "passphrase_file", None) is not None:
        path: Path = args.passphrase_file
        try:
            text = path.read_bytes()
        except OSError as exc:
            raise SigningError(f"cannot read passphrase file: {exc.strerror}",
                               code="passphrase_missing", where=str(path),
                               fix="pass a readable file (mode 0600) holding the passphrase",
                               ) from None
        line = text.split(b"\n", 1)[0].rstrip(b"\r")
        if not line:
            raise SigningError("passphrase file is empty", code="passphrase_missing",
                               where=str(path), fix="write the passphrase on its first line")
        return line
    return None


def keys_for(args: argparse.Namespace) -> Any:
    """``--public-key`` (one key) or the trust store of ``--policy``; exactly one."""
    from appliance.config.policy import load_policy

    public_key = getattr(args, "public_key", None)
    policy_path = getattr(args, "policy", None)
    if public_key is not None and policy_path is not None:
        raise ApplianceError("pass either --public-key or --policy, not both",
                             code="usage", fix="use the policy's trust store, or one key")
    if public_key is not None:
        return Path(public_key)
    if policy_path is None:
        raise ApplianceError("no trusted key: pass --policy (its [trust] keys) or "
                             "--public-key", code="no_public_key",
                             fix="add [[trust.keys]] to the policy")
    return trust_of(load_policy(policy_path))


def trust_of(policy: Any) -> Any:
    """The policy's trust store, or its legacy ``[model] public_key`` as a one-key store.
    Raises ``no_public_key`` when it has neither."""
    if policy.trust.keys:
        return policy.trust.store()
    if policy.model.public_key is not None:
        return Path(policy.model.public_key)
    raise ApplianceError("the policy trusts no key", code="no_public_key",
                         where=str(policy.source),
                         fix="add a [[trust.keys]] entry (name, public_key, algorithm)")


def _store(args: argparse.Namespace) -> Any:
    from appliance.config.policy import load_policy
    from appliance.config.trust import DEFAULT_STORE
    from appliance.store import Store

    if args.store is not None:
        return Store(args.store)
    if getattr(args, "policy", None) is not None:
        return Store(load_policy(args.policy).store.root)
    return Store(DEFAULT_STORE)


def _cmd_import(args: argparse.Namespace) -> int:
    from appliance.config.policy import load_policy
    from appliance.store import Store, import_model

    policy = load_policy(args.policy)
    store = Store(args.store or policy.store.root)
    done = import_model(store, args.source, trust_of(policy), args.name, args.signature,
                        make_current=not args.keep_current)
    from appliance.signing import Signer

    signer = done.manifest.signer
    who = f" signed by '{signer.name}'" if isinstance(signer, Signer) else ""
    state = "imported" if done.new else "already present"
    print(f"{state}: {done.name}@{done.digest}{who} ({len(done.manifest)} files) -> "
          f"{done.path}")
    return 0


def _print(data: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps(data, indent=2))
        return
    if isinstance(data, list):
        for item in data:
            current = (item["current"] or "-")[:16]
            print(f"{item['name']}\tcurrent {current}\t{len(item['versions'])} version(s)")
        return
    for key, value in data.items():
        print(f"{key}: {value}")


def _cmd_models(args: argparse.Namespace) -> int:
    from appliance import store as st

    store = _store(args)
    action = args.models_action
    if action == "list":
        _print(st.list_models(store), args.json)
    elif action == "show":
        _print(st.show(store, st.Ref.parse(args.ref)), args.json)
    elif action == "use":
        digest = st.use(store, st.Ref.parse(args.ref))
        print(f"current: {st.Ref.parse(args.ref).name}@{digest}")
    elif action == "rollback":
        digest = st.rollback(store, st.Ref.parse(args.name).name)
        print(f"current: {args.name}@{digest}")
    else:
        removed = st.remove(store, st.Ref.parse(args.ref))
        print(f"removed {len(removed)} version(s) of {st.Ref.parse(args.ref).name}")
    return 0


def register(sub: Any) -> None:
    """Register ``import`` and ``models`` on the ``appliance`` subparsers."""
    p = sub.add_parser("import", help="verify a signed model folder and copy it into the store")
    p.add_argument("source", type=Path, help="signed model folder (with model.sig)")
    p.add_argument("--policy", type=Path, required=True, help="policy TOML ([trust], [store])")
    p.add_argument("--name", default=None, help="store name (default: the signed model name)")
    p.add_argument("--signature", type=Path, default=None,
                   help="bundle (default SOURCE/model.sig)")
    p.add_argument("--store", type=Path, default=None, help=_STORE_HELP)
    p.add_argument("--keep-current", action="store_true",
                   help="do not switch the name's current version to this import")
    p.set_defaults(func=_cmd_import)

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--policy", type=Path, default=None,
                        help="policy TOML (for [store] root)")
    common.add_argument("--store", type=Path, default=None, help=_STORE_HELP)
    common.add_argument("--json", action="store_true", help="machine-readable output")
    p = sub.add_parser("models", help="list, show, switch, roll back or remove store models")
    actions = p.add_subparsers(dest="models_action", required=True)
    actions.add_parser("list", parents=[common], help="names, current versions, counts")
    for action, arg, text in (
            ("show", "ref", "NAME (current) or NAME@DIGEST: one version's record"),
            ("use", "ref", "NAME@DIGEST: make that version current"),
            ("rollback", "name", "NAME: make the previous current version current again"),
            ("remove", "ref", "NAME@DIGEST (not the current one) or NAME (all versions)")):
        actions.add_parser(action, parents=[common], help=text).add_argument(arg, help=text)
    p.set_defaults(func=_cmd_models)
