"""The one strict base of every policy table: unknown keys refused, values frozen.

``StrictModel`` is a pydantic ``BaseModel`` with ``extra="forbid"`` (a misspelt key is an
error naming the key, never silently ignored) and ``frozen=True`` (a loaded policy is never
mutated; ``model_copy(update=...)`` makes resolved copies). Beside it,
:func:`expand_credential`, the one reading of ``${CREDENTIALS_DIRECTORY}/NAME`` for the
tables that name secret files (admission, cluster, audit).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict

CREDENTIALS_VAR = "${CREDENTIALS_DIRECTORY}"


def expand_credential(value: Path, key: str, env: Mapping[str, str] | None = None) -> Path:
    """``value`` with a leading ``${CREDENTIALS_DIRECTORY}/NAME`` replaced by the folder
    systemd gives a unit's ``LoadCredential=`` files; any other path unchanged.

    ``NAME`` must be a plain file name (no ``/``, ``.`` or ``..``: a credential never
    leaves its folder), as the TLS files' reading (:mod:`.tls`) requires too. Raises
    ``ValueError`` naming ``key`` when the variable is unset or ``NAME`` is not plain."""
    text = str(value)
    if not text.startswith(CREDENTIALS_VAR):
        return value
    environ = os.environ if env is None else env
    folder = environ.get("CREDENTIALS_DIRECTORY", "")
    if not folder:
        raise ValueError(f"{key} uses {CREDENTIALS_VAR} but it is unset (not started by "
                         "systemd with LoadCredential=)")
    name = text[len(CREDENTIALS_VAR):].removeprefix("/")
    if not text[len(CREDENTIALS_VAR):].startswith("/") or not name or "/" in name \
            or name in (".", ".."):
        raise ValueError(f"{key}: {text!r} is not {CREDENTIALS_VAR}/NAME with a plain file "
                         "name")
    return Path(folder) / name


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
