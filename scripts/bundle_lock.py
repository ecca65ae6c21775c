"""Write a hash-pinned lock file from ``pip install --dry-run --report`` JSON reports.

Usage (scripts/bundle.sh runs it; stdlib only, any Python >= 3.11)::

    python scripts/bundle_lock.py --out LOCK [--exclude NAME,...] REPORT.json...

Each resolved distribution becomes one ``name==version --hash=sha256:HEX`` line, sorted by
name, with a comment naming the file (``# file: NAME.whl``). The hash is the one pip saw in
the index (``download_info.archive_info.hashes.sha256``), or, for a local file, the SHA-256
of that file. Refuses (exit 1, message on stderr) a distribution that is not a wheel, one
without a hash, or one resolved to two different versions. ``--exclude`` drops the
distributions scripts/install.sh removes after installing (torchvision, triton, ...).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import urllib.parse
import urllib.request
from pathlib import Path


def canonical(name: str) -> str:
    """PEP 503 normalized name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def entries(report: dict[str, object]) -> list[tuple[str, str, str, str]]:
    """(canonical name, version, wheel file name, sha256) of each resolved distribution."""
    out = []
    install = report.get("install")
    if not isinstance(install, list):
        raise ValueError("not a pip installation report (no 'install' list)")
    for item in install:
        name = canonical(item["metadata"]["name"])
        version = item["metadata"]["version"]
        info = item["download_info"]
        url = info["url"]
        filename = urllib.parse.unquote(url.rsplit("/", 1)[-1])
        if not filename.endswith(".whl"):
            raise ValueError(f"{name} {version} resolves to {filename}, not a wheel")
        sha = info.get("archive_info", {}).get("hashes", {}).get("sha256")
        if sha is None and url.startswith("file://"):
            sha = _file_sha256(Path(urllib.request.url2pathname(urllib.parse.urlparse(url).path)))
        if sha is None:
            raise ValueError(f"{name} {version}: the index gave no sha256 for {filename}")
        out.append((name, version, filename, sha))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--exclude", default="")
    args = parser.parse_args(argv)
    excluded = {canonical(n) for n in args.exclude.split(",") if n.strip()}
    pins: dict[str, tuple[str, str, str]] = {}
    try:
        for path in args.reports:
            for name, version, filename, sha in entries(json.loads(path.read_text("utf-8"))):
                if name in excluded:
                    continue
                if name in pins and pins[name][0] != version:
                    raise ValueError(f"{name} resolved to both {pins[name][0]} and {version}")
                pins[name] = (version, filename, sha)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"bundle_lock: {exc}", file=sys.stderr)
        return 1
    lines = ["# Hash-pinned lock written by scripts/bundle.sh; install with",
             "#   pip install --no-index --no-deps --require-hashes -r THIS_FILE"]
    for name in sorted(pins):
        version, filename, sha = pins[name]
        lines.append(f"{name}=={version} --hash=sha256:{sha}  # file: {filename}")
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
