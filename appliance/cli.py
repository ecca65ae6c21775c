"""``appliance`` command line. ``main(argv) -> int``; exit 0 ok/clean, 1 refused/not clean,
2 usage error or no verdict. Errors print ``error[<code>]`` diagnostics, never a traceback."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from appliance import __version__
from appliance.errors import ApplianceError

if TYPE_CHECKING:
    from appliance.policy import Policy
    from appliance.preflight import Problem


def _default_policy(name: str) -> Path:
    from appliance.resources import policy_path  # packaged data, or the checkout's policies/

    return policy_path(name)


def _cmd_scan(args: argparse.Namespace) -> int:
    from scanner import cli as scan_cli

    return scan_cli.run(args)


def _cmd_keygen(args: argparse.Namespace) -> int:
    from appliance import signing
    from appliance.cli_store import read_passphrase

    passphrase = read_passphrase(args)
    printed = signing.keygen(args.private_key, args.public_key, args.curve, passphrase)
    state = "encrypted" if passphrase else "NOT encrypted: pass --passphrase-env/-file"
    print(f"wrote {args.private_key} (private, 0600, {state}) and {args.public_key}")
    print(f"fingerprint (sha256 of the DER public key): {printed}")
    return 0


def _cmd_sign(args: argparse.Namespace) -> int:
    from appliance import signing
    from appliance.cli_store import read_passphrase

    out = signing.sign(args.model_dir, args.private_key, args.signature, read_passphrase(args))
    print(f"signed {args.model_dir} -> {out}")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from appliance import signing
    from appliance.cli_store import keys_for

    manifest = signing.verify(args.model_dir, keys_for(args), args.signature)
    signer = manifest.signer
    who = f", signer '{signer.name}'" if isinstance(signer, signing.Signer) else ""
    print(f"verified {args.model_dir}: {len(manifest)} files match the signature{who}")
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from appliance.advisories import floors, load_advisories
    from appliance.policy import load_policy
    from appliance.preflight import describe_packages, run_preflight

    policy = load_policy(args.policy)
    print(f"policy: {policy.source} (sha256 {policy.sha256[:16]}...)")
    pkg_floors = floors(load_advisories(policy.preflight.advisories))
    for line in describe_packages(pkg_floors, policy.preflight.packages):
        print(f"  {line}")
    problems = run_preflight(policy.preflight.advisories, policy.preflight.packages)
    problems += _listener_problems(policy)
    for problem in problems:
        print(problem.render(), file=sys.stderr)
    if problems:
        return 1
    print("preflight: ok")
    return 0


def _listener_problems(policy: Policy) -> list[Problem]:
    """TLS / plaintext view of ``[gateway]`` for ``appliance check`` (appliance.tls_files)."""
    from appliance.preflight import Problem
    from appliance.tls_files import describe_tls

    gw = policy.gateway
    lines, found = describe_tls(gw.host, gw.tls, gw.allow_plaintext)
    for line in lines:
        print(f"  {line}")
    return [Problem(code, "gateway", message, "gateway listener", fix)
            for code, message, fix in found]


def _read_keys(path: Path | None) -> list[str]:
    keys: list[str] = []
    if path is not None:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ApplianceError(f"cannot read API key file: {exc.strerror}", code="no_api_key",
                                 where=str(path), fix="pass a readable file, one key a line") \
                from None
        keys = [line.strip() for line in text.splitlines()
                if line.strip() and not line.startswith("#")]
    env = os.environ.get("APPLIANCE_API_KEYS", "")
    keys += [k.strip() for k in env.split(",") if k.strip()]
    return keys


def _cmd_serve(args: argparse.Namespace) -> int:
    from appliance.cli_store import trust_of
    from appliance.errors import PolicyError
    from appliance.policy import load_policy
    from appliance.serve import Appliance
    from appliance.store import is_store_ref

    policy = load_policy(args.policy)
    if args.node_rank is not None and policy.cluster is None:
        raise PolicyError("--node-rank needs a [cluster] table in the policy",
                          where=str(args.policy), fix="add [cluster] (docs/cluster.md)")
    store_ref = str(args.model) if is_store_ref(str(args.model)) else None
    public_key = args.public_key or trust_of(policy)  # [trust] keys, else model.public_key
    app = Appliance(policy=policy, model_dir=Path(args.model), public_key=public_key,
                    api_keys=_read_keys(args.api_key_file), store_ref=store_ref,
                    host=args.host or policy.gateway.host, port=args.port or policy.gateway.port,
                    node_rank=args.node_rank)
    app.start()
    return app.wait()


def _cmd_cluster_firewall(args: argparse.Namespace) -> int:
    from appliance.cluster import firewall, node_role
    from appliance.errors import PolicyError
    from appliance.policy import load_policy

    policy = load_policy(args.policy)
    if policy.cluster is None:
        raise PolicyError("the policy has no [cluster] table", where=str(args.policy),
                          fix="add [cluster] (docs/cluster.md)")
    if args.action == "down":
        firewall.remove()
        return 0
    rank = args.node_rank if args.action == "show" and args.node_rank is not None else \
        node_role(policy.cluster, args.node_rank).node_rank
    ports = tuple(policy.cluster.open_ports)
    if rank == 0:
        ports += (args.port or policy.gateway.port,)
    if args.action == "show":
        print(firewall.ruleset(policy.cluster.nodes, ports), end="")
        return 0
    firewall.install(policy.cluster.nodes, ports)
    print(f"cluster firewall up (node rank {rank}): TCP only from "
          f"{', '.join(policy.cluster.nodes)} or to {sorted(set(ports))}")
    return 0


def _cmd_prepare(args: argparse.Namespace) -> int:
    from appliance.builtin_model import prepare

    model = prepare()
    print(f"model_dir={model.model_dir}")
    print(f"public_key={model.public_key}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from appliance.demo import run_demo

    return run_demo(policy_path=args.policy, port=args.port, once=args.once)


def build_parser() -> argparse.ArgumentParser:
    from appliance import cli_store
    from scanner import cli as scan_cli

    parser = scan_cli.ArgumentParser(prog="appliance", description=__doc__)
    parser.add_argument("--version", action="version", version=f"appliance {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("scan", help="scan model files/folders without executing them")
    scan_cli.add_scan_arguments(p)
    p.set_defaults(func=_cmd_scan)

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

    p = sub.add_parser("check", help="preflight: package floors, environment, gateway TLS")
    p.add_argument("--policy", type=Path, default=_default_policy("default.toml"),
                   help="policy TOML (default policies/default.toml)")
    p.set_defaults(func=_cmd_check)

    p = sub.add_parser("serve", help="verify, scan, preflight, launch vLLM and the gateway")
    p.add_argument("--model", required=True,
                   help="store model NAME[@DIGEST] (served in place from the store), or a "
                        "signed model folder path containing '/' (copied and verified)")
    p.add_argument("--policy", type=Path, required=True, help="policy TOML")
    p.add_argument("--public-key", type=Path, default=None,
                   help="trusted signer's PEM key (default: the policy's [trust] keys, else "
                        "model.public_key)")
    p.add_argument("--api-key-file", type=Path, default=None,
                   help="accepted API keys, one a line (also $APPLIANCE_API_KEYS, comma list;"
                   " named keys with limits: [admission] keys_file in the policy)")
    p.add_argument("--host", default=None, help="gateway address (default: policy)")
    p.add_argument("--port", type=int, default=None, help="gateway port (default: policy)")
    p.add_argument("--node-rank", type=int, default=None,
                   help="[cluster] only: this node's rank (default: the position of this "
                        "host's address in cluster.nodes); 0 runs the API and the gateway")
    p.set_defaults(func=_cmd_serve)

    p = sub.add_parser("cluster-firewall",
                       help="install/remove the [cluster] nftables table (root; the systemd "
                            "cluster units run it as ExecStartPre=+ / ExecStopPost=+)")
    p.add_argument("action", choices=("up", "down", "show"))
    p.add_argument("--policy", type=Path, required=True, help="policy TOML with [cluster]")
    p.add_argument("--node-rank", type=int, default=None, help="as for serve")
    p.add_argument("--port", type=int, default=None,
                   help="gateway port on the head (default: policy)")
    p.set_defaults(func=_cmd_cluster_firewall)

    cli_store.add_store_commands(sub)

    p = sub.add_parser("prepare", help="build the signed built-in model (cached)")
    p.set_defaults(func=_cmd_prepare)

    p = sub.add_parser("demo", help="run the whole spine on the built-in model")
    p.add_argument("--policy", type=Path, default=_default_policy("cpu-demo.toml"),
                   help="policy TOML (default policies/cpu-demo.toml)")
    p.add_argument("--port", type=int, default=0, help="gateway port (0: pick a free one)")
    p.add_argument("--once", action="store_true", help="exit after the first tool call")
    p.set_defaults(func=_cmd_demo)

    from appliance.keys_cli import add_keys_parser

    add_keys_parser(sub)
    from appliance.benchtools.cli import register as register_bench
    register_bench(sub)  # appliance bench tools | raw-vllm
    for command in sub.choices.values():  # so main() can report errors with its usage
        command.set_defaults(parser=command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # name the subcommand whose options were wrong, not the top-level usage
        args.parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return int(args.func(args))
    except ApplianceError as exc:
        print(exc.diagnostics(), file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

