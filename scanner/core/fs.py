"""Filesystem walk for scan targets: know the type before open, never follow a link, never
block.

Every directory is opened with ``O_DIRECTORY|O_NOFOLLOW`` relative to its parent's
descriptor (``dir_fd``), so a path component swapped for a symlink mid-scan is never
followed. Regular files are opened ``O_RDONLY|O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC`` and then
``fstat``-ed: the descriptor must be the same regular file that was seen before the open,
so a FIFO or device swapped in cannot block or feed endless bytes. Symlinks, FIFOs,
sockets and device nodes are findings and are never opened.

"Seen before the open" is the directory listing itself where the walk is asked to
(``Walk(lstat_files=False)``, sequential folder scans): ``getdents`` gives each entry's type
and inode number (``d_type``/``d_ino``), so a regular file is opened without an ``lstat``
first (one system call fewer per file of a fleet) and the descriptor must be that inode
(``open_listed``). Where the listing cannot say (``DT_UNKNOWN``: ``os.DirEntry`` then
``lstat``-s itself) or names another inode than the descriptor's (a file replaced since the
listing, or a filesystem whose ``d_ino`` differs from ``st_ino``: overlayfs over several
filesystems, bind mounts), the file is checked by ``lstat`` then open as everywhere else
(``open_blob``), so no race the ``lstat`` check catches goes unreported.
"""

from __future__ import annotations

import errno
import operator
import os
import posixpath
import stat
from collections.abc import Iterator

from scanner.core.context import LimitHit, Limits
from scanner.core.model import FileBlob, Finding, Severity, Verdict
from scanner.core.rules import rule

V, S = Verdict, Severity

SYMLINK_ESCAPE = rule(
    "fs.symlink", V.MALICIOUS, S.CRITICAL,
    "Symbolic link that points outside the model folder (absolute or escaping with '..')",
    "Replace the link with the real file; a loader following it reads files outside the "
    "model (e.g. /etc/passwd, another model's weights).",
)
SYMLINK_LOCAL = rule(
    "fs.symlink_local", V.POLICY, S.MEDIUM,
    "Symbolic link inside the model folder (refused: links are never followed)",
    "Replace the link with a copy of the file it points to.",
)
TARGET_SYMLINK = rule(
    "fs.target_symlink", V.POLICY, S.MEDIUM,
    "The scan target itself is a symbolic link (not followed)",
    "Scan and deploy the resolved path (realpath) instead of the link.",
)
HARDLINK = rule(
    "fs.hardlink", V.POLICY, S.MEDIUM,
    "Regular file with more than one hard link (its content can change through the other name)",
    "Copy the file so it has a single link (cp, not cp -l or ln).",
)
SPECIAL_FILE = rule(
    "fs.special_file", V.MALFORMED, S.HIGH,
    "FIFO, socket or device node where a file is expected (never opened)",
    "Replace it with a regular file; reading a FIFO blocks and a device can be endless.",
)
SPARSE_FILE = rule(
    "fs.sparse_file", V.POLICY, S.MEDIUM,
    "Large sparse file (far fewer bytes on disk than its size: holes read as zeros)",
    "Re-download or copy the file without holes; sparse weights are padding, not a model.",
)
UNREADABLE = rule(
    "fs.unreadable", V.MALFORMED, S.HIGH,
    "File or directory could not be opened or read, so it could not be checked",
    "Fix its permissions so the scanner can read it, then scan again.",
)
CHANGED = rule(
    "fs.changed_during_scan", V.MALFORMED, S.HIGH,
    "File or directory was replaced between lstat (or the directory listing) and open "
    "(possible race attack); in a parallel folder scan also: the processes saw different "
    "entries, or a file was analysed by none of them (resized between their looks)",
    "Scan a folder nobody else writes to while it is scanned and deployed.",
)

FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
SPARSE_MIN_SIZE = 64 << 20  # only files this large are checked for holes
SPARSE_RATIO = 8  # sparse when allocated bytes * 8 < size
MAX_DIR_DEPTH = 32
_NAME = operator.attrgetter("name")  # sort key of directory entries (C speed)
SKIP_DIRS = {".git": "version-control metadata (not read by model loaders)"}


class FsProblem(Exception):
    """A file could not be opened safely; ``finding`` says why."""

    def __init__(self, finding: Finding) -> None:
        super().__init__(finding.message)
        self.finding = finding


