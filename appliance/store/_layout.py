"""On-disk layout of the trusted model store, its per-name state and the import record.

Layout (one filesystem, so renames are atomic)::

    <root>/                     0755  owned by the importing admin (root)
      .lock                     flock(2) serialising commits, ``use`` and ``remove``
      .tmp/                     0700  imports in progress and removals; never served
      <name>/                   0755
        state.json              {"current": <digest>, "history": [<older currents>]}
        <digest>/               0555  <digest> = the signed manifest's root digest (hex)
          model/                0555  the verified model files, 0444 (the engine loads these)
          model.sig             0444  the exact bundle that was authenticated at import
          record.json           0444  what import measured (see ``Record``)

``state.json`` is written with a temporary file and ``os.replace``. The serving user must not
be able to write anything under ``<root>``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from appliance.atomic_file import replace_file
from appliance.errors import ApplianceError
from scanner.diagnostic import CodeRegistry

NAME_RE = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$")
DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")
MODEL_DIR = "model"
BUNDLE = "model.sig"
RECORD = "record.json"
STATE = "state.json"
RECORD_SCHEMA = 1
MAX_RECORD_BYTES = 64 * 1024 * 1024


STORE_CODES = CodeRegistry("store", {
    "store_error": "a store operation failed without a more specific code",
    "store_missing": "there is no model store at the configured root",
    "store_bad_name": "a model name or NAME@DIGEST reference is not valid",
    "store_not_found": "no model or version by that name in the store",
    "store_ambiguous": "a digest prefix matches more than one version",
    "store_no_previous": "rollback: the model has no previous version",
    "store_version_current": "remove: the version is the current one",
    "store_state_invalid": "a model's state.json is unreadable or invalid",
    "store_disk_full": "the store's filesystem has too little space for the import",
    "store_permission": "the store cannot be changed by this user",
    "store_io_error": "a store file or folder cannot be read or written",
    "store_record_invalid": "a version's record.json is unreadable or not of this schema",
    "store_record_mismatch": "the stored signature, record and version folder disagree",
    "store_file_added": "a version folder holds a file the signature does not cover",
    "store_file_missing": "a signed file is missing from a version folder",
    "store_writable": "a stored file or folder has a write permission bit",
    "store_owned_by_server": "a store path is owned by the serving uid (it could chmod it back)",
    "store_file_changed": "a stored file's size or bytes changed after import",
    "store_file_replaced": "a stored file is another inode than the one recorded at import",
})
"""Codes of :class:`StoreError` (one-line meanings; the table is in ``docs/errors.md``)."""


class StoreError(ApplianceError):
    """A store operation refused or failed; ``code`` names the case (``STORE_CODES``)."""

    code = "store_error"
    registry: ClassVar[CodeRegistry] = STORE_CODES


def store_error(message: str, code: str, where: object, fix: str) -> StoreError:
    return StoreError(message, code=code, where=str(where), fix=fix)


@dataclass(frozen=True)
class Ref:
    """``NAME`` or ``NAME@DIGEST`` (a full 64-hex digest or a unique prefix of ≥ 8)."""

    name: str
    digest: str | None = None

    @classmethod
    def parse(cls, text: str) -> Ref:
        name, _, digest = text.partition("@")
        if not NAME_RE.fullmatch(name):
            raise store_error(
                f"model name {name!r} is not valid", "store_bad_name", text,
                "use 1-64 characters from A-Z a-z 0-9 . _ - (not starting with a dot)")
        if digest and not re.fullmatch(r"[0-9a-f]{8,64}", digest):
            raise store_error(
                f"version {digest!r} is not a hex manifest digest (8-64 digits)",
                "store_bad_name", text, "copy the digest from `appliance models show NAME`")
        return cls(name, digest or None)

    def __str__(self) -> str:
        return f"{self.name}@{self.digest}" if self.digest else self.name


def check_name(name: str) -> str:
    """Return ``name`` if it may name a model in the store, else raise ``store_bad_name``."""
    return Ref.parse(name).name


def io_failure(what: str, where: str | Path, exc: OSError) -> StoreError:
    """An ``OSError`` as a ``StoreError``: ``store_disk_full`` for ENOSPC/EDQUOT,
    ``store_permission`` for EACCES/EPERM/EROFS, else ``store_io_error``."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return store_error(f"{what}: the store's filesystem is full", "store_disk_full", where,
                           "free space on the store's filesystem (or remove old versions "
                           "with `appliance models remove`), then import again")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return store_error(f"{what}: {exc.strerror}", "store_permission", where,
                           "run store changes as the store's owner (root)")
    return store_error(f"{what}: {exc.strerror or exc}", "store_io_error", where,
                       "check the store's filesystem")


