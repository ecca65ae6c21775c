"""Loaders that try ``tarfile.open`` first (``scanner.scan.loaders``, ``tries_first``).

Source: torch/serialization.py ``_legacy_load`` -- ``torch.load(weights_only=False)`` of a
file that does not start with a zip local header calls ``tarfile.open(f, "r:")`` first and,
when that opens, unpickles the ``storages``, ``tensors`` and ``pickle`` members; NeMo
``restore_from`` opens ``.nemo`` files with ``tarfile.open(path, "r:")``. Red-team
findings M3 (``pytorch_model.bin`` that is a valid safetensors file *and* a legacy torch
tar: a v7 tar header with an empty name hidden in the JSON header, a ``storages`` member
holding ``os.system('id')`` in the tensor data) and M4 (the same shape named ``.nemo``,
member ``model_config.yaml`` with ``_target_: os.system``, first checksum written
``0o50447 ``): both scanned clean.

The polyglots are written byte by byte here (as the red-team's build scripts did) and
checked with the safetensors library's parser and ``tarfile``'s
member listing; nothing is extracted, unpickled or loaded.
"""

from __future__ import annotations

import io
import struct
import tarfile

import pytest
import safetensors.numpy

from scanner.core.context import ScanContext
from scanner.core.model import BytesBlob, Finding, Verdict, worst
from scanner.scan.dispatch import analyze_blob
from scanner.scan.loaders import LOADERS, TAR, loaders_for, readings
from scanner.scan.sniff import sniff

BLOCK = 512
STORAGES = b"cos\nsystem\n(S'id'\ntR."  # protocol-0 os.system('id'), never loaded
CONFIG = b"_target_: os.system\ncommand: id\n"


def ustar(name: bytes, size: int) -> bytes:
    h = bytearray(BLOCK)
    h[0:len(name)] = name
    h[100:108], h[108:116], h[116:124] = b"0000644\0", b"0000000\0", b"0000000\0"
    h[124:136], h[136:148] = b"%011o\0" % size, b"00000000000\0"
    h[148:156], h[156:157] = b" " * 8, b"0"
    h[257:265] = b"ustar\x0000"
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def safetensors_tar(member: bytes, payload: bytes, zero_o: bool = False,
                    tensor: bytes = b"w") -> bytes:
    """A valid safetensors file (one U8 tensor) that ``tarfile.open(f, "r:")`` lists as
    two members: a v7 header at offset 0 (header length 0x300, so the name is empty and
    there is no magic) whose fields sit inside a ``__metadata__`` string, then ``member``
    holding ``payload`` at offset 1024, in the tensor data. ``zero_o``: the first
    checksum is written ``0o...`` (red-team M4); ``tensor``: the tensor's name."""
    hlen = 0x300
    second = ustar(member, len(payload)) + payload.ljust(BLOCK, b"\0") + b"\0" * (2 * BLOCK)
    data = b"\0" * (1024 - 8 - hlen) + second
    prefix = b'{"__metadata__":{"p":"'
    start = 8 + len(prefix)
    content = bytearray(b" " * (200 - start))
    for at, value in ((100, b"0000644 "), (108, b"0000000 "), (116, b"0000000 "),
                      (124, b"00000001000 "), (136, b"00000000000 "), (148, b" " * 8),
                      (156, b"0")):
        content[at - start:at - start + len(value)] = value
    tail = b'"},"%s":{"dtype":"U8","shape":[%d],"data_offsets":[0,%d]}}' % (
        tensor, len(data), len(data))
    header = (prefix + bytes(content) + tail).ljust(hlen, b" ")
    blob = bytearray(struct.pack("<Q", hlen) + header + data)
    checksum = sum(blob[:148]) + 8 * 32 + sum(blob[156:512])
    blob[148:156] = (b"0o%05o " % checksum) if zero_o else (b"%06o  " % checksum)
    return bytes(blob)


def tar_members(data: bytes) -> list[str]:
    return tarfile.open(fileobj=io.BytesIO(data), mode="r:").getnames()  # listing only


def scan(name: str, data: bytes) -> list[Finding]:
    return analyze_blob(ScanContext(), BytesBlob(name, data))


def test_the_polyglot_is_valid_safetensors_and_a_tar_torch_load_would_open() -> None:
    data = safetensors_tar(b"storages", STORAGES)
    assert safetensors.numpy.load(data)["w"].size == len(data) - 8 - 0x300  # parser only
    assert tar_members(data)[1:] == ["storages"]
    assert data[0] == 0 and data[257:262] != b"ustar"  # empty name, no magic


