"""YAML inputs shaped like Hydra/OmegaConf configs (NeMo ``model_config.yaml``, Lightning
``hparams.yaml``): ``_target_``/``_call_`` callables (benign and dangerous), ``_partial_``,
``_args_``, nested targets, ``${...}`` interpolations, anchors and aliases (a target
reached only through an alias), merge keys (``<<: *base``), tags (``!!python/...``,
``!!str``, local ``!tags``), escaped keys (``"\\x5ftarget_"``, ``"\\u005ftarget_"``), flow
style, several documents, alias fan-out (billion laughs, bounded), deep nesting,
``trust_remote_code``. Then text-level mutations. Emitted as text (no YAML library), so a
malformed document is as likely as a well-formed one.
"""

from __future__ import annotations

from .draw import Draw
from .mutate import mutate
from .oracle import Case

NAMES = ("model_config.yaml", "config.yaml", "hparams.yaml", "train.yml")
TARGETS = ("os.system", "builtins.eval", "subprocess.Popen", "posix.system",
           "builtins.exec", "runpy.run_path", "torch.nn.Linear", "torch.optim.Adam",
           "nemo.collections.asr.models.EncDecCTCModel", "collections.OrderedDict",
           "functools.partial", "")
TARGET_KEYS = ("_target_", "_call_", '"_target_"', "'_target_'", '"\\x5ftarget_"',
               '"\\u005ftarget_"', "? _target_\n  ", "target", "_target")
SCALARS = ("1", "0.5", "true", "null", "~", "'echo fuzz'", '"a\\nb"', "${oc.env:HOME}",
           "${model.x}", "${eval:'1+1'}", "!!str 5", "!!python/name:os.system ''",
           "!!python/object/apply:os.system ['id']", "!custom x", "[1, 2]", "{a: 1}",
           "|\n    block", ">-\n    folded", "0x1F", ".inf", "2026-12-07", "'it''s'")
TOKENS = (b":", b"- ", b"&a ", b"*a", b"<<: *a", b"!!python/object/apply:", b"_target_",
          b"{", b"}", b"[", b"]", b"\n", b"  ", b"---\n", b"...\n", b"%YAML 1.1\n", b"\t",
          b"'", b'"', b"\\u0000", b"${", b"\xef\xbb\xbf", b"#")


def _value(draw: Draw, depth: int, anchors: list[str], lines: list[str], indent: str) -> str:
    """Append the lines of one value to ``lines``; returns the inline part."""
    kind = draw.integer(0, 9)
    if depth < 4 and kind < 3:
        _mapping(draw, depth + 1, anchors, lines, indent + "  ")
        return ""
    if depth < 4 and kind == 3:
        for _ in range(draw.integer(1, 3)):
            lines.append(f"{indent}  - {draw.choice(SCALARS)}")
        return ""
    if anchors and kind == 4:
        return f"*{draw.choice(anchors)}"
    return draw.choice(SCALARS)


def _mapping(draw: Draw, depth: int, anchors: list[str], lines: list[str], indent: str) -> None:
    if draw.chance(0.5):
        lines.append(f"{indent}{draw.choice(TARGET_KEYS)}: {draw.choice(TARGETS)}")
    for _ in range(draw.integer(0, 4)):
        kind = draw.integer(0, 9)
        if kind == 0:
            lines.append(f"{indent}_partial_: {draw.choice(('true', 'false', 'yes'))}")
        elif kind == 1:
            lines.append(f"{indent}_args_: [{draw.choice(SCALARS)}]")
        elif kind == 2 and anchors:
            lines.append(f"{indent}<<: *{draw.choice(anchors)}")
        elif kind == 3:
            lines.append(f"{indent}trust_remote_code: {draw.choice(('true', 'True', 'false'))}")
        else:
            key = draw.choice(("model", "optim", "a", "tokenizer", "hf_data_cfg", "'x y'",
                               "? complex", "1", "null", "<<"))
            anchor = ""
            if draw.chance(0.3):
                anchor = f"&n{len(anchors)} "
                anchors.append(f"n{len(anchors)}")
            at = len(lines)
            inline = _value(draw, depth, anchors, lines, indent)
            lines.insert(at, f"{indent}{key}: {anchor}{inline}".rstrip())


def _laughs(draw: Draw) -> str:
    """Alias fan-out: each level lists the previous level ``width`` times."""
    width, levels = draw.integer(2, 9), draw.integer(2, 9)
    lines = ["l0: &l0 [_target_: os.system]" if draw.chance(0.5) else "l0: &l0 [x]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def generate_text(draw: Draw) -> bytes:
    """One YAML document stream (bytes, UTF-8, possibly mutated)."""
    kind = draw.integer(0, 9)
    if kind == 0:
        text = _laughs(draw)
    elif kind == 1:
        depth = draw.integer(1, 300)
        text = "a: " + "[" * depth + "]" * depth + "\n"
    elif kind == 2:  # a target reached only through an alias / merge key
        target = draw.choice(TARGETS)
        text = (f"base: &b\n  _target_: {target}\n  _args_: ['id']\nmodel:\n  <<: *b\n"
                f"  x: 1\nother: *b\n")
    elif kind == 3:  # flow style, tags on the target
        tag = draw.choice(("", "!!str ", "!!python/str ", "!t "))
        text = f"{{model: {{_target_: {tag}{draw.choice(TARGETS)}, _partial_: true}}}}\n"
    else:
        lines: list[str] = []
        anchors: list[str] = []
        for doc in range(draw.integer(1, 2)):
            if doc:
                lines.append("---")
            _mapping(draw, 0, anchors, lines, "")
        text = "\n".join(lines) + "\n"
    data = text.encode()
    if draw.chance(0.5):
        data = mutate(draw, data, TOKENS)
    return data


def generate(draw: Draw) -> Case:
    return Case(draw.choice(NAMES), generate_text(draw), "gen:yaml")