class Store:
    """The store rooted at ``root``. Read operations need no lock; changes take ``lock()``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def name_dir(self, name: str) -> Path:
        return self.root / check_name(name)

    def version_dir(self, name: str, digest: str) -> Path:
        return self.name_dir(name) / digest

    def ensure(self) -> None:
        """Create the root and its ``.tmp`` folder if missing (store_permission/io codes)."""
        try:
            self.root.mkdir(mode=0o755, parents=True, exist_ok=True)
            (self.root / ".tmp").mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise io_failure(f"cannot create the store at '{self.root}'", self.root,
                             exc) from None

    def require(self) -> None:
        if not self.root.is_dir():
            raise store_error(f"there is no model store at '{self.root}'", "store_missing",
                              self.root, "import a model first, or pass --store / set "
                              "[store] root in the policy")

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Exclusive ``flock`` on ``<root>/.lock`` for the duration."""
        self.ensure()
        try:
            fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise io_failure("cannot lock the store", self.root, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir()
                      if p.is_dir() and not p.is_symlink() and NAME_RE.fullmatch(p.name))

    def versions(self, name: str) -> list[str]:
        folder = self.name_dir(name)
        if not folder.is_dir():
            return []
        return sorted(p.name for p in folder.iterdir()
                      if DIGEST_RE.fullmatch(p.name) and p.is_dir() and not p.is_symlink())

    def read_state(self, name: str) -> dict[str, Any]:
        path = self.name_dir(name) / STATE
        try:
            data = json.loads(path.read_text("utf-8"))
        except FileNotFoundError:
            return {"current": None, "history": []}
        except (OSError, ValueError) as exc:
            raise store_error(f"cannot read '{path}': {exc}", "store_state_invalid", path,
                              "repair it with `appliance models use NAME@DIGEST`") from None
        current = data.get("current") if isinstance(data, dict) else None
        history = data.get("history") if isinstance(data, dict) else None
        if (current is not None and not (isinstance(current, str)
                                         and DIGEST_RE.fullmatch(current))) \
                or not isinstance(history, list) \
                or not all(isinstance(d, str) and DIGEST_RE.fullmatch(d) for d in history):
            raise store_error(f"'{path}' is not a valid state file", "store_state_invalid",
                              path, "repair it with `appliance models use NAME@DIGEST`")
        return {"current": current, "history": history}

    def write_state(self, name: str, current: str | None, history: list[str]) -> None:
        """Atomically replace ``<name>/state.json`` (call under ``lock()``)."""
        write_atomic(self.name_dir(name) / STATE,
                     json.dumps({"current": current, "history": history[-32:]},
                                indent=2).encode() + b"\n", 0o644)

    def resolve(self, ref: Ref) -> str:
        """The full digest ``ref`` names: its explicit (prefix) digest, or the current one.

        Raises ``store_not_found`` (no such name/version, or no current version) and
        ``store_ambiguous`` (a digest prefix matching several versions)."""
        versions = self.versions(ref.name)
        if not versions:
            raise store_error(f"no model named '{ref.name}' in the store at '{self.root}'",
                              "store_not_found", ref, "list them with `appliance models "
                              "list`, or import it with `appliance import`")
        if ref.digest is None:
            current = self.read_state(ref.name)["current"]
            if current is None or current not in versions:
                raise store_error(f"model '{ref.name}' has no current version",
                                  "store_not_found", ref,
                                  "choose one with `appliance models use NAME@DIGEST`")
            return str(current)
        matches = [v for v in versions if v.startswith(ref.digest)]
        if len(matches) > 1:
            raise store_error(f"'{ref}' matches {len(matches)} versions", "store_ambiguous",
                              ref, "give more digits of the digest")
        if not matches:
            raise store_error(f"model '{ref.name}' has no version '{ref.digest}'",
                              "store_not_found", ref, "see `appliance models show NAME`")
        return matches[0]


def write_atomic(path: Path, data: bytes, mode: int) -> None:
    """Replace ``path`` with ``data`` in one step (:func:`appliance.atomic_file.replace_file`).
    Raises ``StoreError`` (``store_disk_full``, ``store_permission``...)."""
    try:
        replace_file(path, data, mode)
    except OSError as exc:
        raise io_failure(f"cannot write '{path}'", path, exc) from None
