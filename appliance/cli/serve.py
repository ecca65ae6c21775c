"""``appliance serve``: the whole spine (:class:`appliance.serve.Appliance`) from the command
line: verify, scan, preflight, launch vLLM and the gateway, then serve until a signal.
With ``[cluster]`` in the policy, ``--node-rank R`` picks this node's rank (docs/cluster.md)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from appliance.errors import ApplianceError


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
    from appliance.engine.stopping import SIGNALS, install

    install()  # first: SIGTERM/SIGINT in any phase stop serve and its engines (SIGHUP reloads)
    from appliance.cli.store import trust_of
    from appliance.config.models import served_models
    from appliance.config.policy import load_policy
    from appliance.errors import PolicyError
    from appliance.serve import Appliance
    from appliance.store import is_store_ref

    policy = load_policy(args.policy)
    if args.node_rank is not None and policy.cluster is None:
        raise PolicyError("--node-rank needs a [cluster] table in the policy",
                          where=str(args.policy), fix="add [cluster] (docs/cluster.md)")
    # --model names the one model of [model]; [[models]] name theirs (models_conflict)
    first = served_models(policy, args.model, is_store_ref)[0]
    store_ref = None if policy.models else first.ref
    public_key = args.public_key or trust_of(policy)  # [trust] keys, else model.public_key
    app = Appliance(policy=policy, model_dir=Path(args.model or "."), public_key=public_key,
                    api_keys=_read_keys(args.api_key_file), store_ref=store_ref,
                    host=args.host or policy.gateway.host, port=args.port or policy.gateway.port,
                    node_rank=args.node_rank)
    app.start()
    try:
        return app.wait()
    except BaseException as exc:  # a stop signal just before wait() took over (Stopped)
        SIGNALS.caught(exc)
        app.stop()
        raise


def register(sub: Any) -> None:
    """Add ``serve`` to the ``appliance`` subparsers."""
    p = sub.add_parser("serve", help="verify, scan, preflight, launch vLLM and the gateway")
    p.add_argument("--model", default=None,
                   help="store model NAME[@DIGEST] (served in place from the store), or a "
                        "signed model folder path containing '/' (copied and verified); "
                        "not with [[models]] in the policy, which names the models")
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
