"""``appliance convert`` refuses what it must not convert, writes nothing, and shows the
finding: every malicious pickle-bearing file of the shared corpus, the public scanner bug
inputs, and checkpoints the scanner calls ``policy`` but the converter's narrower
allowlist (tensor rebuilds, storages, OrderedDict) does not accept."""

from __future__ import annotations

import collections
import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from _shared import CORPUS
from _shared import PUBLIC_BUGS as PUBLIC_BUGS_FILE
from convert_helpers import main_pickle, write, zip_bytes

from appliance.cli import main
from appliance.convert import ConvertError, convert
from scanner.core.model import Verdict

FILES = CORPUS / "files"
CASES: list[dict[str, Any]] = json.loads((CORPUS / "cases.json").read_text())["cases"]
PICKLE_FORMATS = {"pickle", "torch-zip", "torch-legacy", "zip", "joblib", "npy", "npz"}
MALICIOUS = [c for c in CASES if c["kind"] == "malicious" and c["format"] in PICKLE_FORMATS]
PUBLIC_BUGS = ("pickle-memo-confusion", "pickle-allowlisted-module-build",
               "pickle-container-evasion")


def _refused(src: Path, tmp_path: Path) -> ConvertError:
    """Convert ``src`` into tmp_path/out: must be refused, leaving tmp_path as it was."""
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(ConvertError) as info:
        convert(src, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no out, no temp folder
    err = info.value
    assert err.code == "convert_refused" and err.findings, err.diagnostics()
    text = err.diagnostics()
    assert "error[convert_refused]" in text
    for finding in err.findings:
        assert f"error[{finding.rule_id}]" in text
    return err


def test_the_corpus_has_the_malicious_pickles() -> None:
    assert len(MALICIOUS) >= 35


@pytest.mark.parametrize("case", MALICIOUS, ids=[c["id"] for c in MALICIOUS])
def test_malicious_corpus_case_is_refused(case: dict[str, Any], tmp_path: Path) -> None:
    src = shutil.copy(FILES / case["path"], tmp_path / Path(case["path"]).name)
    err = _refused(Path(src), tmp_path)
    assert max(f.verdict for f in err.findings) is Verdict.MALICIOUS


def _public_inputs(bug: str, out: Path) -> list[Path]:
    for line in PUBLIC_BUGS_FILE.read_text().splitlines():
        case = json.loads(line)
        if case["id"] == bug:
            scope: dict[str, Any] = {}
            exec(case["input"]["code"], scope)  # the case's own generator (writes bytes)
            return [Path(p) for p in scope["make"](out)]
    raise AssertionError(f"public bug {bug} not found")


@pytest.mark.parametrize("bug", PUBLIC_BUGS)
def test_public_bug_inputs_are_refused(bug: str, tmp_path: Path) -> None:
    made = tmp_path / "made"
    made.mkdir()
    paths = _public_inputs(bug, made)
    assert paths
    for i, path in enumerate(paths):
        work = tmp_path / f"w{i}"
        work.mkdir()
        src = Path(shutil.copy(path, work / path.name))
        err = _refused(src, work)
        assert max(f.verdict for f in err.findings) >= Verdict.MALFORMED


# -- policy for the scanner, refused by the converter's own allowlist ----------------

class _Numpy:
    def __reduce__(self) -> tuple[Any, ...]:
        import numpy as np

        return (np.dtype, ("f4",))


def _odd_pickles() -> dict[str, bytes]:
    """Pickles made only of scanner-allowlisted names that are not plain tensor dicts."""
    cases: dict[str, Any] = {
        "numpy value": {"w": _Numpy()},
        "torch.Size call": {"shape": torch.Size([2, 3])},
        "set of ints": {"s": {1, 2}},
        "a list holding itself": None,
    }
    out = {}
    for name, obj in cases.items():
        if obj is None:
            loop: list[Any] = []
            loop.append(loop)
            obj = {"loop": loop}
        out[name] = obj
    return {n: _pickle_with_storages(o) for n, o in out.items()}


def _pickle_with_storages(obj: Any) -> bytes:
    return main_pickle(obj, legacy=False)


@pytest.mark.parametrize("name", ["numpy value", "torch.Size call", "set of ints",
                                  "a list holding itself"])
def test_scanner_policy_but_not_a_tensor_dict_is_refused(name: str, tmp_path: Path) -> None:
    body = _odd_pickles()[name]
    src = write(tmp_path / "odd.pt", zip_bytes(pickle_bytes=body))
    err = _refused(src, tmp_path)
    assert {f.rule_id for f in err.findings} & {"convert.unsupported_call",
                                                 "convert.unsupported_value",
                                                 "pickle.framework_global"}, err.diagnostics()


def test_whole_module_pickle_is_refused(tmp_path: Path) -> None:
    torch.save(torch.nn.Linear(2, 2), tmp_path / "module.pt")
    err = _refused(tmp_path / "module.pt", tmp_path)
    assert "pickle.framework_global" in {f.rule_id for f in err.findings} or any(
        f.verdict is Verdict.MALICIOUS for f in err.findings)


def test_storage_outside_the_archive_is_refused(tmp_path: Path) -> None:
    data = zip_bytes({"a": torch.ones(4)})
    # rename the storage member: the persistent id names key '0', the archive holds '9'
    data = data.replace(b"archive/data/0", b"archive/data/9")
    err = _refused(write(tmp_path / "m.pt", data), tmp_path)
    assert "convert.bad_storage" in {f.rule_id for f in err.findings}


def test_view_past_its_storage_is_refused(tmp_path: Path) -> None:
    bigger = zip_bytes({"a": torch.ones(4)}, shape=(9,))
    err = _refused(write(tmp_path / "m.pt", bigger), tmp_path)
    assert "convert.bad_view" in {f.rule_id for f in err.findings}


def test_storage_size_disagreeing_with_its_member_is_refused(tmp_path: Path) -> None:
    lying = zip_bytes({"a": torch.ones(4)}, numel_delta=1)
    err = _refused(write(tmp_path / "m.pt", lying), tmp_path)
    assert {f.rule_id for f in err.findings} & {"convert.bad_storage", "convert.bad_view"}


def test_build_on_a_tensor_is_refused(tmp_path: Path) -> None:
    class Stateful:
        def __init__(self, t: torch.Tensor) -> None:
            self.t = t

        def __reduce__(self) -> tuple[Any, ...]:
            return (collections.OrderedDict, (), {"evil": 1})

    body = main_pickle({"od": Stateful(torch.ones(1))}, legacy=False)
    err = _refused(write(tmp_path / "m.pt", zip_bytes(pickle_bytes=body)), tmp_path)
    assert "convert.unsupported_value" in {f.rule_id for f in err.findings}


def test_unknown_persistent_id_is_refused(tmp_path: Path) -> None:
    class Pickler(pickle.Pickler):
        def persistent_id(self, obj: object) -> object:
            return ("module", "x", "y") if obj == "m" else None

    import io

    buf = io.BytesIO()
    Pickler(buf, protocol=2).dump({"a": "m"})
    err = _refused(write(tmp_path / "m.pt", zip_bytes(pickle_bytes=buf.getvalue())),
                   tmp_path)
    assert "pickle.persistent_id" in {f.rule_id for f in err.findings}


def test_cli_shows_the_findings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = next(c for c in MALICIOUS if c["id"] == "pt_zip_injected")
    src = shutil.copy(FILES / case["path"], tmp_path / "m.pt")
    assert main(["convert", str(src), str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "error[convert_refused]" in err and "error[pickle.unsafe_global]" in err
    assert "posix.system" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_cli_converts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch.save({"a": torch.ones(3)}, tmp_path / "m.pt")
    assert main(["convert", str(tmp_path / "m.pt"), str(tmp_path / "out"),
                 "--dtype", "bf16", "--max-shard-size", "1MiB"]) == 0
    out = capsys.readouterr().out
    assert "converted 1 tensors" in out and "appliance sign" in out
    assert main(["convert", str(tmp_path / "m.pt"), str(tmp_path / "out")]) == 1
    assert "error[convert_output_exists]" in capsys.readouterr().err


@pytest.mark.parametrize("layout", ["zip", "legacy"])
def test_truncated_or_corrupted_checkpoints_fail_closed(tmp_path: Path, layout: str) -> None:
    """Every cut and a flipped byte at many places: a ConvertError (a refusal or an
    unreadable source), never another exception, never a partial output."""
    state = {"a": torch.arange(64, dtype=torch.float32).reshape(8, 8), "b": torch.ones(3)}
    src = tmp_path / "full.pt"
    torch.save(state, src, _use_new_zipfile_serialization=layout == "zip")
    data = src.read_bytes()
    cuts = sorted({*range(0, len(data), max(1, len(data) // 40)), len(data) - 1})
    for i, cut in enumerate(cuts):
        work = tmp_path / f"c{i}"
        work.mkdir()
        flipped = bytearray(data)
        flipped[cut] ^= 0xFF
        for variant, body in (("cut", data[:cut]), ("flip", bytes(flipped))):
            path = write(work / f"{variant}.pt", body)
            try:
                convert(path, work / f"out-{variant}")
            except ConvertError as err:
                assert err.code in ("convert_refused", "convert_source_invalid",
                                    "convert_unsupported"), err.diagnostics()
                assert not (work / f"out-{variant}").exists()
            else:  # a flipped byte inside tensor data is still a valid checkpoint
                assert variant == "flip"
        assert sorted(p.name for p in work.iterdir() if not p.name.startswith("out-")) == [
            "cut.pt", "flip.pt"]


def test_symlinked_shard_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "hf"
    folder.mkdir()
    torch.save({"a": torch.ones(2)}, tmp_path / "real.bin")
    (folder / "s1.bin").symlink_to(tmp_path / "real.bin")
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps(
        {"weight_map": {"a": "s1.bin"}}))
    with pytest.raises(ConvertError) as info:
        convert(folder, tmp_path / "out")
    assert info.value.code in ("convert_refused", "convert_io")
    assert not (tmp_path / "out").exists()


def test_a_file_swapped_during_the_scan_is_refused(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The converter reads the file it opened before the scan; a path that names another
    file after the scan (renamed over) is refused."""
    import appliance.convert._run as run

    src = tmp_path / "m.pt"
    torch.save({"a": torch.ones(2)}, src)
    real_gate = run._gate

    def swapping_gate(path: Path, display: str) -> list[Any]:
        found = real_gate(path, display)
        other = tmp_path / "other.pt"
        other.write_bytes(zip_bytes(pickle_bytes=b"\x80\x02}q\x00."))
        other.replace(path)
        return found

    monkeypatch.setattr(run, "_gate", swapping_gate)
    with pytest.raises(ConvertError) as info:
        convert(src, tmp_path / "out")
    assert info.value.code == "convert_io" and "changed" in info.value.message
    assert not (tmp_path / "out").exists()
