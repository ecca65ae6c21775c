"""Run the analyzer for a blob's sniffed format; crashes and limit hits become findings."""

from __future__ import annotations

from scanner import _gguf, _keras, _numpy, _onnx, _pickle, _safetensors, _text, _zip
from scanner._context import Analyzer, LimitHit, ScanContext
from scanner._formats import Format
from scanner._model import Blob, Finding
from scanner._rules import INTERNAL_ERROR
from scanner._sniff import sniff

ANALYZERS: dict[Format, Analyzer] = {
    Format.SAFETENSORS: _safetensors.analyze_safetensors,
    Format.PICKLE: _pickle.analyze_pickle,
    Format.TORCH_LEGACY: _pickle.analyze_torch_legacy,
    Format.ZIP: _zip.analyze_zip,
    Format.TAR: _zip.analyze_tar,
    Format.SEVENZIP: _zip.analyze_7z,
    Format.NPY: _numpy.analyze_npy,
    Format.HDF5: _keras.analyze_hdf5,
    Format.ONNX: _onnx.analyze_onnx,
    Format.GGUF: _gguf.analyze_gguf,
    Format.PYTHON: _text.analyze_python,
    Format.JINJA: _text.analyze_template,
    Format.JSON: _text.analyze_json,
    Format.TEXT: _text.analyze_text,
    Format.EMPTY: lambda ctx, blob: [],
    Format.UNKNOWN: _text.analyze_unknown,
}


def analyze_blob(ctx: ScanContext, blob: Blob, fmt: Format | None = None) -> list[Finding]:
    """Sniff ``blob`` (unless its ``fmt`` is already known) and analyze it. Never raises
    for bad input: an analyzer crash is a ``scanner.internal_error`` finding and a limit
    hit a ``scanner.limit_exceeded`` one."""
    try:
        ctx.check_deadline()
        if fmt is None:
            fmt = sniff(blob)
        return ANALYZERS[fmt](ctx, blob)
    except LimitHit as hit:
        return [hit.finding(blob.name)]
    except RecursionError:
        return [INTERNAL_ERROR.finding(blob.name, "analysis exceeded the recursion limit",
                                       evidence="RecursionError")]
    except MemoryError:
        return [INTERNAL_ERROR.finding(blob.name, "analysis ran out of memory",
                                       evidence="MemoryError")]
    except Exception as exc:  # noqa: BLE001 - fail closed: any crash is a finding
        return [INTERNAL_ERROR.finding(blob.name, f"analysis crashed: {type(exc).__name__}",
                                       evidence=f"{type(exc).__name__}: {exc}"[:500])]
