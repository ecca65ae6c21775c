"""The Hugging Face cache layout: ``models--org--name/snapshots/<rev>/<file>`` is a
relative symlink to ``../../blobs/<sha>`` (huggingface_hub ``file_download``).

A link that resolves to a regular file in the repository's own ``blobs/`` folder is
judged as that file (its content analysed under the link's name), not reported as a link:
the loader reads exactly that blob. Anything else (absolute targets, links leaving the
repository, targets that are not regular files) stays a ``fs.symlink*`` finding. The
repository is the scan root when it is a ``models--*``/``datasets--*``/``spaces--*``
folder, the one above a ``snapshots`` root or two levels above a ``snapshots/<rev>`` root,
or, for a cache root holding many repositories (``~/.cache/huggingface/hub``), the
``models--*`` folder the link itself sits in (``<repo>/snapshots/<rev>/<path>``). Links
are confined to their own repository's ``blobs/``: a link in one repository pointing into
another repository's blobs, or into ``refs/``, is not the layout.

A repository is recognised by its name (``models--*`` ...) or by its shape: a folder
holding real ``blobs/`` and ``snapshots/`` directories, as a cache repository copied or
renamed without its ``models--org--name`` folder name is (a snapshot scanned on its own
was otherwise all links leaving the scan root). The shape only decides where links may
point; every blob reached is still analysed under the link's name.
"""

from __future__ import annotations

import os
import posixpath
import stat

from scanner.core.fs import read_link

_PREFIXES = ("models--", "datasets--", "spaces--")


def _is_repository(path: str) -> bool:
    """Named ``models--*``/``datasets--*``/``spaces--*``, or shaped like one: real
    (not linked) ``blobs/`` and ``snapshots/`` directories inside."""
    if os.path.basename(path).startswith(_PREFIXES):
        return True
    for sub in ("blobs", "snapshots"):
        try:
            if not stat.S_ISDIR(os.lstat(os.path.join(path, sub)).st_mode):
                return False
        except OSError:
            return False
    return True


def repository(root: str) -> str | None:
    """The real path of the HF cache repository holding ``root``, or ``None``."""
    real = os.path.realpath(root)
    if _is_repository(real):
        return real
    parent = os.path.dirname(real)
    if os.path.basename(real) == "snapshots" and _is_repository(parent):
        return parent
    repo = os.path.dirname(parent)
    if os.path.basename(parent) == "snapshots" and _is_repository(repo):
        return repo
    return None


def _link_repository(root: str, rel: str) -> str | None:
    """The repository a link at ``rel`` below ``root`` sits in: the nearest ``<repo>``
    with ``rel`` under ``<repo>/snapshots/<rev>/`` (all inside the scan root)."""
    parts = rel.split("/")
    for i in range(len(parts) - 3, -1, -1):
        if parts[i + 1] == "snapshots":
            repo = os.path.join(os.path.realpath(root), *parts[: i + 1])
            if _is_repository(repo):
                return repo
    return None


def blob_target(root: str, rel: str, dir_fd: int | None,
                name: str) -> tuple[str, os.stat_result] | None:
    """(real path, lstat) of the blob a cache-layout link points to, or ``None``."""
    text = read_link(dir_fd, name)
    if text is None or posixpath.isabs(text) or "\x00" in text:
        return None
    repo = repository(root) or _link_repository(root, rel)
    if repo is None:
        return None
    resolved = os.path.realpath(os.path.join(root, rel))
    if not resolved.startswith(os.path.join(repo, "blobs") + os.sep):
        return None
    try:
        st = os.lstat(resolved)
    except OSError:
        return None
    return (resolved, st) if stat.S_ISREG(st.st_mode) else None


_DIGEST = frozenset("0123456789abcdef")


def layout_text(rel: str) -> bool:
    """Whether ``rel`` (below the scan root) is a text file of the cache layout itself,
    judged elsewhere or inert: ``<repo>/refs/<branch>`` (a commit hash), a
    ``<repo>/blobs/<sha>`` blob (judged under its snapshot link's name), the hub's
    ``version.txt``. ``<repo>`` is a ``models--*`` folder, or the scan root."""
    parts = rel.split("/")
    if parts == ["version.txt"]:
        return True
    for i, part in enumerate(parts[:-1]):
        if i and not parts[i - 1].startswith(_PREFIXES):
            continue
        if part == "refs":
            return True
        if part == "blobs" and len(parts) == i + 2 and len(parts[-1]) in (40, 64) and set(
                parts[-1]) <= _DIGEST:
            return True
    return False