def test_torch_legacy_load_tar_polyglot_pytorch_model_bin() -> None:
    """Red-team M3: torch.load unpickles the ``storages`` member; not clean, the pickle
    global named."""
    found = scan("pytorch_model.bin", safetensors_tar(b"storages", STORAGES))
    assert worst(found) is Verdict.MALICIOUS, found
    assert any(f.rule_id == "pickle.unsafe_global" and f.path == "pytorch_model.bin!storages"
               and "os.system" in f.evidence for f in found), found


def test_torch_legacy_load_tar_polyglot_0o_checksum_nemo() -> None:
    """Red-team M4: the same shape as ``.nemo`` with the first checksum written
    ``0o...``; NeMo's tarfile reads ``model_config.yaml``."""
    data = safetensors_tar(b"model_config.yaml", CONFIG, zero_o=True)
    assert data[148:150] == b"0o" and tar_members(data)[1:] == ["model_config.yaml"]
    found = scan("model.nemo", data)
    assert any(f.rule_id == "config.unsafe_target" and f.path == "model.nemo!model_config.yaml"
               for f in found), found


@pytest.mark.parametrize("name, loader", [("pytorch_model.bin", "torch.load"),
                                          ("model.nemo", "nemo restore_from")])
def test_torch_legacy_load_tar_tried_first_whatever_the_sniffed_format(
        name: str, loader: str) -> None:
    """A tar whose first member is named ``GGUF`` sniffs as GGUF (magic first); the
    loader still opens it as a tar, and the reading names the loader."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for member, data in (("GGUF", b"\x03\x00\x00\x00"), ("storages", STORAGES)):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    blob = BytesBlob(name, buf.getvalue())
    assert sniff(blob) == "gguf"
    assert readings(blob, sniff(blob)) == [(TAR, loader)]
    found = scan(name, buf.getvalue())
    evil = [f for f in found if f.verdict is Verdict.MALICIOUS]
    assert evil and all(f.message.startswith(f"read by {loader} as tar:") for f in evil)
    assert any(f.path == f"{name}!storages" and "os.system" in f.evidence for f in evil)
    # the reading's own format policy and walk findings count too (the loader opened it)
    assert any(f.rule_id == "format.tar_not_allowed" for f in found)


def test_torch_legacy_load_tar_polyglot_benign_safetensors_named_pytorch_model_bin() -> None:
    """A real safetensors file named ``pytorch_model.bin`` stays clean (tarfile refuses
    its first block: no tar reading), as it scanned before."""
    import numpy as np

    data = safetensors.numpy.save({"w": np.arange(300, dtype=np.float32)})
    blob = BytesBlob("pytorch_model.bin", data)
    assert sniff(blob) == "safetensors" and readings(blob, "safetensors") == []
    assert scan("pytorch_model.bin", data) == []


def test_torch_legacy_load_tar_polyglot_benign_members_are_the_tar_policy_only() -> None:
    """The same polyglot shape holding a benign ``storages`` pickle (an empty dict):
    torch.load reads a legacy tar checkpoint, which is refused as a tar, nothing more."""
    found = scan("pytorch_model.bin", safetensors_tar(b"storages", b"}."))
    assert worst(found) is Verdict.POLICY, found
    assert not any(f.verdict is Verdict.MALICIOUS for f in found)


def test_torch_legacy_load_tar_member_names_are_read_as_pickles() -> None:
    """``_legacy_load`` unpickles ``storages``, ``tensors`` and ``pickle`` at the
    archive's root whatever their bytes; other paths are not that loader's."""
    member = "torch.load (legacy tar member)"
    assert any(r.name == member for r in LOADERS)
    for path in ("m.bin!storages", "m.bin!tensors", "m.bin!pickle", "a.nemo!x.ckpt!pickle"):
        assert member in [r.name for r in loaders_for(path)], path
    for path in ("m.bin!dir/storages", "storages", "m.bin!storages.txt"):
        assert member not in [r.name for r in loaders_for(path)], path


def test_torch_legacy_load_tar_polyglot_named_safetensors_is_still_read_as_safetensors() -> None:
    """Sniffed as a tar now, the polyglot named ``model.safetensors`` is still what
    ``safetensors.safe_open`` reads: a tensor name that is a path is still found."""
    data = safetensors_tar(b"storages", b"}.", tensor=b"../../evil")
    assert sniff(BytesBlob("model.safetensors", data)) == "tar"
    assert list(safetensors.numpy.load(data)) == ["../../evil"]  # parser only
    found = scan("model.safetensors", data)
    assert any(f.rule_id == "name.path_escape"
               and f.message.startswith("read by safetensors.safe_open as safetensors:")
               for f in found), found
