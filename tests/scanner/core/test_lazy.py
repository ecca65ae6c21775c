"""scanner.core.lazy: a deferred stdlib module runs its code on first real use only, and
an ``import`` statement (which reads ``__spec__``) does not count as use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from scanner.core.lazy import defer

PROBE = """
import sys
from scanner.core.lazy import defer
assert defer("http") and defer("http.client")
assert type(sys.modules["http"]).__name__ == "_Deferred"  # finding http.client: no load
assert not defer("http.client")          # already in sys.modules: nothing to do
import http.client                        # the import statement reads __spec__ only
from http import client as again
assert again is http.client
assert "email.parser" not in sys.modules  # http.client's own imports have not run
assert http.client.HTTPSConnection.__name__ == "HTTPSConnection"  # first use: loads
assert "email.parser" in sys.modules
assert type(sys.modules["http.client"]).__name__ == "module"
assert type(sys.modules["http"]).__name__ == "module"  # http.client imports from it
import http
assert http.HTTPStatus.OK == 200
from http.client import HTTPConnection
assert HTTPConnection.__module__ == "http.client"
print("ok")
"""


def test_a_deferred_module_loads_on_first_attribute_use_only() -> None:
    # A fresh interpreter: this one may have imported http.client already.
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_defer_leaves_imported_and_unknown_modules_alone() -> None:
    assert defer("json") is False  # imported by the scanner already
    assert defer("no_such_module_anywhere") is False
    assert "no_such_module_anywhere" not in sys.modules


def test_the_cli_scans_a_pickle_with_picklescan_without_loading_http_client(
        tmp_path: Path) -> None:
    """picklescan (the second opinion) imports http.client at its top; the CLI defers it
    and the scan never uses it."""
    import pickle

    (tmp_path / "model.pkl").write_bytes(pickle.dumps({"w": [1, 2, 3]}, protocol=2))
    code = ("import sys\n"
            "import scanner.cli\n"
            "scanner.cli.main(['--quiet', '--format', 'json', sys.argv[1]])\n"
            "print('PICKLESCAN', 'picklescan.scanner' in sys.modules,\n"
            "      type(sys.modules['http.client']).__name__)\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                          text=True, timeout=120, check=False)
    line = [x for x in done.stdout.splitlines() if x.startswith("PICKLESCAN")]
    assert line == ["PICKLESCAN True _Deferred"], done.stderr


def test_a_deferred_module_whose_code_fails_is_not_left_in_sys_modules(
        tmp_path: Path) -> None:
    (tmp_path / "broken_for_defer.py").write_text("x = 1\nraise RuntimeError('boom')\n")
    code = ("import sys\n"
            f"sys.path.insert(0, {str(tmp_path)!r})\n"
            "from scanner.core.lazy import defer\n"
            "assert defer('broken_for_defer')\n"
            "import broken_for_defer\n"
            "try:\n"
            "    broken_for_defer.x\n"
            "except RuntimeError as exc:\n"
            "    print('raised', exc, 'broken_for_defer' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.stdout.strip() == "raised boom False", done.stderr


def test_appliance_scan_as_the_process_command_defers_http_too(tmp_path: Path) -> None:
    """``appliance scan`` run as the process's command takes the same start-up path as
    ``python -m scanner`` (issue 30, fleet speed): picklescan's unused ``http`` imports
    stay deferred through a scan that runs picklescan."""
    import pickle

    (tmp_path / "model.pkl").write_bytes(pickle.dumps({"w": [1, 2, 3]}, protocol=2))
    code = ("import os, sys\n"
            "real_exit = os._exit\n"
            "def report(code):\n"
            "    print('PICKLESCAN', 'picklescan.scanner' in sys.modules,\n"
            "          type(sys.modules['http']).__name__, flush=True)\n"
            "    real_exit(code)\n"
            "os._exit = report\n"
            "sys.argv = ['appliance', 'scan', '--quiet', '--format', 'json', sys.argv[1]]\n"
            "from appliance.cli import main\n"
            "main()\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                          text=True, timeout=120, check=False)
    line = [x for x in done.stdout.splitlines() if x.startswith("PICKLESCAN")]
    assert line == ["PICKLESCAN True _Deferred"], done.stderr