class Entry:
    """One directory entry seen by ``lstat``, or (``st`` None) a regular file as the
    directory listing named it (``listed``: the directory's ``st_dev`` and the entry's
    ``d_ino``; ``open_listed`` opens it). ``dir_fd``/``name`` are valid only while the walk
    is at this entry (the parent descriptor is closed afterwards). A slotted class, not a
    dataclass: the walk makes one per entry of a fleet."""

    __slots__ = ("rel", "st", "dir_fd", "name", "is_file", "is_dir", "is_symlink", "listed")

    def __init__(self, rel: str, st: os.stat_result | None, dir_fd: int, name: str,
                 listed: tuple[int, int] = (0, 0)) -> None:
        self.rel = rel  # POSIX path relative to the target root
        self.st = st  # lstat result (follow_symlinks=False); None: a listed regular file
        self.dir_fd = dir_fd
        self.name = name
        self.listed = listed  # (st_dev of the directory, d_ino) when st is None
        if st is None:
            self.is_file, self.is_dir, self.is_symlink = True, False, False
            return
        mode = st.st_mode
        self.is_file = stat.S_ISREG(mode)
        self.is_dir = stat.S_ISDIR(mode)
        self.is_symlink = stat.S_ISLNK(mode)

    def __repr__(self) -> str:
        return f"Entry(rel={self.rel!r}, dir_fd={self.dir_fd}, name={self.name!r})"


def kind_name(mode: int) -> str:
    """Human name of a file type (``st_mode``)."""
    for test, name in ((stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISLNK, "symbolic link"), (stat.S_ISDIR, "directory"),
                       (stat.S_ISREG, "regular file")):
        if test(mode):
            return name
    return "unknown file type"


def os_error_finding(rel: str, exc: OSError, what: str) -> Finding:
    """The finding for ``exc`` met doing ``what`` to ``rel``: ``fs.changed_during_scan``
    for a path that became a link, else ``fs.unreadable`` with the errno name."""
    if exc.errno == errno.ELOOP:
        return CHANGED.finding(rel, f"{what} became a symbolic link before it was opened",
                               errno.errorcode.get(exc.errno, str(exc.errno)))
    code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    return UNREADABLE.finding(rel, f"cannot {what}: {exc.strerror or exc}", code)


def file_findings(rel: str, st: os.stat_result) -> list[Finding]:
    """lstat-only findings for a regular file: hard links and large sparse files."""
    if st.st_nlink <= 1 and st.st_size < SPARSE_MIN_SIZE:
        return []  # neither can apply (the common case: one call per file of a fleet)
    out: list[Finding] = []
    if st.st_nlink > 1:
        out.append(HARDLINK.finding(rel, f"file has {st.st_nlink} hard links",
                                    f"st_nlink={st.st_nlink}"))
    allocated = getattr(st, "st_blocks", None)
    if allocated is not None and st.st_size >= SPARSE_MIN_SIZE \
            and allocated * 512 * SPARSE_RATIO < st.st_size:
        out.append(SPARSE_FILE.finding(
            rel, "file is sparse: most of its size is holes",
            f"st_size={st.st_size} allocated={allocated * 512}",
        ))
    return out


def special_finding(rel: str, st: os.stat_result) -> Finding:
    """``fs.special_file`` for a FIFO/socket/device (never opened)."""
    return SPECIAL_FILE.finding(rel, f"{kind_name(st.st_mode)} is not a regular file",
                                kind_name(st.st_mode))


def symlink_finding(root: str, rel: str, target: str) -> Finding:
    """``fs.symlink`` (malicious) when ``target`` is absolute or resolves outside ``root``
    (lexically or through other links), else ``fs.symlink_local`` (policy). ``root`` is the
    target folder's absolute path; resolution uses ``realpath`` (lstat/readlink only)."""
    evidence = f"-> {target}"
    if posixpath.isabs(target):
        return SYMLINK_ESCAPE.finding(rel, "symbolic link to an absolute path", evidence)
    lexical = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
    real_root = os.path.realpath(root)
    resolved = os.path.realpath(os.path.join(root, rel))
    inside = resolved == real_root or resolved.startswith(real_root.rstrip("/") + "/")
    if lexical == ".." or lexical.startswith("../") or not inside:
        return SYMLINK_ESCAPE.finding(rel, "symbolic link escapes the model folder", evidence)
    return SYMLINK_LOCAL.finding(rel, "symbolic link inside the model folder (not followed)",
                                 evidence)


