import pytest
from _deploy import build_bundle, require_deploy_tests


@pytest.fixture(scope="session")
def bundle():  # type: ignore[no-untyped-def]
    """The air-gap bundle, built once per session (skips unless deploy tests are on)."""
    require_deploy_tests()
    return build_bundle()
