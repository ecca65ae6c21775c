"""Static analysis of Python source shipped with a model (``ast``; never imported or run).

What runs when a loader imports the file: module-level statements (through ``if``/``try``/
``with``/loops), class bodies, decorators, default values, and the module's own functions
those call (transitively). ``classes_findings`` adds the methods of the classes an
``auto_map`` names (``from_pretrained`` instantiates them). In that reachable code:

- ``code.dangerous_call`` (malicious): commands and processes (``os.system``,
  ``subprocess.*``, ``pty.*``), FFI (``ctypes``), file writes and deletes (``open(.., 'w')``,
  ``Path.write_text``, ``shutil.rmtree``), network (``socket``, ``urllib.request``,
  ``requests``, Hub downloads), dynamic code (``exec``, ``eval``, ``compile``,
  ``__import__``, ``importlib.import_module``, ``runpy``), and imports of ``pty``,
  ``ctypes`` or ``marshal``;
- ``code.obfuscated`` (malicious, anywhere in the file): ``exec``/``eval`` of decoded data
  (base64, hex, zlib, codecs), ``marshal.loads``;
- ``code.unparseable`` (malformed): not Python 3 syntax the analyzer can read.

Names are resolved through the file's imports (``import subprocess as sp``,
``from os import system``). Evidence is ``line N: <call>``. Sources: the corpus' auto_map
cases; CVE-2025-66448 (auto_map imports); modelscan/modelaudit Python-file checks.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterable, Iterator

from scanner.core.blobview import read_bounded
from scanner.core.context import ScanContext
from scanner.core.model import Blob, Finding, Severity, Verdict
from scanner.core.rules import rule
from scanner.core.spec import Format, FormatSpec, Head, Probe

V, S = Verdict, Severity

PYTHON_FILE = rule(
    "code.python_file_present", V.POLICY, S.MEDIUM,
    "Python source ships with the model (remote code the loader may import)",
    "Remove .py files from the model folder; deploy only architectures the server "
    "implements natively.",
)
DANGEROUS_CALL = rule(
    "code.dangerous_call", V.MALICIOUS, S.CRITICAL,
    "Python source runs commands, writes files, opens the network or runs dynamic code in "
    "code that importing the module (or instantiating an auto_map class) executes",
    "Do not deploy this model; remove the code or review it and ship an architecture the "
    "server implements natively.",
)
OBFUSCATED = rule(
    "code.obfuscated", V.MALICIOUS, S.CRITICAL,
    "Python source executes decoded or marshalled data (exec of base64/zlib/hex, "
    "marshal.loads)",
    "Do not deploy this model; obfuscated code in a model repository is an attack.",
)
UNPARSEABLE = rule(
    "code.unparseable", V.MALFORMED, S.MEDIUM,
    "Python source cannot be parsed, so it cannot be checked (fail closed)",
    "Remove the file, or ship Python 3 source the scanner can parse.",
)

MAX_SOURCE_BYTES = 8 << 20
MAX_FUNCTIONS_FOLLOWED = 10_000
_MAX_EVIDENCE = 200

_DANGEROUS_MODULES = ("subprocess", "pty", "ctypes", "socket", "urllib.request",
                      "urllib2", "http.client", "requests", "httpx", "urllib3", "aiohttp",
                      "ftplib", "smtplib", "telnetlib", "webbrowser", "runpy", "marshal",
                      "multiprocessing", "asyncio.subprocess", "pip", "_posixsubprocess",
                      "commands", "popen2", "paramiko", "pexpect")
_DANGEROUS_NAMES = frozenset({
    "os.system", "os.popen", "os.fork", "os.forkpty", "os.kill", "os.killpg", "os.remove",
    "os.unlink", "os.rmdir", "os.removedirs", "os.rename", "os.renames", "os.replace",
    "os.chmod", "os.chown", "os.lchown", "os.symlink", "os.link", "os.startfile",
    "os.truncate", "os.posix_spawn", "os.posix_spawnp", "os.putenv",
    "posix.system", "nt.system",
    "shutil.rmtree", "shutil.copy", "shutil.copy2", "shutil.copyfile", "shutil.copytree",
    "shutil.move", "shutil.chown", "shutil.unpack_archive",
    "builtins.exec", "builtins.eval", "builtins.compile", "builtins.__import__",
    "builtins.breakpoint", "importlib.import_module", "importlib.__import__",
    "importlib.reload", "importlib.util.spec_from_file_location",
    "pickle.load", "pickle.loads", "dill.load", "dill.loads", "cloudpickle.load",
    "cloudpickle.loads", "torch.hub.load", "code.interact", "code.InteractiveInterpreter",
    "code.InteractiveConsole", "types.FunctionType", "types.CodeType",
    "huggingface_hub.hf_hub_download", "huggingface_hub.snapshot_download",
    "transformers.utils.hub.cached_file", "tempfile.mktemp", "sys.settrace",
    "sys.setprofile", "atexit.register",
})
_DANGEROUS_PREFIXES = tuple(f"{m}." for m in _DANGEROUS_MODULES) + (
    "os.exec", "os.spawn", "posix.exec", "posix.spawn")
# Method names that write, delete or run whatever object they are called on.
_DANGEROUS_METHODS = frozenset({"write_text", "write_bytes", "unlink", "rmtree", "symlink_to",
                                "hardlink_to", "system", "popen", "spawn", "check_output",
                                "check_call", "Popen"})
_IMPORT_DANGER = frozenset({"pty", "ctypes", "marshal", "_posixsubprocess"})
_DECODERS = frozenset({"b64decode", "b32decode", "b16decode", "a85decode", "b85decode",
                       "decodebytes", "decompress", "fromhex", "unhexlify", "loads",
                       "decode", "urlsafe_b64decode"})
_WRITE_MODES = set("wax+")
_BUILTINS = frozenset({"exec", "eval", "compile", "__import__", "breakpoint", "open"})


@functools.lru_cache(maxsize=256)
def _parse(text: str) -> ast.Module:
    """``ast.parse`` memoised by text (a fleet holds the same modeling file many times;
    trees are only read)."""
    return ast.parse(text)


def _dotted(node: ast.expr) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


class Source:
    """A parsed Python file: its imports, top-level functions and classes."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.tree = _parse(text)
        self.aliases: dict[str, str] = {}
        self.functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.classes: dict[str, ast.ClassDef] = {}
        self.import_nodes: list[tuple[ast.stmt, list[str]]] = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
                for a in node.names:
                    local = a.asname or a.name.split(".")[0]
                    self.aliases[local] = a.name if a.asname else local
                self.import_nodes.append((node, names))
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                self.import_nodes.append((node, [f"{node.module}.{a.name}" for a in node.names]
                                          + [node.module]))
        for stmt in self.tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[stmt.name] = stmt
            elif isinstance(stmt, ast.ClassDef):
                self.classes[stmt.name] = stmt

    def qualify(self, node: ast.expr) -> str | None:
        """The imported name a call target refers to (``sp.run`` -> ``subprocess.run``)."""
        name = _dotted(node)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        if head in self.aliases:
            base = self.aliases[head]
            return f"{base}.{rest}" if rest else base
        if head in _BUILTINS and not rest and head not in self.functions:
            return f"builtins.{head}"
        return name

    # -- reachability ---------------------------------------------------------------

    def executed(self, body: Iterable[ast.stmt]) -> Iterator[ast.AST]:
        """Nodes that run when ``body`` runs: not function/lambda bodies (only their
        decorators and defaults), not ``if __name__ == '__main__'`` blocks."""
        stack: list[ast.AST] = list(reversed(list(body)))
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                stack.extend(node.decorator_list)
                stack.extend(d for d in node.args.defaults + node.args.kw_defaults if d)
                continue
            if isinstance(node, ast.Lambda):
                stack.extend(d for d in node.args.defaults + node.args.kw_defaults if d)
                continue
            if isinstance(node, ast.If) and _is_main_guard(node.test):
                stack.extend(node.orelse)
                continue
            yield node
            stack.extend(ast.iter_child_nodes(node))

    def reachable_calls(self, roots: list[ast.AST]) -> Iterator[tuple[ast.Call, str]]:
        """(call, where) for calls in ``roots`` and in module functions they call."""
        queue: list[tuple[list[ast.AST], str]] = [(roots, "at import (module level)")]
        followed: set[str] = set()
        while queue:
            nodes, where = queue.pop()
            for node in nodes:
                if not isinstance(node, ast.Call):
                    continue
                yield node, where
                callee = node.func.id if isinstance(node.func, ast.Name) else None
                if callee is None or callee in followed or len(followed) > MAX_FUNCTIONS_FOLLOWED:
                    continue
                target: list[ast.stmt] | None = None
                if callee in self.functions:
                    target = list(self.functions[callee].body)
                elif callee in self.classes:
                    target = [m for s in self.classes[callee].body
                              if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
                              and s.name in ("__init__", "__new__", "__post_init__")
                              for m in s.body]
                if target:
                    followed.add(callee)
                    queue.append((list(self.executed(target)),
                                  f"in {callee}() (called from code that runs)"))


