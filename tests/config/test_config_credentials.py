"""``${CREDENTIALS_DIRECTORY}/NAME`` is read one way for every secret file a policy names
(admission keys file and Redis files, the cluster secret, the audit signing key)."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.config.base import expand_credential

ENV = {"CREDENTIALS_DIRECTORY": "/run/credentials/appliance.service"}


def test_a_plain_name_is_expanded_and_other_paths_are_unchanged() -> None:
    assert expand_credential(Path("${CREDENTIALS_DIRECTORY}/keys.json"), "k", ENV) == Path(
        "/run/credentials/appliance.service/keys.json")
    assert expand_credential(Path("/etc/appliance/keys.json"), "k", ENV) == Path(
        "/etc/appliance/keys.json")
    assert expand_credential(Path("keys.json"), "k", ENV) == Path("keys.json")


@pytest.mark.parametrize("text", [
    "${CREDENTIALS_DIRECTORY}/../../etc/shadow", "${CREDENTIALS_DIRECTORY}/sub/key",
    "${CREDENTIALS_DIRECTORY}/..", "${CREDENTIALS_DIRECTORY}/", "${CREDENTIALS_DIRECTORY}x",
])
def test_a_credential_never_leaves_its_folder(text: str) -> None:
    with pytest.raises(ValueError, match="plain file name"):
        expand_credential(Path(text), "cluster.secret_file", ENV)


def test_an_unset_variable_names_the_key() -> None:
    with pytest.raises(ValueError, match="audit.signing_key uses"):
        expand_credential(Path("${CREDENTIALS_DIRECTORY}/audit.key"), "audit.signing_key", {})
