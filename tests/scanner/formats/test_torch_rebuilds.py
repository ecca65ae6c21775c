"""A PyTorch checkpoint holding only tensors is ``policy`` (pickle-bearing checkpoints are
refused by policy, never called malicious) whatever kind of tensor it holds: float8 and
uint16/32/64 tensors (``_rebuild_tensor_v3`` over ``torch.storage.UntypedStorage``),
sparse COO/CSR tensors (``_rebuild_sparse_tensor``, ``torch.serialization._get_layout``),
quantized tensors (``_rebuild_qtensor``) and meta tensors, zip and legacy layouts alike.
Files are written with ``torch.save`` (creating is allowed; nothing is loaded)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scanner.api import scan_paths
from scanner.core.model import Verdict

torch = pytest.importorskip("torch")


def _tensors() -> dict[str, dict[str, Any]]:
    q = torch.quantize_per_tensor(torch.ones(4), 0.1, 0, torch.quint8)
    return {
        "float8": {"a": torch.zeros(2).to(torch.float8_e4m3fn),
                   "b": torch.zeros(3).to(torch.float8_e5m2)},
        "unsigned": {"u16": torch.zeros(2, dtype=torch.uint16),
                     "u32": torch.zeros(2, dtype=torch.uint32),
                     "u64": torch.zeros(2, dtype=torch.uint64)},
        "sparse": {"coo": torch.eye(3).to_sparse(), "csr": torch.eye(3).to_sparse_csr()},
        "quantized": {"q": q},
        "meta": {"m": torch.empty(3, device="meta")},
    }


@pytest.mark.filterwarnings("ignore::UserWarning")  # quantized and CSR tensors are beta
@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
@pytest.mark.parametrize("kind", sorted(_tensors()))
def test_checkpoint_of_tensors_is_policy(tmp_path: Path, kind: str, legacy: bool) -> None:
    path = tmp_path / "model.pt"
    torch.save(_tensors()[kind], path, _use_new_zipfile_serialization=not legacy)
    (result,) = scan_paths([path]).targets
    bad = [f"{f.rule_id}: {f.message}" for f in result.findings if f.verdict > Verdict.POLICY]
    assert result.verdict is Verdict.POLICY, bad
