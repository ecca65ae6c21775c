"""The store's ownership model at serve time (issue 8): a store owned by the serving user is
refused (``store_owned_by_server``: the owner can chmod a 0444 file back and rewrite it),
group/other write bits are refused (``store_writable``), root is exempt with a warning, and a
root-owned read-only store is served by an unprivileged user.

The real-uid tests need root (to ``chown`` the store and start a child as another uid with
``subprocess``'s ``user=``/``group=``); without it they skip with the reason. The check
itself (``_ownership.check_served_version``) is tested for any user.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_helpers import Signer, make_model

from appliance.errors import ApplianceError
from appliance.signing import TrustedKey, TrustStore, sign
from appliance.store import Store, import_model, served_folder
from appliance.store._ownership import OWNER_WARNING, ROOT_WARNING, check_served_version

REPO = Path(__file__).resolve().parents[2]
SERVER_UID = 4242  # an unprivileged uid with no passwd entry: nobody else owns its files
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: chown the store to "
                                "another uid and run a child process as that uid")


def _chown_tree(path: Path, uid: int) -> None:
    os.chown(path, uid, uid, follow_symlinks=False)
    for folder, dirs, files in os.walk(path):
        for name in dirs + files:
            os.chown(os.path.join(folder, name), uid, uid, follow_symlinks=False)


@pytest.fixture
def world(tmp_path: Path, signer: Signer) -> Iterator[Path]:
    """A folder every uid can traverse (tmp_path is 0700): the store, a copy of the trust
    key, a serve policy and an API key file."""
    base = Path(tempfile.mkdtemp(prefix="appliance-owner-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        public = base / "release.pub"
        shutil.copyfile(signer.public, public)
        os.chmod(public, 0o644)
        source = make_model(tmp_path, "src")
        (source / "chat_template.jinja").write_text("{{ messages }}")
        sign(source, signer.private)
        import_model(Store(base / "store"), source, _trust(public))
        (base / "policy.toml").write_text(
            f'[store]\nroot = "{base / "store"}"\n[[trust.keys]]\nname = "release"\n'
            f'public_key = "{public}"\nalgorithm = "P-384"\n')
        (base / "api-keys").write_text("k" * 32 + "\n")
        for name in ("policy.toml", "api-keys"):
            os.chmod(base / name, 0o644)
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _trust(public: Path) -> TrustStore:
    return TrustStore((TrustedKey("release", public, "P-384", None,
                                  dt.datetime.now(dt.UTC) + dt.timedelta(days=1)),))


def _version(base: Path) -> Path:
    store = Store(base / "store")
    return store.version_dir("src", store.read_state("src")["current"])


CHILD = r'''
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
base = Path(sys.argv[2])
out = {}
if sys.argv[3] == "serve":  # the real `appliance serve` command line, store form
    from appliance.cli import main
    out["rc"] = main(["serve", "--model", "src", "--policy", str(base / "policy.toml"),
                      "--api-key-file", str(base / "api-keys")])
else:  # the serve-start store check alone (the engine is not started as this uid)
    import datetime as dt
    from appliance.errors import ApplianceError
    from appliance.signing import TrustedKey, TrustStore
    from appliance.store import served_folder
    trust = TrustStore((TrustedKey("release", base / "release.pub", "P-384", None,
                                   dt.datetime.now(dt.UTC) + dt.timedelta(days=1)),))
    try:
        served = served_folder(base / "store", "src", trust,
                               allow_owner=sys.argv[3] == "check-allow-owner")
        out.update(code="ok", method=served.method, warnings=list(served.warnings))
    except ApplianceError as exc:
        out.update(code=exc.code, where=exc.where)
import os
out["euid"] = os.geteuid()
print("RESULT " + json.dumps(out), flush=True)
'''


def _interpreter_reachable() -> bool:
    """True when every folder above this interpreter is searchable by others (o+x)."""
    real = Path(os.path.realpath(sys.executable))
    return all(os.stat(folder).st_mode & 0o001 for folder in real.parents)


def _as_server(base: Path, mode: str) -> tuple[dict[str, object], str]:
    """Run CHILD as SERVER_UID (no groups); (its result, its stderr).

    Where this interpreter lives under a folder other users cannot search (pyenv under
    /root, 0700) the child keeps one ambient capability, ``CAP_DAC_READ_SEARCH``, through
    ``setpriv``: it can then read the interpreter, and still writes and owns nothing as
    root — the checks under test look at its effective uid and at mode bits, not at access.
    """
    prefix: list[str] = []
    if not _interpreter_reachable():
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("this interpreter is not readable by another uid and setpriv "
                        "(util-linux) is missing")
        prefix = [setpriv, f"--reuid={SERVER_UID}", f"--regid={SERVER_UID}", "--clear-groups",
                  "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(base),
           "XDG_STATE_HOME": str(base / "state"), "LANG": "C.UTF-8"}
    ids: dict[str, object] = {} if prefix else {
        "user": SERVER_UID, "group": SERVER_UID, "extra_groups": []}
    proc = subprocess.run(  # noqa: S603 - fixed argv
        [*prefix, sys.executable, "-c", CHILD, str(REPO), str(base), mode], env=env,
        cwd=base, capture_output=True, text=True, timeout=120, check=False,
        **ids)  # type: ignore[call-overload]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, (proc.returncode, proc.stdout, proc.stderr)
    result: dict[str, object] = json.loads(lines[-1][len("RESULT "):])
    assert result.pop("euid") == SERVER_UID
    return result, proc.stderr


# -- any user -----------------------------------------------------------------------------
def test_paths_owned_by_the_serving_uid_refused(store: Store, source: Path,
                                                signer: Signer) -> None:
    version = import_model(store, source, signer.trust).path
    euid = os.geteuid()
    if euid == 0:  # play an unprivileged serving user: give it one file of the version
        euid = SERVER_UID
        os.chown(version / "model" / "sub" / "tokenizer.json", euid, euid)
    with pytest.raises(ApplianceError) as info:
        check_served_version(store.root, "src", version.name, euid=euid)
    assert info.value.code == "store_owned_by_server"
    assert info.value.fix and "chown" in info.value.fix
    # an uid that owns nothing here passes
    assert check_served_version(store.root, "src", version.name, euid=euid + 1) == []


def test_root_is_exempt_with_a_warning(store: Store, source: Path, signer: Signer) -> None:
    version = import_model(store, source, signer.trust).path
    assert check_served_version(store.root, "src", version.name, euid=0) == [ROOT_WARNING]


def test_allow_owner_serve_skips_the_uid_rule_with_a_warning(store: Store, source: Path,
                                                             signer: Signer) -> None:
    version = import_model(store, source, signer.trust).path
    owner = os.lstat(version).st_uid or SERVER_UID
    if owner == SERVER_UID:
        _chown_tree(store.root, SERVER_UID)
    assert check_served_version(store.root, "src", version.name, euid=owner,
                                allow_owner=True) == [OWNER_WARNING]
    os.chmod(version / "record.json", 0o644)
    with pytest.raises(ApplianceError) as info:  # the mode rules still apply
        check_served_version(store.root, "src", version.name, euid=owner, allow_owner=True)
    assert info.value.code == "store_writable"


def test_allow_owner_serve_policy_key(tmp_path: Path) -> None:
    from appliance.config.policy import load_policy

    (tmp_path / "p.toml").write_text('[store]\nroot = "s"\nallow_owner_serve = true\n')
    store = load_policy(tmp_path / "p.toml").store
    assert store.allow_owner_serve and store.root == tmp_path.resolve() / "s"
    (tmp_path / "p.toml").write_text('[store]\nroot = "s"\n')
    assert not load_policy(tmp_path / "p.toml").store.allow_owner_serve


@pytest.mark.parametrize("where", ["root", "name", "state", "version", "record"])
def test_group_or_other_writable_store_paths_refused(store: Store, source: Path,
                                                     signer: Signer, where: str) -> None:
    version = import_model(store, source, signer.trust).path
    path = {"root": store.root, "name": version.parent, "state": version.parent / "state.json",
            "version": version, "record": version / "record.json"}[where]
    os.chmod(path, os.stat(path).st_mode | 0o020)
    with pytest.raises(ApplianceError) as info:
        served_folder(store.root, "src", signer.trust, allow_owner=True)  # any user
    assert (info.value.code, info.value.where) == ("store_writable", str(path))


def test_sticky_world_writable_ancestor_accepted_plain_one_refused(
        tmp_path: Path, source: Path, signer: Signer) -> None:
    parent = tmp_path / "shared"
    parent.mkdir()
    store = Store(parent / "store")
    version = import_model(store, source, signer.trust).path
    os.chmod(parent, 0o1777)  # like /tmp
    assert served_folder(store.root, "src", signer.trust,
                         allow_owner=True).path == version / "model"
    os.chmod(parent, 0o777)  # anyone may rename the store away and put another in its place
    with pytest.raises(ApplianceError) as info:
        served_folder(store.root, "src", signer.trust, allow_owner=True)
    assert (info.value.code, info.value.where) == ("store_writable", str(parent))


# -- a real unprivileged serving process (root only) ------------------------------------
@needs_root
@pytest.mark.parametrize("owned", ["root", "name", "version", "model.sig", "sub",
                                   "sub/tokenizer.json"])
def test_store_owned_by_the_serving_user_refused(world: Path, owned: str) -> None:
    version = _version(world)
    path = {"root": world / "store", "name": version.parent, "version": version,
            "model.sig": version / "model.sig"}.get(owned, version / "model" / owned)
    os.chown(path, SERVER_UID, SERVER_UID)
    result, _ = _as_server(world, "check")
    assert result == {"code": "store_owned_by_server", "where": str(path)}


@needs_root
def test_serve_command_refuses_a_store_owned_by_the_serving_user(world: Path) -> None:
    _chown_tree(world / "store", SERVER_UID)  # imported, then handed to the serving user
    result, err = _as_server(world, "serve")
    assert result == {"rc": 1}
    assert "error[store_owned_by_server]" in err and str(world / "store") in err
    assert "engine: starting" not in err  # refused before any engine start


@needs_root
def test_allow_owner_serve_accepts_the_serving_users_store_with_a_warning(world: Path) -> None:
    _chown_tree(world / "store", SERVER_UID)
    result, _ = _as_server(world, "check-allow-owner")
    assert result["code"] == "ok" and result["warnings"] == [OWNER_WARNING]


@needs_root
def test_write_bits_still_refused_for_the_serving_user(world: Path) -> None:
    target = _version(world) / "model" / "config.json"
    os.chmod(target, 0o666)
    result, _ = _as_server(world, "check")
    assert result == {"code": "store_writable", "where": "config.json"}


@needs_root
def test_root_owned_read_only_store_served_by_an_unprivileged_user(world: Path) -> None:
    result, _ = _as_server(world, "check")
    assert result["code"] == "ok" and result["warnings"] == []
    assert result["method"] in ("sha256-parallel", "fs-verity")
