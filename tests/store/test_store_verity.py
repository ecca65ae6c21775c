"""fs-verity path of import and the serve-start check.

The development kernel has no fs-verity (``FS_IOC_ENABLE_VERITY`` -> EOPNOTSUPP even on a
loop-mounted ``mkfs.ext4 -O verity`` image), so the ioctl wrappers are tested for their
"unsupported" answers here, and the store logic runs against a stand-in kernel that measures
a file as SHA-256 of its bytes. ``test_real_fs_verity`` runs where the kernel has it (root,
``mkfs.ext4``, loop devices)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from store_helpers import Signer, make_model

from appliance.errors import ApplianceError
from appliance.signing import sign
from appliance.store import Store, _verity, import_model, open_for_serve
from appliance.store._layout import Ref


def test_wrappers_report_unsupported_here(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x")
    fd = os.open(path, os.O_RDONLY)
    try:
        if _verity.enable(fd):
            pytest.skip("this filesystem supports fs-verity")
        assert _verity.measure(fd) is None
    finally:
        os.close(fd)


@pytest.fixture
def fake_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    def measure(fd: int) -> str:
        return "sha256:" + hashlib.sha256(os.pread(fd, 1 << 30, 0)).hexdigest()

    monkeypatch.setattr(_verity, "enable", lambda fd: True)
    monkeypatch.setattr(_verity, "measure", measure)


@pytest.mark.usefixtures("fake_kernel")
def test_verity_digests_recorded_and_compared(store: Store, source: Path,
                                              signer: Signer) -> None:
    model = import_model(store, source, signer.trust).path / "model"
    served = open_for_serve(store, Ref("src"), signer.trust)
    assert served.method == "fs-verity"
    target = model / "config.json"
    os.chmod(model, 0o755)
    os.chmod(target, 0o644)
    data = bytearray(target.read_bytes())
    data[2] ^= 1
    with open(target, "r+b") as handle:
        handle.write(data)
    os.chmod(target, 0o444)
    os.chmod(model, 0o555)
    with pytest.raises(ApplianceError) as info:
        open_for_serve(store, Ref("src"), signer.trust)
    assert (info.value.code, info.value.where) == ("store_file_changed", "config.json")
    assert "fs-verity digest" in info.value.message


def _verity_mount(tmp_path: Path) -> Path | None:
    if os.geteuid() != 0 or shutil.which("mkfs.ext4") is None:
        return None
    image, mnt = tmp_path / "v.img", tmp_path / "mnt"
    mnt.mkdir()
    with open(image, "wb") as handle:
        handle.truncate(64 << 20)
    if subprocess.run(["mkfs.ext4", "-q", "-O", "verity", str(image)],
                      capture_output=True).returncode != 0:
        return None
    if subprocess.run(["mount", "-o", "loop", str(image), str(mnt)],
                      capture_output=True).returncode != 0:
        return None
    probe = mnt / "probe"
    probe.write_bytes(b"x")
    fd = os.open(probe, os.O_RDONLY)
    try:
        ok = _verity.enable(fd)
    finally:
        os.close(fd)
    if not ok:
        subprocess.run(["umount", str(mnt)], check=False)
        return None
    return mnt


def test_real_fs_verity(tmp_path: Path, signer: Signer) -> None:
    mnt = _verity_mount(tmp_path)
    if mnt is None:
        pytest.skip("no fs-verity here (needs root, loop devices and a kernel with "
                    "CONFIG_FS_VERITY; this project's machine has none)")
    try:
        src = make_model(tmp_path, "v")
        sign(src, signer.private)
        store = Store(mnt / "store")
        import_model(store, src, signer.trust)
        assert open_for_serve(store, Ref("v"), signer.trust).method == "fs-verity"
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
