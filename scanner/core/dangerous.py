"""Known-dangerous callables: the globals whose import or call is *evidence* that loading
runs code, imports code, fetches or sends data, or touches files outside the model.

``scanner.core.allowlist.classify`` asks ``danger_reason(module, name)`` for every global
outside the allowlist tiers: a reason makes it ``dangerous`` (``pickle.unsafe_global``,
malicious), ``None`` leaves it ``unknown`` (``pickle.unknown_global``, policy: refused,
but nothing about the name shows that it runs code). Hydra/OmegaConf ``_target_``
callables go through the same function (``classify_dotted``).

What is dangerous, in order (the first that matches gives the reason):

1. an attribute walk (a dotted name, ``zipfile`` + ``os.system``) or a dunder part
   (``numpy.__builtins__``, ``__main__``), except Cython's ``__pyx_unpickle_<Class>``
   helpers (they check a checksum, then ``Class.__new__`` and ``__setstate__``);
2. a module (or a parent package) in ``MODULES``: process, import, code-object, network,
   file-system and deserialisation modules of the standard library and of common
   third-party packages (``subprocess``, ``importlib``, ``runpy``, ``socket``, ``shutil``,
   ``ctypes``, ``marshal``, ``dill``, ``torch.hub``, ``numpy.f2py`` ...);
3. an exact name in ``QUALNAMES`` (``torch.load``, ``numpy.load``, ``pandas.read_pickle``,
   ``transformers.pipeline`` ...);
4. any module's function whose *name* is a conventional runner, loader or fetcher
   (``NAMES``: ``system``, ``eval``, ``exec``, ``load``, ``loads``, ``run``,
   ``import_module``, ``urlopen``, ``getattr`` ...): an unknown package's ``run`` is not
   given the benefit of the doubt;
5. a *function* (a name that is not class-shaped) of a framework whose data surface the
   allowlist tiers enumerate (``FRAMEWORK_ROOTS``: torch, numpy, sklearn, scipy, joblib,
   transformers, accelerate): loading data never needs one, and their function surface
   holds loaders and hook installers (``torch.nn.modules.module.
   register_module_forward_hook``, ``numpy.load``, ``sklearn.utils.check_random_state``);
6. a module whose top-level name is a look-alike (same letters, other case) of a
   standard-library, framework or listed module (``Collections``): evasion;
7. anything else from the Python standard library (``sys.stdlib_module_names`` plus
   Python 2 names): the standard library is closed and known, its plain value types are
   in the allowlist tiers, and the rest is where pickle gadgets come from (``pty.spawn``,
   ``bdb.Bdb.run``, ``timeit.timeit``, ``venv.create``, ``uuid._popen``, ``functools.
   partial``, ``operator.attrgetter``, ``types.CodeType``, ``builtins.getattr``). The
   inert exceptions are tier entries (``datetime``, ``collections``, ``decimal``,
   ``__future__`` ...).

Sources (union, checked 2026-12): picklescan ``_unsafe_globals`` (mmaitre314/picklescan,
installed with this project), fickling ``UNSAFE_IMPORTS`` (trailofbits/fickling
``fickle.py``), modelaudit ``SUSPICIOUS_GLOBALS`` (promptfoo/modelaudit
``detectors/suspicious_symbols.py``), modelscan's denylist misses (protectai/modelscan#338:
``torch.utils.collect_env.run``, ``multiprocessing.util.spawnv_passfds``,
``mlflow.projects.backend.local._run_entry_point``, ``pandas.read_csv`` for exfiltration).
"""

from __future__ import annotations

import sys

_EXEC = "runs commands or code"
_IMPORT = "imports or loads code"
_NET = "opens network connections (exfiltration, download)"
_FILES = "reads, writes, moves or deletes files"
_DESER = "deserialises another payload (a nested pickle, YAML object or code)"
_CODEOBJ = "builds code objects or reaches arbitrary attributes"
_FETCH = "downloads and runs code from a repository"

