"""Fuzzing kit for the scanner (issue 30): one generator module per format, the registry
table of formats (``fuzzkit.registry.FORMATS``), an independent reference judge
(``fuzzkit.reference``) and the oracle that runs a case (``fuzzkit.oracle``). Used by
``bench/fuzz.py`` (long runs) and ``tests/scanner/test_fuzz.py`` (a seeded short run)."""