def _is_main_guard(test: ast.expr) -> bool:
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)
            and test.left.id == "__name__" and len(test.comparators) == 1
            and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == "__main__")


def _evidence(node: ast.AST) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # noqa: BLE001 - evidence only
        text = type(node).__name__
    line = getattr(node, "lineno", 0)
    return f"line {line}: {text}"[:_MAX_EVIDENCE]


def _danger(src: Source, call: ast.Call) -> str | None:
    """Why ``call`` is dangerous, or ``None``."""
    qual = src.qualify(call.func)
    if qual is not None:
        if qual in _DANGEROUS_NAMES or qual.startswith(_DANGEROUS_PREFIXES):
            return qual
        if qual == "builtins.open" and _write_mode(call):
            return "open() for writing"
    if isinstance(call.func, ast.Attribute) and call.func.attr in _DANGEROUS_METHODS:
        return f".{call.func.attr}()"
    return None


def _write_mode(call: ast.Call) -> bool:
    mode: ast.expr | None = call.args[1] if len(call.args) > 1 else None
    for kw in call.keywords:
        if kw.arg == "mode":
            mode = kw.value
    if mode is None:
        return False
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        return bool(_WRITE_MODES & set(mode.value))
    return True  # computed mode: cannot tell, assume it writes


def _obfuscated(src: Source, call: ast.Call) -> bool:
    qual = src.qualify(call.func) or ""
    if qual in ("marshal.loads", "marshal.load"):
        return True
    if qual not in ("builtins.exec", "builtins.eval", "builtins.compile"):
        return False
    for arg in call.args[:1]:
        for inner in ast.walk(arg):
            if (isinstance(inner, ast.Call) and isinstance(inner.func, (ast.Attribute, ast.Name))
                    and (getattr(inner.func, "attr", None) or getattr(inner.func, "id", ""))
                    in _DECODERS):
                return True
    return False


