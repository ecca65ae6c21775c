"""Pre-deploy model scanner: finds every way a model artifact can run code or is malformed.

Nothing under test is ever unpickled, imported or executed. Formats are decided from the
bytes (magic numbers and structure), never from file names.

Layout (folders by layer; each imports only the layers below it, see docs/scanner.md):

- ``scanner.core``     types and helpers: ``model`` (Finding, Verdict, Severity, Blob),
                       ``rules`` (every finding kind has a stable ``rule_id``), ``context``
                       (ScanContext: limits, deadline, nested dispatch), ``spec`` (Format,
                       FormatSpec), ``fs``, ``blobview``, ``strict_json``, ``allowlist``,
                       ``lazy`` (deferred stdlib imports for the CLI).
- ``scanner.formats``  one module or package per format; each ends with ``SPECS``.
- ``scanner.scan``     ``registry`` (the list of format modules), ``sniff``, ``dispatch``,
                       ``folder`` (whole-folder rules), ``walk``, ``parallel``, ``shares``,
                       ``memo``.
- ``scanner.api``      ``scan_paths()`` -> ``ScanReport`` (the one code path the loader uses).
- ``scanner.readers``  the readers and types ``appliance`` may build on (strict JSON, blobs,
                       ScanContext, rules, the pickle machine, the ZIP reader).
- ``scanner.report``   text, JSON and SARIF 2.1.0 writers.

The scanner never imports vLLM or torch; ``appliance`` imports ``scanner``, never the reverse.
"""

from scanner.core.model import Finding, Severity, Verdict

__all__ = ["Finding", "Severity", "Verdict", "__version__"]

__version__ = "0.1.0"
