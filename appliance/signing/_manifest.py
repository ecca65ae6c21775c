"""The verified manifest (relative path -> SHA-256) and the hashing walk over a model folder.

Resource names follow the OpenSSF Model Signing (OMS) v1.0 ``files`` serialization: relative
POSIX paths, one digest of the whole file each (spec ``ossf/model-signing-spec`` v1.0 §6.3.1).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import MappingProxyType

from appliance.errors import SigningError
from appliance.signing._fs import ModelTree, iter_chunks

_MAX_LISTED = 5


class Manifest(Mapping[str, str]):
    """A verified (or freshly computed) model manifest.

    Maps each signed file's relative POSIX path to its lowercase SHA-256 hex digest, in
    the order the manifest lists them (``sort_key`` order when we sign). ``model_name``
    and ``root_digest`` are the in-toto subject's ``name`` and ``digest.sha256`` (SHA-256
    over the concatenated raw file digests in listed order).
    ``ignore_paths`` is what the signer recorded; the verifier never honours it.
    ``signer`` is the ``_trust.Signer`` that authenticated it (``None`` when computed).
    """

    __slots__ = ("_files", "model_name", "root_digest", "ignore_paths", "signer")

    def __init__(
        self, model_name: str, files: Iterable[tuple[str, str]],
        ignore_paths: Iterable[str] = (),
    ) -> None:
        ordered = list(files)
        self._files: Mapping[str, str] = MappingProxyType(dict(ordered))
        self.model_name = model_name
        self.root_digest = root_digest(digest for _, digest in ordered)
        self.ignore_paths: tuple[str, ...] = tuple(ignore_paths)
        self.signer: object = None  # the trust-store ``Signer`` once verified

    def __getitem__(self, name: str) -> str:
        return self._files[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._files)

    def __len__(self) -> int:
        return len(self._files)

    def __repr__(self) -> str:
        return f"Manifest({self.model_name!r}, {len(self)} files, root {self.root_digest[:12]})"

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form: ``{"name", "sha256", "files": {path: hex}}``."""
        return {"name": self.model_name, "sha256": self.root_digest, "files": dict(self._files)}


def root_digest(hex_digests: Iterable[str]) -> str:
    """SHA-256 hex over the concatenated raw digests, in the order given (OMS subject)."""
    hasher = hashlib.sha256()
    for digest in hex_digests:
        hasher.update(bytes.fromhex(digest))
    return hasher.hexdigest()


def check_name(name: object) -> str:
    """Accept a manifest resource name only if it is a canonical relative POSIX path.

    Raises ``SigningError``: ``manifest_path_escape`` for absolute names, ``..`` components,
    backslashes or NUL (they could reach outside the model folder; advisory
    sigstore/model-transparency PR#647); ``bundle_malformed`` for other non-canonical names
    (empty, ``.`` or empty components, not a string, not UTF-8)."""
    if not isinstance(name, str) or not name:
        raise _malformed_name(name)
    shown = repr(name)
    if name.startswith("/") or "\\" in name or "\x00" in name or ".." in name.split("/"):
        raise SigningError(
            f"manifest resource name {shown} points outside the model folder",
            code="manifest_path_escape", where=shown,
            fix="refuse this signature; re-sign the model with a trusted signer",
        )
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise _malformed_name(name) from None
    if any(part in ("", ".") for part in name.split("/")):
        raise _malformed_name(name)
    return name


def _malformed_name(name: object) -> SigningError:
    return SigningError(
        f"manifest resource name {name!r} is not a canonical relative POSIX path",
        code="bundle_malformed", where=repr(name), fix="re-sign the model",
    )


class Cancelled(Exception):
    """Raised inside a worker once another worker has failed (its error is the one shown)."""


def hash_fd(
    fd: int, sink: Callable[[memoryview], object] | None = None,
    stop: threading.Event | None = None,
) -> str:
    """SHA-256 hex of everything readable from ``fd`` in 1 MiB chunks; each chunk is also
    passed to ``sink`` (staging copies exactly the bytes it hashes). Raises ``Cancelled``
    between chunks once ``stop`` is set."""
    hasher = hashlib.sha256()
    for chunk in iter_chunks(fd):
        if stop is not None and stop.is_set():
            raise Cancelled
        hasher.update(chunk)
        if sink is not None:
            sink(chunk)
    return hasher.hexdigest()


def workers(count: int) -> int:
    """Threads for per-file hashing: one per usable CPU, at least 1, at most ``count``."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 2
    return max(1, min(count, cpus))


def run_parallel(
    names: list[str], task: Callable[[str, threading.Event], str],
) -> dict[str, str]:
    """Run ``task(name, stop) -> hex`` over ``names`` on a thread pool. The first exception
    wins: it sets ``stop`` (running tasks end at their next chunk) and cancels the rest."""
    results: dict[str, str] = {}
    if not names:
        return results
    stop = threading.Event()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers(len(names)))
    try:
        futures = {pool.submit(task, name, stop): name for name in names}
        for future in concurrent.futures.as_completed(futures):
            results[futures[future]] = future.result()
    except BaseException:
        stop.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return results


def hash_tree(
    tree: ModelTree, names: list[str], expected: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Digest each named file under ``tree`` (a thread per file) and return name -> hex.

    With ``expected``, a file whose digest differs raises ``digest_mismatch`` as soon as it
    is hashed. Raises ``SigningError`` (also ``missing_file``, ``symlink_not_allowed``,
    ``special_file``, ``io_error`` from opening)."""

    def one(name: str, stop: threading.Event) -> str:
        fd = tree.open_file(name)
        try:
            actual = hash_fd(fd, stop=stop)
        except OSError as exc:
            raise SigningError(
                f"cannot read '{name}': {exc.strerror or exc}", code="io_error", where=name,
                fix="check the file is readable",
            ) from None
        finally:
            os.close(fd)
        if expected is not None and actual != expected[name]:
            raise digest_mismatch(name, expected[name], actual)
        return actual

    return run_parallel(names, one)


def _listing(names: list[str]) -> str:
    shown = ", ".join(repr(name) for name in names[:_MAX_LISTED])
    more = len(names) - _MAX_LISTED
    return shown + (f" and {more} more" if more > 0 else "")


def compare_names(signed: Mapping[str, str], present: list[str]) -> None:
    """Require the folder's files to equal the signed set exactly.

    Raises ``unsigned_file_present`` (a file on disk not in the manifest; checked first) or
    ``missing_file`` (a signed file absent). There is deliberately no ignore-unsigned mode
    (sigstore/model-transparency PR#502)."""
    on_disk = set(present)
    extra = [name for name in present if name not in signed]
    if extra:
        raise SigningError(
            f"files not covered by the signature: {_listing(extra)}",
            code="unsigned_file_present", where=extra[0],
            fix="remove the extra files, or re-sign the model including them",
        )
    missing = [name for name in signed if name not in on_disk]
    if missing:
        raise SigningError(
            f"signed files missing from the model folder: {_listing(missing)}",
            code="missing_file", where=missing[0],
            fix="restore the files from the signed release, or re-sign the model",
        )


def digest_mismatch(name: str, expected: str, actual: str) -> SigningError:
    """The error for a file whose bytes differ from the signed digest."""
    return SigningError(
        f"'{name}' does not match its signed digest: signed sha256 {expected}, "
        f"actual sha256 {actual}",
        code="digest_mismatch", where=name,
        fix="restore the file from the signed release, or re-sign the model",
    )
