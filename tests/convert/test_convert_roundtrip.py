"""``appliance convert`` round trips: checkpoints the tests write (torch.save, or the same
bytes built by hand for layouts torch no longer writes) come out as safetensors whose
tensors equal the in-memory originals byte for byte. The output is read with safetensors'
own loader; no checkpoint is ever loaded with torch.load."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from convert_helpers import legacy_bytes, raw, sample_state, special_floats, write, zip_bytes
from safetensors.torch import load_file

from appliance.convert import ConvertError, convert
from scanner.api import scan_target
from scanner.core.model import Verdict


def _loaded(out: Path) -> dict[str, torch.Tensor]:
    index = json.loads((out / "model.safetensors.index.json").read_text())
    got: dict[str, torch.Tensor] = {}
    for shard in sorted(set(index["weight_map"].values())):
        part = load_file(out / shard)
        assert {n for n, f in index["weight_map"].items() if f == shard} == set(part)
        got.update(part)
    return got


def _same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert list(got) == list(want) or set(got) == set(want)
    for name, t in want.items():
        assert got[name].dtype == t.dtype, name
        assert tuple(got[name].shape) == tuple(t.shape), name
        assert raw(got[name]) == raw(t), name


@pytest.mark.parametrize("layout", ["zip", "legacy"])
def test_torch_save_round_trip(tmp_path: Path, layout: str) -> None:
    state = sample_state()
    src = tmp_path / "model.pt"
    torch.save(state, src, _use_new_zipfile_serialization=layout == "zip")
    out = tmp_path / "out"
    result = convert(src, out)
    assert result.tensors == len(state) and result.shards == ["model.safetensors"]
    _same(_loaded(out), state)
    assert scan_target(out).verdict is Verdict.CLEAN


@pytest.mark.parametrize("big_endian", [False, True])
@pytest.mark.parametrize("layout", ["zip", "legacy"])
def test_hand_built_layouts_and_byte_orders(tmp_path: Path, layout: str,
                                            big_endian: bool) -> None:
    state = sample_state()
    data = (zip_bytes(state, big_endian=big_endian) if layout == "zip"
            else legacy_bytes(state, big_endian=big_endian))
    src = write(tmp_path / "ckpt.bin", data)
    convert(src, tmp_path / "out")
    _same(_loaded(tmp_path / "out"), state)


def test_real_legacy_file_from_a_big_endian_writer_of_torch_0_4_is_little_endian(
        tmp_path: Path) -> None:
    """torch >= 0.4 wrote little-endian data whatever the machine: sys_info says big,
    the counts read right little-endian, so nothing is swapped."""
    state = sample_state()
    data = legacy_bytes(state, big_writer=True)
    convert(write(tmp_path / "ckpt.pt", data), tmp_path / "out")
    _same(_loaded(tmp_path / "out"), state)


def test_big_endian_legacy_file_scans_as_policy_not_malformed(tmp_path: Path) -> None:
    """The scanner reads a big-endian writer's element counts too (so the convert gate,
    which refuses anything worse than policy, lets the file through)."""
    src = write(tmp_path / "old.pt", legacy_bytes(sample_state(), big_endian=True))
    result = scan_target(src)
    assert result.verdict is Verdict.POLICY, result.findings
    lying = write(tmp_path / "lying.pt", legacy_bytes(sample_state(), big_endian=True,
                                                      big_writer=False))
    assert scan_target(lying).verdict is Verdict.MALFORMED  # counts big, sys_info little


def test_pre_0_4_rebuild_tensor(tmp_path: Path) -> None:
    state = sample_state()
    src = write(tmp_path / "old.pt", legacy_bytes(state, big_endian=True, v1=True))
    assert scan_target(src).verdict is Verdict.POLICY
    convert(src, tmp_path / "out")
    _same(_loaded(tmp_path / "out"), state)


@pytest.mark.parametrize("target", ["bf16", "fp16", "fp32"])
def test_dtype_conversion_matches_torch_rounding(tmp_path: Path, target: str) -> None:
    tdtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[target]
    special = special_floats()
    state = {"f32": special, "f64": special.double() * 1.0000001, "f16": special.half(),
             "bf16": special.bfloat16(), "f32_t": torch.randn(4, 6).t(),
             "ints": torch.arange(5, dtype=torch.int32), "mask": torch.tensor([True])}
    src = tmp_path / "m.pt"
    torch.save(state, src)
    convert(src, tmp_path / "out", dtype=target)
    got = _loaded(tmp_path / "out")
    want = {n: (t.to(tdtype) if t.is_floating_point() else t) for n, t in state.items()}
    for name, t in want.items():  # NaN is NaN (torch's own payload depends on its code path)
        if t.is_floating_point():
            nan = torch.isnan(t)
            assert torch.equal(torch.isnan(got[name]), nan), name
            got[name][nan] = 0
            t[nan] = 0
    _same(got, want)


def test_shards_and_index(tmp_path: Path) -> None:
    state = {f"layer.{i}.weight": torch.full((256, 256), float(i)) for i in range(5)}
    src = tmp_path / "m.pt"
    torch.save(state, src)
    result = convert(src, tmp_path / "out", max_shard_bytes=600_000)
    assert len(result.shards) == 3 and result.shards[0] == "model-00001-of-00003.safetensors"
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(state)
    assert index["metadata"]["total_size"] == 5 * 256 * 256 * 4
    _same(_loaded(tmp_path / "out"), state)


def test_sharded_folder_with_index_and_model_files(tmp_path: Path) -> None:
    state = sample_state()
    names = list(state)
    folder = tmp_path / "hf"
    folder.mkdir()
    halves = {"pytorch_model-00001-of-00002.bin": names[:8],
              "pytorch_model-00002-of-00002.bin": names[8:]}
    for i, (shard, keys) in enumerate(halves.items()):
        part = {k: state[k] for k in keys}
        torch.save(part, folder / shard, _use_new_zipfile_serialization=i == 0)
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps({
        "metadata": {"total_size": 0},
        "weight_map": {k: s for s, keys in halves.items() for k in keys}}))
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (folder / "tokenizer.json").write_text("{}")
    (folder / "training_args.bin").write_bytes(b"not copied")
    out = tmp_path / "out"
    result = convert(folder, out)
    assert result.copied == ["config.json", "tokenizer.json"]
    assert not (out / "training_args.bin").exists()
    _same(_loaded(out), state)
    record = json.loads((out / "conversion.json").read_text())
    kinds = {f["path"]: f["kind"] for f in record["source"]["files"]}
    assert kinds == {"pytorch_model-00001-of-00002.bin": "torch-zip",
                     "pytorch_model-00002-of-00002.bin": "torch-legacy",
                     "pytorch_model.bin.index.json": "index", "config.json": "copied",
                     "tokenizer.json": "copied"}
    assert scan_target(out).verdict is Verdict.CLEAN


def test_names_that_collide_once_flattened_are_refused(tmp_path: Path) -> None:
    torch.save({"a.b": torch.ones(2), "a": {"b": torch.zeros(2)}}, tmp_path / "m.pt")
    with pytest.raises(ConvertError) as info:
        convert(tmp_path / "m.pt", tmp_path / "out")
    assert info.value.code == "convert_source_invalid" and "a.b" in info.value.message
    assert not (tmp_path / "out").exists()


def test_index_that_disagrees_with_its_shards_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "hf"
    folder.mkdir()
    torch.save({"a": torch.ones(2)}, folder / "s1.bin")
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps(
        {"weight_map": {"a": "s1.bin", "b": "s1.bin"}}))
    with pytest.raises(ConvertError) as info:
        convert(folder, tmp_path / "out")
    assert info.value.code == "convert_refused"
    assert not (tmp_path / "out").exists()


def test_provenance_record(tmp_path: Path) -> None:
    state = sample_state()
    src = tmp_path / "model.pt"
    torch.save(state, src)
    state_with_values = {"model": state, "epoch": 3, "note": "x"}
    src2 = tmp_path / "full.pt"
    torch.save(state_with_values, src2)
    convert(src2, tmp_path / "out")
    record = json.loads((tmp_path / "out" / "conversion.json").read_text())
    assert record["format"] == "appliance-convert/1"
    assert record["converter"]["name"] == "appliance convert" and record["converter"]["version"]
    [source] = record["source"]["files"]
    assert source == {"path": "full.pt", "kind": "torch-zip", "size": src2.stat().st_size,
                      "sha256": hashlib.sha256(src2.read_bytes()).hexdigest()}
    by_name = {t["name"]: t for t in record["tensors"]}
    assert set(by_name) == {f"model.{n}" for n in state}
    for name, t in state.items():
        entry = by_name[f"model.{name}"]
        assert entry["shape"] == list(t.shape)
        assert entry["sha256"] == hashlib.sha256(raw(t)).hexdigest()
        assert entry["file"] == "model.safetensors"
    assert {(d["name"], d["kind"]) for d in record["dropped"]} == {("epoch", "int"),
                                                                    ("note", "str")}
    files = {f["path"]: f.get("sha256") for f in record["files"]}
    assert set(files) == {"model.safetensors", "model.safetensors.index.json"}
    for name, digest in files.items():
        data = (tmp_path / "out" / name).read_bytes()
        assert digest in (None, hashlib.sha256(data).hexdigest())


def test_state_dict_metadata_and_parameters(tmp_path: Path) -> None:
    """model.state_dict() carries _metadata (BUILD on the OrderedDict); a dict of
    nn.Parameter goes through _rebuild_parameter."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    sd = model.state_dict()
    assert hasattr(sd, "_metadata")
    torch.save(sd, tmp_path / "sd.pt")
    convert(tmp_path / "sd.pt", tmp_path / "out")
    _same(_loaded(tmp_path / "out"), dict(sd))
    params = dict(model.named_parameters())
    torch.save(params, tmp_path / "p.pt")
    convert(tmp_path / "p.pt", tmp_path / "out2")
    _same(_loaded(tmp_path / "out2"), {k: v.detach() for k, v in params.items()})


