"""How tensor bytes reach the shard (``appliance.convert._copy``): raw tensors are copied in
the kernel and hashed from the output file; when the kernel refuses the copy (another
filesystem, a seccomp filter), the converter reads, hashes and writes them itself, with the
same bytes and digests; a copy that fails for another reason, or a source that ends early,
refuses the conversion and leaves nothing behind."""

from __future__ import annotations

import errno
import hashlib
import json
import os
from pathlib import Path

import pytest
import torch
from convert_helpers import raw, sample_state
from safetensors.torch import load_file

from appliance.convert import ConvertError, _copy, _write, convert

REAL_COPY = os.copy_file_range if hasattr(os, "copy_file_range") else None


def _state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    state = dict(sample_state())
    state["big.f32"] = torch.randn(64, 97, generator=g)  # 24,832 bytes: many small chunks
    state["big.bf16"] = torch.randn(33, 70, generator=g).bfloat16()
    return state


def _check(src: Path, out: Path, state: dict[str, torch.Tensor]) -> None:
    got = load_file(out / "model.safetensors")
    assert set(got) == set(state)
    for name, t in state.items():
        assert raw(got[name]) == raw(t), name
    record = json.loads((out / "conversion.json").read_text())
    assert record["source"]["files"][0]["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    for entry in record["tensors"]:
        assert entry["sha256"] == hashlib.sha256(raw(state[entry["name"]])).hexdigest()


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks smaller than the tensors, so each is copied and read back in many pieces."""
    monkeypatch.setattr(_copy, "COPY_CHUNK", 4096 + 12)
    monkeypatch.setattr(_write, "BACK_CHUNK", 1000)
    monkeypatch.setattr(_write, "CHUNK", 2048)


@pytest.mark.skipif(REAL_COPY is None, reason="no os.copy_file_range on this platform")
def test_kernel_copy_in_many_pieces(tmp_path: Path, small_chunks: None,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def counting(src: int, dst: int, count: int, offset_src: int | None = None,
                 offset_dst: int | None = None) -> int:
        calls.append(count)
        assert REAL_COPY is not None
        return REAL_COPY(src, dst, count, offset_src, offset_dst)

    monkeypatch.setattr(os, "copy_file_range", counting)
    state = _state()
    src = tmp_path / "m.pt"
    torch.save(state, src)
    convert(src, tmp_path / "out")
    _check(src, tmp_path / "out", state)
    assert len(calls) > 6 and max(calls) <= 4096 + 12  # the big tensors took several calls


@pytest.mark.parametrize("code", [errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP,
                                  errno.EPERM])
def test_refused_kernel_copy_falls_back_to_read_and_write(
        tmp_path: Path, small_chunks: None, monkeypatch: pytest.MonkeyPatch,
        code: int) -> None:
    calls: list[int] = []

    def refusing(*args: object) -> int:
        calls.append(1)
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "copy_file_range", refusing, raising=False)
    state = _state()
    src = tmp_path / "m.pt"
    torch.save(state, src)
    convert(src, tmp_path / "out")
    _check(src, tmp_path / "out", state)
    assert calls == [1]  # asked once per shard, not once per tensor


@pytest.mark.skipif(REAL_COPY is None, reason="no os.copy_file_range on this platform")
def test_kernel_copy_refused_half_way(tmp_path: Path, small_chunks: None,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The first pieces are copied in the kernel, the rest of the same tensor is read."""
    calls: list[int] = []

    def flaky(src: int, dst: int, count: int, offset_src: int | None = None,
              offset_dst: int | None = None) -> int:
        calls.append(count)
        if len(calls) > 2:
            raise OSError(errno.EXDEV, "cross-device")
        assert REAL_COPY is not None
        return REAL_COPY(src, dst, count, offset_src, offset_dst)

    monkeypatch.setattr(os, "copy_file_range", flaky)
    state = {"big.f32": _state()["big.f32"], "small": torch.arange(5.0)}
    src = tmp_path / "m.pt"
    torch.save(state, src)
    convert(src, tmp_path / "out")
    _check(src, tmp_path / "out", state)
    assert len(calls) == 3


@pytest.mark.parametrize("failure", ["eio", "ended"])
def test_failed_copy_refuses_and_leaves_nothing(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                failure: str) -> None:
    def broken(*args: object) -> int:
        if failure == "eio":
            raise OSError(errno.EIO, "I/O error")
        return 0  # the source ended before the tensor's bytes did

    monkeypatch.setattr(os, "copy_file_range", broken, raising=False)
    src = tmp_path / "m.pt"
    torch.save({"w": torch.ones(8, 8)}, src)
    with pytest.raises(ConvertError) as info:
        convert(src, tmp_path / "out")
    assert info.value.code == "convert_io"
    if failure == "ended":
        assert "ended while reading tensor data" in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt"]


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise here")
@pytest.mark.parametrize("fails", [False, True])
def test_writeback_is_started_range_by_range_behind_the_hash(
        tmp_path: Path, small_chunks: None, monkeypatch: pytest.MonkeyPatch,
        fails: bool) -> None:
    """Every ``WRITEBACK_BYTES`` of written and hashed output, writeback of that range is
    started: ranges follow each other from the start of the file, never past what was
    written. Advice that fails stops, and the conversion goes on (the final fsync makes
    the shard durable either way)."""
    monkeypatch.setattr(_copy, "WRITEBACK_BYTES", 5000)
    calls: list[tuple[int, int, int]] = []
    real = os.posix_fadvise

    def advise(fd: int, offset: int, length: int, advice: int) -> None:
        calls.append((offset, length, advice))
        if fails:
            raise OSError(errno.EINVAL, "no")
        real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", advise)
    state = _state()
    src = tmp_path / "m.pt"
    torch.save(state, src)
    convert(src, tmp_path / "out")
    _check(src, tmp_path / "out", state)
    size = (tmp_path / "out" / "model.safetensors").stat().st_size
    if fails:
        assert len(calls) == 1
        return
    assert len(calls) >= 3
    assert calls[0][0] == 0
    for (off, length, advice), nxt in zip(calls, [*calls[1:], None], strict=True):
        assert advice == os.POSIX_FADV_DONTNEED and length >= 5000
        assert nxt is None or nxt[0] == off + length
    assert calls[-1][0] + calls[-1][1] <= size


@pytest.mark.skipif(REAL_COPY is None, reason="no os.copy_file_range on this platform")
def test_failure_with_tensors_in_flight_leaves_nothing(tmp_path: Path, small_chunks: None,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Tensors alternate between hashing lanes: a copy that fails on a later tensor, while
    an earlier one is still being hashed, refuses the conversion and leaves nothing."""
    calls: list[int] = []

    def failing_later(src: int, dst: int, count: int, offset_src: int | None = None,
                      offset_dst: int | None = None) -> int:
        calls.append(count)
        if len(calls) == 9:
            raise OSError(errno.EIO, "I/O error")
        assert REAL_COPY is not None
        return REAL_COPY(src, dst, count, offset_src, offset_dst)

    monkeypatch.setattr(os, "copy_file_range", failing_later)
    src = tmp_path / "m.pt"
    torch.save(_state(), src)
    with pytest.raises(ConvertError) as info:
        convert(src, tmp_path / "out")
    assert info.value.code == "convert_io" and len(calls) == 9
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt"]
