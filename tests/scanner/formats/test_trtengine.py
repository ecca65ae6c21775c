"""TensorRT engines: refused by policy (``format.tensorrt_not_allowed``); an engine that
carries a native shared library (a serialized plugin, loaded on deserialization: TensorRT
developer guide, "plugin shared libraries") is ``tensorrt.plugin_library`` (malicious).
Engines are written here as the ``ftrt`` tag plus bytes; no GPU or TensorRT is needed."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from scanner.api import scan_paths
from scanner.core.model import Verdict

HEADER = b"ftrt" + struct.pack("<II", 0, 239)
ELF_SO = b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x03\x00\x3e\x00" + bytes(44)  # ET_DYN x86-64
ELF32_BE = b"\x7fELF\x01\x02\x01" + bytes(9) + b"\x00\x03" + bytes(30)
MACHO_DYLIB = (b"\xcf\xfa\xed\xfe" + (0x0100000C).to_bytes(4, "little") + bytes(4)
               + (6).to_bytes(4, "little") + bytes(48))  # arm64 MH_DYLIB


def _pe() -> bytes:
    stub = bytearray(b"MZ" + bytes(126))
    stub[60:64] = (128).to_bytes(4, "little")
    return bytes(stub) + b"PE\x00\x00" + bytes(64)


def _scan(tmp_path: Path, name: str, data: bytes) -> tuple[Verdict | None, set[str]]:
    path = tmp_path / name
    path.write_bytes(data)
    (result,) = scan_paths([path]).targets
    return result.verdict, {f.rule_id for f in result.findings}


@pytest.mark.parametrize("name", ["model.engine", "model.plan", "model.trt"])
def test_engine_is_policy(tmp_path: Path, name: str) -> None:
    data = HEADER + bytes(range(256)) * 16 + b"MZ" + bytes(100)  # an MZ that is no PE
    assert _scan(tmp_path, name, data) == (Verdict.POLICY, {"format.tensorrt_not_allowed"})


@pytest.mark.parametrize("library", [ELF_SO, ELF32_BE, _pe(), MACHO_DYLIB],
                         ids=["elf64", "elf32be", "pe", "macho"])
@pytest.mark.parametrize("at", [100, (1 << 20) - 3])  # inside a window, across a boundary
def test_embedded_plugin_library_is_malicious(tmp_path: Path, library: bytes, at: int) -> None:
    data = HEADER + bytes(at) + library + bytes(256)
    verdict, rules = _scan(tmp_path, "model.engine", data)
    assert verdict is Verdict.MALICIOUS and "tensorrt.plugin_library" in rules, rules


def test_mz_without_pe_header_is_not_a_library(tmp_path: Path) -> None:
    data = HEADER + b"MZ" + bytes(200)
    assert _scan(tmp_path, "model.engine", data)[0] is Verdict.POLICY
