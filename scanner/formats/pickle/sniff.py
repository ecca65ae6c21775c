"""Is this head of a file a pickle stream? (Sniffing only: nothing is unpickled.)

``pickle.load`` runs opcodes as it reads them, so a stream that fails *after* a GLOBAL and a
REDUCE has already run its payload. A sniffer must therefore accept any stream whose valid
*prefix* could do something, not only complete pickles. Protocol 0 pickles are ASCII text,
so for streams without a PROTO opcode the prefix is checked strictly (opcode arguments,
identifier-shaped GLOBAL names, stack and mark balance) to keep ordinary text out.
"""

from __future__ import annotations

import io
import pickletools

from scanner.formats.pickle import numbers

_MARK = pickletools.markobject
_SLICE = pickletools.stackslice
_IMPORTS = {"GLOBAL", "INST", "STACK_GLOBAL"}
MAX_OPS = 64
_OPCODE_BYTES = frozenset(ord(op.code) for op in pickletools.opcodes)
TORCH_MAGIC_NUMBER = 0x1950A86A20F9469CFC6C  # torch/serialization.py MAGIC_NUMBER
# First object of a legacy (pre-1.6) torch.save stream: LONG1 0x1950a86a20f9469cfc6c.
TORCH_LEGACY_MAGIC = b"\x80\x02\x8a\x0a" + TORCH_MAGIC_NUMBER.to_bytes(10, "little") + b"."


def _dotted(text: str) -> bool:
    return bool(text) and all(part.isidentifier() for part in text.split("."))


class _Prefix:
    """The longest valid opcode prefix of ``head`` (up to ``max_ops`` opcodes)."""

    def __init__(self, head: bytes, max_ops: int = MAX_OPS) -> None:
        self.ops = 0
        self.stopped = False  # reached STOP with a balanced stack
        self.imports = False  # GLOBAL / INST / STACK_GLOBAL seen
        self.exhausted = False  # ran out of bytes (not an invalid opcode)
        self.proto = False
        self.end = 0  # offset just after the last valid opcode
        depth = 0
        marks: list[int] = []
        stream = io.BytesIO(head)
        gen = pickletools.genops(stream)
        while self.ops < max_ops:
            try:
                op, arg, _ = next(gen)
            except StopIteration:  # pragma: no cover - genops raises ValueError at EOF
                self.exhausted = True
                return
            except Exception as exc:  # noqa: BLE001 - malformed argument: the prefix ends
                line_end = _number_line_end(head, self.end)
                if line_end is None:  # not a number line the C unpickler reads past
                    self.exhausted = isinstance(exc, ValueError) and stream.tell() >= len(head)
                    return
                depth += 1  # INT/LONG/FLOAT push one value; genops resumes after the line
                self.ops += 1
                self.end = line_end
                stream.seek(line_end)
                gen = pickletools.genops(stream)
                continue
            if op.name in ("GLOBAL", "INST"):
                module, _, name = str(arg).partition(" ")
                if not (_dotted(module) and _dotted(name)):
                    return
            before, after = op.stack_before, op.stack_after
            if _MARK in before:
                if not marks:
                    return
                items_above, depth = depth - marks[-1], marks.pop()
                below = before.index(_MARK)
                above = sum(1 for s in before[below + 1 :] if s is not _SLICE)
                if depth < below or items_above < above:
                    return
                depth -= below
            else:
                if depth < len(before):
                    return
                depth -= len(before)
            if after == [_MARK]:
                marks.append(depth)
            else:
                depth += len(after)
            self.ops += 1
            self.end = stream.tell()
            self.proto |= op.name == "PROTO" and self.ops == 1
            self.imports |= op.name in _IMPORTS
            if op.name == "STOP":
                self.stopped = True
                return


_NUMBER_LINES = {ord("I"): numbers.load_int, ord("L"): numbers.load_long,
                 ord("F"): numbers.load_float}


def _number_line_end(head: bytes, at: int) -> int | None:
    """Offset just past the INT/LONG/FLOAT line at ``at`` when CPython's unpickler accepts
    its number but ``pickletools`` does not (``I017``, ``I0x1f``, ``I1\\x00x``: see
    ``scanner.formats.pickle.numbers``), else ``None``."""
    load = _NUMBER_LINES.get(head[at]) if at < len(head) else None
    newline = head.find(b"\n", at + 1)
    if load is None or newline < 0:
        return None
    try:
        load(head[at + 1:newline])
    except ValueError:
        return None
    return newline + 1


def _garbage_after(head: bytes, end: int) -> bool:
    """A non-text byte right after the first opcode: ``cfoo\nbar\n`` then word lines is a
    word list (vocab.txt), ``cos\nsystem\n`` then ``0xff`` is a pickle that imports."""
    nxt = head[end:end + 1]
    return bool(nxt) and (nxt[0] >= 0x7F or (nxt[0] < 0x20 and nxt not in b"\t\n\r"))


def looks_like_pickle(head: bytes) -> bool:
    """True when ``head`` (the first bytes of a blob) starts a pickle stream that
    ``pickle.load`` would start executing.

    Rules: PROTO (0x80, protocol 0-5) plus one more valid opcode; otherwise a strictly valid
    prefix that reaches STOP, or imports a callable (a protocol-0 ``GLOBAL`` with
    identifier-shaped names is enough when more bytes follow, even garbage:
    ``find_class`` imports the module, running its import side effects, before the
    unpickler fails; two lines and nothing else stay text), or spans
    at least 8 opcodes and ends only because the head (or the ``MAX_OPS`` budget) ends."""
    if not head or head[0] in b" \t\r\n" or head[0] not in _OPCODE_BYTES:
        return False
    prefix = _Prefix(head)
    if head[0] == 0x80:
        return len(head) > 1 and head[1] <= 5 and prefix.ops >= 2
    if prefix.imports and (prefix.ops >= 2 or _garbage_after(head, prefix.end)):
        return True
    if prefix.stopped:
        return prefix.ops >= 2
    return (prefix.exhausted or prefix.ops >= MAX_OPS) and prefix.ops >= 8
