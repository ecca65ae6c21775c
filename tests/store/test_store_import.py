"""Import: verify while copying, layout and modes, atomic commit, refusals leave the store
unchanged (plain files only, untrusted, disk full, interrupted), concurrent imports."""

from __future__ import annotations

import errno
import os
import stat
import threading
from pathlib import Path

import pytest
from store_helpers import Signer, make_model

from appliance.errors import ApplianceError
from appliance.signing import TrustStore, sign
from appliance.store import Store, import_model, open_for_serve
from appliance.store import _import as import_module
from appliance.store._layout import Ref


def _visible(store: Store) -> list[str]:
    """Everything in the store except its lock and (empty) temp folder."""
    out = []
    for root, dirs, files in os.walk(store.root):
        rel = os.path.relpath(root, store.root)
        out += [os.path.join(rel, n) for n in dirs + files]
    return sorted(p for p in out if p not in ("./.lock", "./.tmp"))


def _refused(store: Store, src: Path, trust: object, code: str) -> ApplianceError:
    before = _visible(store) if store.root.exists() else []
    with pytest.raises(ApplianceError) as info:
        import_model(store, src, trust)  # type: ignore[arg-type]
    assert info.value.code == code, info.value.diagnostics()
    assert (_visible(store) if store.root.exists() else []) == before
    assert not any((store.root / ".tmp").iterdir()) if (store.root / ".tmp").exists() else True
    return info.value


def test_import_layout_modes_and_record(store: Store, source: Path, signer: Signer) -> None:
    done = import_model(store, source, signer.trust)
    assert done.new and done.name == "src"
    version = store.root / "src" / done.digest
    assert done.path == version and done.digest == done.manifest.root_digest
    assert sorted(os.listdir(version)) == ["model", "model.sig", "record.json"]
    assert (version / "model.sig").read_bytes() == (source / "model.sig").read_bytes()
    for root, dirs, files in os.walk(version):
        assert stat.S_IMODE(os.stat(root).st_mode) == 0o555
        for name in files:
            assert stat.S_IMODE(os.stat(os.path.join(root, name)).st_mode) == 0o444
    model = version / "model"
    assert sorted(p.relative_to(model).as_posix() for p in model.rglob("*") if p.is_file()) == [
        "config.json", "model.safetensors", "sub/tokenizer.json"]
    assert store.read_state("src") == {"current": done.digest, "history": []}
    served = open_for_serve(store, Ref("src"), signer.trust)
    assert served.path == model and served.method in ("sha256-parallel", "fs-verity")


def test_import_again_is_idempotent(store: Store, source: Path, signer: Signer) -> None:
    first = import_model(store, source, signer.trust)
    again = import_model(store, source, signer.trust, name="src")
    assert (first.new, again.new) == (True, False) and first.digest == again.digest
    assert store.versions("src") == [first.digest]


@pytest.mark.parametrize("make, code", [
    (lambda m, t: os.link(m / "config.json", t / "outside.json"), "hard_link_not_allowed"),
    (lambda m, t: (m / "link.json").symlink_to("config.json"), "symlink_not_allowed"),
    (lambda m, t: os.mkfifo(m / "fifo"), "special_file"),
])
def test_plain_files_only_at_import(store: Store, source: Path, signer: Signer,
                                    tmp_path: Path, make: object, code: str) -> None:
    make(source, tmp_path)  # type: ignore[operator]
    _refused(store, source, signer.trust, code)


def test_untrusted_and_revoked_signers_refused(store: Store, source: Path, signer: Signer,
                                               tmp_path: Path) -> None:
    from appliance.signing import keygen

    keygen(tmp_path / "o.pem", tmp_path / "o.pub")
    other = TrustStore.single(tmp_path / "o.pub")
    _refused(store, source, other, "key_untrusted")
    from appliance.signing import fingerprint, load_public_key

    revoked = TrustStore(signer.trust.keys, frozenset({fingerprint(load_public_key(
        signer.public))}))
    err = _refused(store, source, revoked, "key_revoked")
    assert "'release'" in err.message


def test_tampered_source_refused_while_copying(store: Store, source: Path,
                                               signer: Signer) -> None:
    (source / "config.json").write_text('{"model_type": "evil"}\n')
    _refused(store, source, signer.trust, "digest_mismatch")


def test_disk_full_before_copy(store: Store, source: Path, signer: Signer,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    class Tiny:
        f_bavail, f_frsize = 1, 1

    store.ensure()
    monkeypatch.setattr(import_module.os, "statvfs", lambda _p: Tiny)
    err = _refused(store, source, signer.trust, "store_disk_full")
    assert "GB free" in err.message


def test_disk_full_while_copying(store: Store, source: Path, signer: Signer,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.write

    def full(fd: int, data: object) -> int:
        if os.fstat(fd).st_size > 0 or len(data) > 40:  # type: ignore[arg-type]
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)  # type: ignore[arg-type]

    store.ensure()
    monkeypatch.setattr(import_module.os, "write", full)
    err = _refused(store, source, signer.trust, "store_disk_full")
    assert err.fix and "free space" in err.fix


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_disk_full_on_a_real_small_filesystem(tmp_path: Path, signer: Signer) -> None:
    import subprocess

    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount tmpfs here")
    try:
        src = make_model(tmp_path, "big", weights=os.urandom(3 << 20))
        sign(src, signer.private)
        store = Store(mnt / "store")
        err = _refused(store, src, signer.trust, "store_disk_full")
        assert err.code == "store_disk_full"
        assert store.versions("big") == []
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_interrupted_import_leaves_nothing(store: Store, source: Path, signer: Signer,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*_a: object, **_k: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(import_module, "hash_shards", interrupted)
    with pytest.raises(KeyboardInterrupt):
        import_model(store, source, signer.trust)
    assert _visible(store) == [] and not any((store.root / ".tmp").iterdir())


def test_concurrent_imports_of_one_model(store: Store, source: Path, signer: Signer) -> None:
    results: list[object] = []
    barrier = threading.Barrier(4)

    def run() -> None:
        barrier.wait()
        try:
            results.append(import_model(store, source, signer.trust))
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            results.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    digests = {r.digest for r in results}  # type: ignore[attr-defined]
    assert len(results) == 4 and len(digests) == 1
    assert sum(r.new for r in results) >= 1  # type: ignore[attr-defined]
    assert store.versions("src") == list(digests)
    assert not any((store.root / ".tmp").iterdir())
    open_for_serve(store, Ref("src"), signer.trust)


def test_bad_name_refused(store: Store, source: Path, signer: Signer) -> None:
    with pytest.raises(ApplianceError) as info:
        import_model(store, source, signer.trust, name="../x")
    assert info.value.code == "store_bad_name"


def test_killed_import_leftovers_swept_by_next_import(store: Store, source: Path,
                                                      signer: Signer) -> None:
    import fcntl

    from appliance.store._import import sweep_stale

    store.ensure()
    dead = store.root / ".tmp" / "import-src-dead"
    (dead / "model").mkdir(parents=True)
    (dead / "model" / "x").write_bytes(b"partial")
    os.chmod(dead / "model", 0o555)
    live = store.root / ".tmp" / "import-src-live"
    live.mkdir()
    fd = os.open(f"{live}.busy", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a concurrent import still running
    try:
        import_model(store, source, signer.trust)
        assert not dead.exists() and live.exists()
    finally:
        os.close(fd)
    with store.lock():
        assert sweep_stale(store) == ["import-src-live"]
    assert sorted(os.listdir(store.root / ".tmp")) == []
