"""The built-in demo model: download, GGUF conversion, signing, the demo run, its template.

Holds: :mod:`.model` (``prepare()``: the signed built-in model, cached), :mod:`.convert`
(``python -m appliance.builtin.convert``, run as a child process), :mod:`.demo`
(``appliance demo``), ``templates/`` (the vetted chat template, package data).

May import: everything below the CLI (:mod:`appliance.serve`, :mod:`appliance.signing`,
:mod:`appliance.config`); only :mod:`appliance.cli` and :mod:`appliance.toolbench` import it.
"""
