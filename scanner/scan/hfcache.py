"""The Hugging Face cache layout: ``models--org--name/snapshots/<rev>/<file>`` is a
relative symlink to ``../../blobs/<sha>`` (huggingface_hub ``file_download``).

A link that resolves to a regular file in the repository's own ``blobs/`` folder is
judged as that file (its content analysed under the link's name), not reported as a link:
the loader reads exactly that blob. Anything else (absolute targets, links leaving the
repository, targets that are not regular files) stays a ``fs.symlink*`` finding. The
repository is the scan root when it is a ``models--*``/``datasets--*``/``spaces--*``
folder, or the one two levels above a ``snapshots/<rev>`` root.
"""

from __future__ import annotations

import os
import posixpath
import stat

from scanner.core.fs import read_link

_PREFIXES = ("models--", "datasets--", "spaces--")


def repository(root: str) -> str | None:
    """The real path of the HF cache repository holding ``root``, or ``None``."""
    real = os.path.realpath(root)
    if os.path.basename(real).startswith(_PREFIXES):
        return real
    parent = os.path.dirname(real)
    repo = os.path.dirname(parent)
    if os.path.basename(parent) == "snapshots" and os.path.basename(repo).startswith(_PREFIXES):
        return repo
    return None


def blob_target(root: str, rel: str, dir_fd: int | None,
                name: str) -> tuple[str, os.stat_result] | None:
    """(real path, lstat) of the blob a cache-layout link points to, or ``None``."""
    text = read_link(dir_fd, name)
    if text is None or posixpath.isabs(text) or "\x00" in text:
        return None
    repo = repository(root)
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
