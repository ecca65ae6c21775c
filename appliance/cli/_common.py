"""Helpers shared by the command modules of :mod:`appliance.cli`."""

from __future__ import annotations

from pathlib import Path


def default_policy(name: str) -> Path:
    """Path of the shipped policy ``name``: packaged data, or the checkout's ``policies/``."""
    from appliance.resources import policy_path

    return policy_path(name)
