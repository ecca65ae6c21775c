"""File-system access for signing: walk a model folder and open its files without ever
following a symbolic link, opening a special file or accepting a hard-linked file.

Every file is reached from a directory file descriptor held on the model root, one path
component at a time with ``O_NOFOLLOW`` (``openat`` chain), so a path component swapped for a
symlink after the walk makes the open fail instead of escaping the folder. Names come from
the walk or from a manifest that ``_manifest.check_name`` already accepted; this module never
joins an untrusted name onto a path string.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

from appliance.errors import SigningError

MAX_DEPTH = 32
"""Deepest directory nesting accepted under a model root (components, not bytes)."""

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def sort_key(name: str) -> tuple[str, ...]:
    """Order of resources in an OMS manifest as model_signing 1.1.1 emits it: by path
    components (``PurePosixPath`` ordering), so ``a/x`` sorts before ``a-b/x``."""
    return tuple(name.split("/"))


def _symlink(rel: str) -> SigningError:
    return SigningError(
        f"'{rel}' is a symbolic link; signed models may not contain symlinks",
        code="symlink_not_allowed", where=rel,
        fix="replace the link with a copy of the file it points to, then re-sign",
    )


def _hard_link(rel: str, links: int) -> SigningError:
    return SigningError(
        f"'{rel}' has {links} hard links; a signed model file must have exactly one (another "
        "name, possibly outside the folder, could change its bytes)",
        code="hard_link_not_allowed", where=rel,
        fix="replace the file with an independent copy (cp, not ln), then sign or import again",
    )


def _special(rel: str) -> SigningError:
    return SigningError(
        f"'{rel}' is not a regular file or directory (FIFO, socket or device)",
        code="special_file", where=rel, fix="remove it from the model folder",
    )


def _io_error(rel: str, exc: OSError) -> SigningError:
    return SigningError(
        f"cannot read '{rel}': {exc.strerror or exc}", code="io_error", where=rel,
        fix="check the file exists and is readable by this user",
    )


def check_component(part: str, rel: str) -> None:
    """Refuse a file name on disk that an OMS manifest could not carry safely.

    Raises ``SigningError(code='bad_file_name')`` for names that are not UTF-8 or hold a
    backslash (a path separator on Windows verifiers)."""
    try:
        part.encode("utf-8")
    except UnicodeEncodeError:
        raise SigningError(
            f"file name {rel!r} is not valid UTF-8", code="bad_file_name", where=rel,
            fix="rename the file to a UTF-8 name",
        ) from None
    if "\\" in part:
        raise SigningError(
            f"file name {rel!r} contains a backslash", code="bad_file_name", where=rel,
            fix="rename the file without backslashes",
        )


def read_small_file(path: Path, limit: int, what: str, invalid_code: str) -> bytes:
    """Read a whole regular file of at most ``limit`` bytes (a key or a signature bundle).

    Raises ``SigningError`` with code ``<what>_missing`` when absent and ``invalid_code``
    when it cannot be opened, is not a regular file or is larger than ``limit``."""
    where = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise SigningError(
            f"{what} file '{path}' does not exist", code=f"{what}_missing", where=where,
            fix=f"pass the path of an existing {what} file",
        ) from None
    except OSError as exc:
        raise SigningError(
            f"cannot open {what} file '{path}': {exc.strerror}", code=invalid_code,
            where=where, fix="check the path and its permissions",
        ) from None
    with open(fd, "rb", buffering=0, closefd=True) as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise SigningError(
                f"{what} file '{path}' is not a regular file", code=invalid_code,
                where=where, fix=f"pass a regular {what} file",
            )
        try:
            data = handle.read(limit + 1)
        except OSError as exc:
            raise SigningError(
                f"cannot read {what} file '{path}': {exc.strerror}", code=invalid_code,
                where=where, fix="check the path and its permissions",
            ) from None
    if len(data) > limit:
        raise SigningError(
            f"{what} file '{path}' is larger than {limit} bytes", code=invalid_code,
            where=where, fix=f"pass a genuine {what} file",
        )
    return data


class ModelTree:
    """A model folder opened by descriptor. Use as a context manager.

    Raises ``SigningError`` ``model_not_found`` (missing or not a directory) or
    ``symlink_not_allowed`` (the root itself is a symlink) on entry."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._fd = -1

    def __enter__(self) -> ModelTree:
        where = str(self.root)
        try:
            info = os.lstat(self.root)
        except OSError:
            info = None
        if info is not None and stat.S_ISLNK(info.st_mode):
            raise SigningError(
                f"model folder '{where}' is a symbolic link", code="symlink_not_allowed",
                where=where, fix="pass the real directory path (e.g. from realpath)",
            )
        if info is None or not stat.S_ISDIR(info.st_mode):
            raise SigningError(
                f"model folder '{where}' does not exist or is not a directory",
                code="model_not_found", where=where, fix="pass the model directory",
            )
        try:
            self._fd = os.open(self.root, DIR_FLAGS)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise _symlink(where) from None
            raise _io_error(where, exc) from None
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def walk(self, exclude: str | None = None) -> list[str]:
        """Relative POSIX paths of every regular file, in manifest order.

        ``exclude`` (a relative path) is skipped when it is a regular file: the signature.
        Never follows symlinks; raises ``symlink_not_allowed``, ``special_file``,
        ``hard_link_not_allowed`` (a regular file with more than one link), ``bad_file_name``,
        ``model_too_deep`` or ``io_error`` naming the entry."""
        found: list[str] = []
        self._walk_dir(self._fd, (), exclude, found)
        found.sort(key=sort_key)
        return found

    def _walk_dir(
        self, dir_fd: int, prefix: tuple[str, ...], exclude: str | None, found: list[str],
    ) -> None:
        if len(prefix) > MAX_DEPTH:
            rel = "/".join(prefix)
            raise SigningError(
                f"'{rel}' is nested deeper than {MAX_DEPTH} directories",
                code="model_too_deep", where=rel, fix="flatten the model folder",
            )
        try:
            with os.scandir(dir_fd) as entries:
                names = [entry.name for entry in entries]
        except OSError as exc:
            raise _io_error("/".join(prefix) or ".", exc) from None
        for name in names:
            rel = "/".join((*prefix, name))
            check_component(name, rel)
            try:
                info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError as exc:
                raise _io_error(rel, exc) from None
            mode = info.st_mode
            if stat.S_ISLNK(mode):
                raise _symlink(rel)
            if stat.S_ISDIR(mode):
                sub = self._open_at(dir_fd, name, DIR_FLAGS, rel)
                try:
                    self._walk_dir(sub, (*prefix, name), exclude, found)
                finally:
                    os.close(sub)
            elif stat.S_ISREG(mode):
                if rel != exclude:
                    if info.st_nlink > 1:
                        raise _hard_link(rel, info.st_nlink)
                    found.append(rel)
            else:
                raise _special(rel)

    @staticmethod
    def _open_at(dir_fd: int, name: str, flags: int, rel: str) -> int:
        """``os.open`` beneath ``dir_fd``; a link, a missing entry or an I/O error is the
        matching ``SigningError`` for ``rel``."""
        try:
            return os.open(name, flags, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _symlink(rel) from None
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                raise _missing(rel) from None
            raise _io_error(rel, exc) from None

    def open_file(self, rel: str) -> int:
        """Open ``rel`` (a checked relative POSIX path) read-only beneath the root.

        Returns a file descriptor of a regular file with one link. Raises ``missing_file``,
        ``symlink_not_allowed``, ``special_file``, ``hard_link_not_allowed`` or
        ``io_error``."""
        parts = rel.split("/")
        if any(part in ("", ".", "..") for part in parts) or rel.startswith("/"):
            raise SigningError(
                f"refusing to open non-canonical path {rel!r}", code="manifest_path_escape",
                where=rel, fix="refuse this signature; re-sign the model",
            )
        cur = self._fd
        try:
            for index, part in enumerate(parts[:-1]):
                nxt = self._open_at(cur, part, DIR_FLAGS, "/".join(parts[: index + 1]))
                if cur != self._fd:
                    os.close(cur)
                cur = nxt
            fd = self._open_at(cur, parts[-1], _FILE_FLAGS, rel)
        finally:
            if cur != self._fd:
                os.close(cur)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            raise _special(rel)
        if info.st_nlink > 1:
            os.close(fd)
            raise _hard_link(rel, info.st_nlink)
        return fd


def _missing(rel: str) -> SigningError:
    return SigningError(
        f"signed file '{rel}' is missing from the model folder", code="missing_file",
        where=rel, fix="restore the file from the signed release, or re-sign the model",
    )


def iter_chunks(fd: int, chunk: int = 1 << 20) -> Iterator[memoryview]:
    """Yield successive reads of up to ``chunk`` bytes from ``fd`` (one reused buffer:
    consume each view before the next is produced)."""
    buf = bytearray(chunk)
    view = memoryview(buf)
    with open(fd, "rb", buffering=0, closefd=False) as handle:
        while True:
            count = handle.readinto(buf)
            if not count:
                return
            yield view[:count]