def test_existing_output_is_never_touched(tmp_path: Path) -> None:
    torch.save({"a": torch.ones(2)}, tmp_path / "m.pt")
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ConvertError) as info:
        convert(tmp_path / "m.pt", out)
    assert info.value.code == "convert_output_exists"
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    convert(tmp_path / "m.pt", empty)  # an empty folder is accepted
    assert (empty / "model.safetensors").is_file()


def test_random_strided_views(tmp_path: Path) -> None:
    """Seeded random as_strided views (overlapping, zero and permuted strides, offsets) of
    shared storages of several dtypes, in both layouts and byte orders."""
    g = torch.Generator().manual_seed(25)
    bases = [torch.randn(400, generator=g), torch.randn(300, generator=g).double(),
             torch.randn(500, generator=g).bfloat16(),
             torch.randint(-100, 100, (257,), generator=g, dtype=torch.int8)]
    state: dict[str, torch.Tensor] = {}
    for i in range(40):
        base = bases[i % len(bases)]
        ndim = int(torch.randint(0, 4, (1,), generator=g))
        shape = [int(torch.randint(1, 6, (1,), generator=g)) for _ in range(ndim)]
        stride = [int(torch.randint(0, 9, (1,), generator=g)) for _ in range(ndim)]
        extent = sum((d - 1) * s for d, s in zip(shape, stride, strict=True))
        offset = int(torch.randint(0, base.numel() - extent, (1,), generator=g))
        state[f"v{i}"] = base.as_strided(shape, stride, offset)
    for layout, big in (("zip", False), ("zip", True), ("legacy", True)):
        data = (zip_bytes(state, big_endian=big) if layout == "zip"
                else legacy_bytes(state, big_endian=big))
        out = tmp_path / f"out-{layout}-{big}"
        convert(write(tmp_path / f"{layout}-{big}.pt", data), out)
        _same(_loaded(out), state)