# module (matched with all its submodules) -> why
MODULES: dict[str, str] = {
    # Python 2 names (protocol >= 3 pickles keep them unmapped)
    "__builtin__": _CODEOBJ, "__builtins__": _CODEOBJ, "commands": _EXEC,
    "cPickle": _DESER, "copy_reg": _CODEOBJ, "urllib2": _NET, "httplib": _NET,
    "popen2": _EXEC, "imp": _IMPORT,
    # third-party runners, loaders, fetchers
    "dill": _DESER, "cloudpickle": _DESER, "jsonpickle": _DESER, "srsly": _DESER,
    "joblib": _DESER, "yaml": _DESER, "ruamel": _DESER, "shelve": _DESER,
    "jinja2": _EXEC, "mako": _EXEC, "IPython": _EXEC, "ipykernel": _EXEC,
    "jupyter_client": _EXEC, "pexpect": _EXEC, "sh": _EXEC, "plumbum": _EXEC,
    "fabric": _EXEC, "invoke": _EXEC, "paramiko": _NET, "docker": _EXEC, "git": _EXEC,
    "pip": _IMPORT, "setuptools": _IMPORT, "pkg_resources": _IMPORT, "numexpr": _EXEC,
    "asteval": _EXEC, "simpleeval": _EXEC, "sympy.parsing": _EXEC, "hydra": _IMPORT,
    "fire": _EXEC, "requests": _NET, "httpx": _NET, "aiohttp": _NET, "urllib3": _NET,
    "pycurl": _NET, "websocket": _NET, "websockets": _NET, "boto3": _NET, "botocore": _NET,
    "fsspec": _NET, "s3fs": _NET, "gcsfs": _NET, "huggingface_hub": _FETCH,
    "mlflow": _EXEC, "ray": _EXEC, "celery": _EXEC, "jsonargparse": _IMPORT,
    "lightning.pytorch.cli": _EXEC, "pytorch_lightning.cli": _EXEC, "gradio": _NET,
    "streamlit": _NET, "uvicorn": _NET,
    "torch.utils.tensorboard": _FILES, "torch.autograd.profiler": _FILES,
    "torch.profiler": _FILES,
    # torch
    "torch.hub": _FETCH, "torch.utils.cpp_extension": _EXEC,
    "torch.utils.collect_env": _EXEC, "torch.utils.bottleneck": _EXEC,
    "torch.utils._config_module": _EXEC, "torch.utils.data.datapipes": _EXEC,
    "torch.utils.file_baton": _FILES, "torch.utils.model_zoo": _FETCH,
    "torch._dynamo": _EXEC, "torch._inductor": _EXEC, "torch.fx": _EXEC,
    "torch.jit": _IMPORT, "torch.package": _IMPORT, "torch.serialization": _DESER,
    "torch.storage": _DESER, "torch._tensor": _CODEOBJ, "torch._C": _CODEOBJ,
    "torch._ops": _CODEOBJ, "torch.ops": _CODEOBJ, "torch.classes": _CODEOBJ,
    "torch.library": _CODEOBJ, "torch.multiprocessing": _EXEC,
    "torch.distributed": _NET, "torch.testing": _EXEC, "torch.compiler": _EXEC,
    "torch.onnx": _FILES, "torch.export": _IMPORT,
    # numpy, scipy, pandas, sklearn, tensorflow, transformers
    "numpy.f2py": _EXEC, "numpy.distutils": _EXEC, "numpy.testing": _EXEC,
    "numpy.ctypeslib": _CODEOBJ, "numpy.lib.npyio": _DESER, "numpy.lib.format": _DESER,
    "numpy.lib._datasource": _NET, "numpy.lib.utils": _CODEOBJ, "scipy.weave": _EXEC,
    "pandas.io": _NET, "pandas.core.computation": _EXEC,
    "sklearn.utils._testing": _EXEC, "sklearn.externals": _DESER,
    "sklearn.utils.fixes": _EXEC, "sklearn.datasets": _NET,
    "sklearn.utils._show_versions": _EXEC,
    "tensorflow.io": _FILES, "tensorflow.python.ops.script_ops": _EXEC,
    "tensorflow.python.platform.gfile": _FILES,
    "transformers.dynamic_module_utils": _FETCH, "transformers.pipelines": _FETCH,
    "diffusers.utils.dynamic_modules_utils": _FETCH,
}

# exact module.name -> why
QUALNAMES: dict[str, str] = {
    **{f"torch.{n}": _DESER for n in ("load", "save", "compile", "from_file")},
    **{f"torch._utils.{n}": _CODEOBJ for n in (
        "_rebuild_from_type", "_rebuild_from_type_v2", "_rebuild_parameter_with_state",
        "_rebuild_wrapper_subclass", "_rebuild_subclass", "_import_dotted_name")},
    **{f"numpy.{n}": _DESER for n in (
        "load", "loads", "loadtxt", "genfromtxt", "fromfile", "fromregex", "memmap",
        "save", "savez", "savez_compressed", "savetxt", "tofile", "DataSource",
        "lookfor", "source", "info", "safe_eval")},
    **{f"pandas.{n}": _NET for n in (
        "read_pickle", "read_csv", "read_json", "read_html", "read_xml", "read_excel",
        "read_parquet", "read_feather", "read_sql", "read_table", "read_fwf", "read_hdf",
        "read_orc", "read_sas", "read_spss", "read_stata", "read_clipboard", "eval",
        "to_pickle")},
    **{f"tensorflow.{n}": _EXEC for n in ("py_function", "numpy_function", "py_func")},
    "transformers.pipeline": _FETCH, "mlflow.projects.backend.local._run_entry_point": _EXEC,
    "nltk.data.load": _DESER,
}

