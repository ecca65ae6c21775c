"""Pre-deploy model scanner: finds every way a model artifact can run code or is malformed.

Nothing under test is ever unpickled, imported or executed. Formats are decided from the
bytes (magic numbers and structure), never from file names.

Architecture (public thin modules over private layers):

- ``scanner.core.rules``     rule registry: every finding kind has a stable ``rule_id``.
- ``scanner.core.model``     ``Finding``, ``Verdict``, ``Severity``, ``Blob`` (bounded byte views).
- ``scanner.core.context``   ``ScanContext``: limits, deadline, nested dispatch.
- ``scanner.scan.sniff``     content sniffing -> ``Format``.
- per-format analyzers   ``_pickle``, ``_safetensors``, ``_zip``, ``_gguf``, ``_onnx`` ...
- ``scanner.scan.folder``    whole-folder checks (configs, ``auto_map``, templates, path refs).
- ``scanner.api``        ``scan_paths()`` -> ``ScanReport`` (the one code path the loader uses).
- ``scanner.report``     text, JSON and SARIF 2.1.0 writers.

The scanner never imports vLLM or torch; ``appliance`` imports ``scanner``, never the reverse.
"""

from scanner.core.model import Finding, Severity, Verdict

__all__ = ["Finding", "Severity", "Verdict", "__version__"]

__version__ = "0.1.0"