def parse(path: str, data: bytes) -> tuple[Source | None, list[Finding]]:
    """Parse ``data`` as Python source: ``(Source, [])`` or ``(None, [code.unparseable])``."""
    try:
        text = data.decode("utf-8-sig")
        return Source(path, text), []
    except (SyntaxError, ValueError, UnicodeDecodeError) as exc:
        where = getattr(exc, "lineno", None)
        return None, [UNPARSEABLE.finding(
            path, f"Python source does not parse: {type(exc).__name__}",
            f"{exc}"[:_MAX_EVIDENCE] + (f" (line {where})" if where else ""))]


def module_findings(src: Source) -> list[Finding]:
    """Findings for what importing the module runs, plus obfuscation anywhere."""
    out: dict[tuple[str, str], Finding] = {}
    module_level = _module_level_imports(src)
    for node, names in src.import_nodes:
        if node in module_level:
            bad = [n for n in names if n.split(".")[0] in _IMPORT_DANGER]
            if bad:
                ev = _evidence(node)
                out.setdefault((DANGEROUS_CALL.id, ev), DANGEROUS_CALL.finding(
                    src.path, f"imports {bad[0]} at import time (FFI/terminal/code "
                    "loading module)", ev))
    roots = list(src.executed(src.tree.body))
    _calls(src, src.reachable_calls(roots), out)
    for any_node in ast.walk(src.tree):
        if isinstance(any_node, ast.Call) and _obfuscated(src, any_node):
            ev = _evidence(any_node)
            out.setdefault((OBFUSCATED.id, ev), OBFUSCATED.finding(
                src.path, "executes decoded or marshalled data", ev,
                offset=None))
    return list(out.values())