# bare function names that by convention run, import, load or fetch, in any module
NAMES: frozenset[str] = frozenset({
    "system", "popen", "popen2", "popen3", "popen4", "spawn", "spawnl", "spawnle",
    "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe", "execl", "execle",
    "execlp", "execlpe", "execv", "execve", "execvp", "execvpe", "fork", "forkpty",
    "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput",
    "run", "run_path", "run_module", "runcode", "runsource", "runctx", "runcall",
    "eval", "exec", "execfile", "compile", "__import__", "import_module", "reload",
    "load", "loads", "load_module", "load_source", "load_dynamic", "load_inline",
    "load_session", "unsafe_load", "full_load", "load_all", "read_pickle", "apply",
    "getattr", "setattr", "delattr", "globals", "locals", "vars", "breakpoint",
    "input", "raw_input", "open", "urlopen", "urlretrieve", "open_new", "open_new_tab",
    "instantiate", "get_class_from_dynamic_module", "hf_hub_download",
    "snapshot_download", "rmtree", "remove", "unlink", "rmdir", "removedirs", "rename",
    "symlink", "chmod", "chown", "kill", "killpg", "execute", "executescript",
    "system_call", "shell", "subimport", "resolve_name", "locate", "_locate",
    "load_model", "load_weights", "get_file", "download_url", "download_file",
    "write_file", "read_file", "unpack_archive", "extractall", "copyfile", "connect",
    "import_string", "import_object", "get_class", "get_obj_from_str",
    "instantiate_from_config",
})

_PY2_STDLIB = frozenset({"__builtin__", "copy_reg", "commands", "cPickle", "urllib2",
                         "httplib", "popen2", "imp", "cStringIO", "StringIO", "Queue"})
STDLIB: frozenset[str] = frozenset(sys.stdlib_module_names) | _PY2_STDLIB
FRAMEWORK_ROOTS: frozenset[str] = frozenset({
    "torch", "numpy", "sklearn", "scipy", "joblib", "transformers", "accelerate"})
_KNOWN_ROOTS: dict[str, str] = {
    name.casefold(): name
    for name in (*STDLIB, *FRAMEWORK_ROOTS, *(m.partition(".")[0] for m in MODULES))}


def danger_reason(module: str, name: str) -> str | None:
    """Why the global ``module`` + ``name`` is evidence of code execution, exfiltration or
    escape (see the module docstring for the order of checks), or ``None``: nothing known
    about it (the caller's ``unknown``). Callers check the allowlist tiers first: a tier
    entry wins (``torch.jit._pickle.build_intlist`` is framework tier although
    ``torch.jit`` is dangerous)."""
    if "." in name:
        return "a dotted name (attribute walk), never allowlisted"
    parts = module.split(".")
    cython = name.startswith("__pyx_unpickle_") and not name.endswith("__")
    if (_dunder(name) and not cython) or any(map(_dunder, parts)):
        return "a dunder name, never allowlisted"
    for i in range(len(parts), 0, -1):
        why = MODULES.get(".".join(parts[:i]))
        if why is not None:
            return f"module {'.'.join(parts[:i])} {why}"
    why = QUALNAMES.get(f"{module}.{name}")
    if why is not None:
        return f"{module}.{name} {why}"
    if name in NAMES:
        return f"a function named {name!r} (by convention runs, imports, loads or fetches)"
    if parts[0] in FRAMEWORK_ROOTS and not name[:1].isupper():
        return (f"a function of {parts[0]} outside the allowlist tiers (only its data "
                "helpers and classes are known-safe; its functions include loaders and "
                "hook installers)")
    known = _KNOWN_ROOTS.get(parts[0].casefold())
    if known is not None and known != parts[0]:
        return f"module {parts[0]} is a look-alike of {known} (differs only in case)"
    if parts[0] in STDLIB:
        return ("a standard-library callable outside the allowlist tiers (the standard "
                "library's non-data names are where pickle gadgets come from)")
    return None


def _dunder(part: str) -> bool:
    return part.startswith("__") or part.endswith("__")