def read_link(dir_fd: int | None, name: str) -> str | None:
    """The target text of a symlink (``readlink``; never followed), None if unreadable."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return None


def link_finding(root: str, rel: str, dir_fd: int | None, name: str) -> Finding:
    """``symlink_finding`` for the link ``name`` in ``dir_fd``; an unreadable link target
    is treated as escaping (fail closed)."""
    target = read_link(dir_fd, name)
    if target is None:
        return SYMLINK_ESCAPE.finding(rel, "symbolic link whose target cannot be read",
                                      "readlink failed")
    return symlink_finding(root, rel, target)


def open_regular(dir_fd: int | None, name: str, rel: str, st: os.stat_result) -> int:
    """Open a regular file seen by lstat as ``st`` and check the descriptor is that file.

    ``dir_fd`` None opens ``name`` as a path (top-level targets). Returns the descriptor
    (caller closes). Raises ``FsProblem`` (``fs.unreadable`` / ``fs.changed_during_scan``).
    """
    return open_blob(dir_fd, name, rel, st).fd


def _open_fstat(dir_fd: int | None, name: str, rel: str) -> tuple[int, os.stat_result]:
    """``name`` opened without following a link (``FILE_FLAGS``) and its ``fstat``:
    ``(fd, st)``; the caller closes ``fd``. Raises ``FsProblem`` naming ``rel``."""
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        raise FsProblem(os_error_finding(rel, exc, "open file")) from None
    try:
        return fd, os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        raise FsProblem(os_error_finding(rel, exc, "stat open file")) from None


def open_blob(dir_fd: int | None, name: str, rel: str, st: os.stat_result) -> FileBlob:
    """``open_regular``, as a ``FileBlob`` named ``rel`` whose size is the descriptor's
    ``fstat`` size (the same ``fstat`` that checked it is the file ``st`` names; a file
    growing during the scan is not followed). The caller closes ``.fd``."""
    fd, fst = _open_fstat(dir_fd, name, rel)
    if not stat.S_ISREG(fst.st_mode) or (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
        os.close(fd)
        raise FsProblem(CHANGED.finding(
            rel, "file was replaced between lstat and open",
            f"lstat ino={st.st_ino}, opened {kind_name(fst.st_mode)} ino={fst.st_ino}",
        ))
    return FileBlob(rel, fd, fst.st_size)


def open_listed(dir_fd: int, name: str, rel: str,
                listed: tuple[int, int]) -> tuple[FileBlob, os.stat_result]:
    """Open the regular file the directory listing named ``name`` (``listed``: the
    directory's ``st_dev`` and the entry's ``d_ino``, see ``Entry``) and check the
    descriptor is that file: ``(blob, st)``, ``st`` the descriptor's ``fstat`` (in place of
    an ``lstat``: the same inode). Anything but a regular file at open is
    ``fs.changed_during_scan``; a regular file with another inode number is checked again
    by ``lstat`` and a second open (``open_blob``: a file replaced since the listing, or a
    filesystem whose ``d_ino`` is not ``st_ino``). The caller closes ``blob.fd``. Raises
    ``FsProblem`` as ``open_blob`` does."""
    fd, fst = _open_fstat(dir_fd, name, rel)
    if not stat.S_ISREG(fst.st_mode):
        os.close(fd)
        raise FsProblem(CHANGED.finding(
            rel, "file was replaced between the directory listing and open",
            f"listed regular file ino={listed[1]}, opened {kind_name(fst.st_mode)} "
            f"ino={fst.st_ino}",
        ))
    if (fst.st_dev, fst.st_ino) == listed:
        return FileBlob(rel, fd, fst.st_size), fst
    os.close(fd)
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as exc:
        raise FsProblem(os_error_finding(rel, exc, "lstat")) from None
    if not stat.S_ISREG(st.st_mode):
        raise FsProblem(CHANGED.finding(
            rel, "file was replaced between the directory listing and open",
            f"listed regular file ino={listed[1]}, now {kind_name(st.st_mode)}"))
    return open_blob(dir_fd, name, rel, st), st


class Walk:
    """Depth-first, name-sorted walk of a folder target.

    Iterating yields every entry except the root (directories before their contents).
    Problems met while walking (unreadable or swapped directories, limits) are appended to
    ``findings``; directories not descended into are listed in ``skipped`` with a reason.
    With ``lstat_files`` False (every scan since issue 30; parallel shares too, see
    ``scanner.scan.walk.TargetScan.listed_share_file``), a regular file the directory listing
    names (``d_type``) is yielded without an ``lstat``, as ``Entry(st=None, listed=...)``
    (see ``open_listed``); every other entry is ``lstat``-ed as before.
    """

    def __init__(self, root: str, limits: Limits, root_st: os.stat_result | None = None, *,
                 reverse: bool = False, lstat_files: bool = True) -> None:
        self.root, self.limits = root, limits
        self.root_st = root_st  # lstat of the root, checked against the open fd
        self.findings: list[Finding] = []
        self.skipped: list[tuple[str, str]] = []
        self.entries = 0
        self.reverse = reverse  # names in descending order (parallel helpers)
        self.lstat_files = lstat_files  # False: regular files as the listing names them

    def _listdir(self, fd: int, rel: str) -> list[os.DirEntry[str]] | None:
        items: list[os.DirEntry[str]] = []
        try:
            with os.scandir(fd) as it:
                for item in it:
                    self.entries += 1
                    if self.entries > self.limits.max_files:
                        raise LimitHit("max_files", self.limits.max_files, self.entries)
                    items.append(item)
        except OSError as exc:
            self.findings.append(os_error_finding(rel or ".", exc, "list directory"))
            self.skipped.append((rel or ".", "directory not listed: its contents were not "
                                 f"analysed ({exc.strerror or exc})"))
            return None
        items.sort(key=_NAME, reverse=self.reverse)
        return items

    def _open_dir(self, parent: int | None, name: str, rel: str,
                  st: os.stat_result | None) -> tuple[int, int] | None:
        """(descriptor, st_dev) of the directory, or None (a finding recorded)."""
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=parent)
        except OSError as exc:
            self.findings.append(os_error_finding(rel or ".", exc, "open directory"))
            self.skipped.append((rel or ".", "directory not opened: its contents were not "
                                 f"analysed ({exc.strerror or exc})"))
            return None
        fst = os.fstat(fd)
        if st is not None and (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
            os.close(fd)
            self.findings.append(CHANGED.finding(rel, "directory was replaced while walking",
                                                 f"ino {st.st_ino} -> {fst.st_ino}"))
            return None
        return fd, fst.st_dev

    def __iter__(self) -> Iterator[Entry]:
        """Raises ``LimitHit`` when ``limits.max_files`` entries are exceeded."""
        opened = self._open_dir(None, self.root, ".", self.root_st)
        if opened is None:
            return
        root_fd, root_dev = opened
        # Listed regular files (``lstat_files`` False) are yielded unopened when the
        # listing says regular (``DirEntry.is_file`` lstat-s only for ``DT_UNKNOWN``; an
        # error there leaves the entry to the lstat path below, which reports it).
        listing = not self.lstat_files
        stack: list[tuple[int, str, Iterator[os.DirEntry[str]], int]] = [
            (root_fd, "", iter(()), root_dev)]
        try:
            stack[-1] = (root_fd, "", iter(self._listdir(root_fd, "") or []), root_dev)
            while stack:
                fd, prefix, it, dev = stack[-1]
                item = next(it, None)
                if item is None:
                    os.close(stack.pop()[0])
                    continue
                name = item.name
                rel = prefix + name
                if listing:
                    try:
                        listed = item.is_file(follow_symlinks=False)
                    except OSError:
                        listed = False
                    if listed:
                        yield Entry(rel, None, fd, name, (dev, item.inode()))
                        continue
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError as exc:
                    self.findings.append(os_error_finding(rel, exc, "lstat"))
                    continue
                entry = Entry(rel, st, fd, name)
                yield entry
                if not entry.is_dir:
                    continue
                if name in SKIP_DIRS:
                    self.skipped.append((rel, SKIP_DIRS[name]))
                    continue
                if len(stack) >= MAX_DIR_DEPTH:
                    self.findings.append(LimitHit("max_dir_depth", MAX_DIR_DEPTH).finding(rel))
                    continue
                sub = self._open_dir(fd, name, rel, st)
                if sub is not None:
                    stack.append((sub[0], rel + "/", iter(()), sub[1]))
                    stack[-1] = (sub[0], rel + "/", iter(self._listdir(sub[0], rel) or []),
                                 sub[1])
        finally:
            for fd, _, _, _ in stack:
                os.close(fd)

