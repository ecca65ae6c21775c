"""``scanner.readers``, the public surface ``appliance`` builds on (issue 32): every name is
the scanner's own object (re-exported, not copied), and each is loaded on first use, so the
gateway's strict JSON parser does not bring in the pickle machine or the ZIP reader."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import scanner.readers as readers


@pytest.mark.parametrize("name", readers.__all__)
def test_each_name_is_the_scanner_object_it_names(name: str) -> None:
    module, attr = readers._SOURCES[name]
    assert getattr(readers, name) is getattr(importlib.import_module(module), attr)


def test_the_names_and_the_table_agree() -> None:
    assert sorted(readers.__all__) == sorted(readers._SOURCES) == dir(readers)
    with pytest.raises(AttributeError, match="no attribute 'Machine'"):
        readers.Machine  # noqa: B018  (only the public name)


def test_the_opcode_table_is_complete() -> None:
    """From ``ops``, not ``consts``: the structural opcodes (BUILD, REDUCE ...) are in it."""
    assert {ord(b"b"), ord(b"R"), ord(b"."), ord(b"\x80")} <= set(readers.PICKLE_OPCODES)


def test_strict_json_alone_loads_neither_the_pickle_machine_nor_the_zip_reader() -> None:
    code = ("import sys\nfrom scanner.readers import loads_strict\nimport appliance.gateway\n"
            "assert loads_strict(b'{\"a\": 1}') == {'a': 1}\n"
            "print(sorted(m for m in ('scanner.formats.pickle.vm', 'scanner.formats.ziplib')"
            " if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip() == "[]"
