"""Where the shipped policies and advisories live, whatever the install.

A wheel carries ``policies/`` as package data at ``appliance/data/`` (copied there by the
build step in ``setup.py``); a source checkout or an editable install has no such folder and
uses the top-level ``policies/`` next to the package. ``data_dir() -> Path`` picks the first
that exists, so every command works from a plain wheel install in any working directory.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

PACKAGED = "data"
SOURCE_TREE = Path(__file__).resolve().parent.parent / "policies"


def data_dir() -> Path:
    """Folder holding ``default.toml``, ``cpu-demo.toml`` and ``advisories.json``.

    The packaged copy wins; the source tree's ``policies/`` is the fallback. When neither
    exists the packaged path is returned, so the caller's error names where it looked."""
    packaged = Path(str(files("appliance").joinpath(PACKAGED)))
    if packaged.is_dir() or not SOURCE_TREE.is_dir():
        return packaged
    return SOURCE_TREE


def policy_path(name: str) -> Path:
    """Path of the shipped policy ``name`` (e.g. ``"cpu-demo.toml"``)."""
    return data_dir() / name