def _module_level_imports(src: Source) -> set[ast.AST]:
    return {n for n in src.executed(src.tree.body) if isinstance(n, (ast.Import, ast.ImportFrom))}


def _calls(src: Source, calls: Iterable[tuple[ast.Call, str]],
           out: dict[tuple[str, str], Finding]) -> None:
    for call, where in calls:
        why = _danger(src, call)
        if why is None:
            continue
        ev = _evidence(call)
        out.setdefault((DANGEROUS_CALL.id, ev), DANGEROUS_CALL.finding(
            src.path, f"calls {why} {where}", ev))


def classes_findings(src: Source, names: Iterable[str], already: set[str]) -> list[Finding]:
    """Dangerous calls in the methods of the classes ``names`` (those an ``auto_map``
    references) and the module functions they call; call sites in ``already``
    (evidence strings reported by ``module_findings``) are left out."""
    out: dict[tuple[str, str], Finding] = {}
    for name in names:
        cls = src.classes.get(name)
        if cls is None:
            continue
        bodies = [m for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
                  for m in s.body]
        calls = ((c, f"in class {name} (named by auto_map)")
                 for c, _ in src.reachable_calls(list(src.executed(bodies))))
        _calls(src, calls, out)
    return [f for f in out.values() if f.evidence not in already]


def analyze_python(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """Python source: always ``code.python_file_present`` (policy), plus what the static
    analysis above finds in the code that importing it runs
    (``code.dangerous_call`` / ``code.obfuscated``: malicious). Never imported or run."""
    out = [PYTHON_FILE.finding(blob.name, "Python source file in the model",
                               f"{blob.size} bytes")]
    data = read_bounded(blob, MAX_SOURCE_BYTES, "max_python_source_bytes")
    src, problems = parse(blob.name, data)
    if src is None:
        return out + problems
    ctx.check_deadline()
    return out + module_findings(src)


# -- sniffing (the sniffer hands this the decoded head) --

_PY_LINE = re.compile(
    r"^(?:import [\w.]+|from \.*[\w.]* import |def \w+\s*\(|async def \w+|"
    r"class \w+\s*[(:]|if __name__ ?==)", re.M)


def looks_like_python(h: Head) -> bool:
    """Named ``*.py``, a python shebang, or a line only Python starts that way (not inside
    a Markdown code fence)."""
    text = h.text or ""
    if h.suffix == ".py":
        return True
    return (text.startswith("#!") and "python" in text.split("\n", 1)[0]) or (
        "```" not in text and _PY_LINE.search(text) is not None)


PYTHON = Format("python")  # Python source
SPECS = (FormatSpec(PYTHON, analyze_python, binary=False, claims=(".py",),
                    probes=(Probe(220, looks_like_python, text=True),)),)
