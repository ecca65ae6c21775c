"""Tar headers read exactly as CPython's ``tarfile`` reads them (``scanner.formats.tar``).

Source: CPython 3.11 Lib/tarfile.py -- ``nti`` parses a number field with
``int(nts(s).strip() or "0", 8)`` (so ``0o50447``, ``+7``, ``7_7`` and whitespace are
numbers) or as base-256 after a 0x80/0xff byte; ``TarInfo.frombuf`` accepts any 512-byte
block whose number fields parse and whose checksum matches the unsigned or signed sum,
with an empty name and no magic (v7). ``torch.load``'s ``_legacy_load`` and NeMo's
``restore_from`` open files with ``tarfile.open(f, "r:")``. Red-team finding M4 (a
``.nemo`` whose first checksum is written ``0o50447 ``: the scanner's stricter parser
stopped, ``tarfile`` lists the members) and the plain ``.nemo`` tar with a ``0o``
checksum that scanned ``format.unrecognized`` with its config never read.

``tarfile``'s parsers are called on bytes only (``nti``, ``frombuf``, ``getnames``):
nothing is extracted, unpickled or loaded.
"""

from __future__ import annotations

import io
import tarfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scanner.core.context import ScanContext
from scanner.core.model import BytesBlob, Verdict, worst
from scanner.formats.tar import (
    BLOCK,
    _TarWalk,
    analyze_tar,
    header_error,
    is_tar_header,
    tar_number,
)
from scanner.scan.dispatch import analyze_blob
from scanner.scan.sniff import sniff

SETTINGS = settings(max_examples=400, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
CONFIG_PAYLOAD = b"_target_: os.system\ncommand: id\n"
CONFIG_BENIGN = b"_target_: torch.optim.Adam\nlr: 0.001\n"

# Pieces of what int(x, 8) and str.strip() treat specially, plus bytes they refuse.
_PIECES = ["0", "1", "7", "8", "9", "_", "__", "+", "-", "0o", "0O", "0x", "o", " ", "\t",
           "\n", "\x0b", "\x1c", "\x1f", "\x00", "\x80", "\xff", "\xe9", "a", "."]


def nti_or_none(field: bytes) -> int | None:
    try:
        return int(tarfile.nti(field))  # type: ignore[attr-defined]
    except tarfile.HeaderError:
        return None


def frombuf_ok(header: bytes) -> bool:
    try:
        tarfile.TarInfo.frombuf(header, "utf-8", "surrogateescape")
    except tarfile.HeaderError:
        return False
    return True


def number_fields(length: int) -> st.SearchStrategy[bytes]:
    """Random ``length``-byte fields: raw bytes, base-256, and text built from the
    pieces int() and strip() care about, cut or NUL-padded to ``length``."""
    text = st.lists(st.sampled_from(_PIECES), max_size=length).map(
        lambda parts: "".join(parts).encode("latin-1")[:length].ljust(length, b"\x00"))
    base256 = st.tuples(st.sampled_from([b"\x80", b"\xff"]),
                        st.binary(min_size=length - 1, max_size=length - 1)).map(
        lambda p: p[0] + p[1])
    octal = st.integers(0, 8 ** (length - 2)).flatmap(lambda n: st.sampled_from([
        b"%0*o\x00" % (length - 1, n), b"0o%o " % n, b" +%o" % n, b"%o_0" % n]).map(
        lambda b: b[:length].ljust(length, b"\x00")))
    return st.one_of(st.binary(min_size=length, max_size=length), text, base256, octal)


@SETTINGS
@given(st.one_of(number_fields(8), number_fields(12)))
def test_tarfile_nti_accepts_0o_checksum_nemo_number_fields_match_tarfile(field: bytes) -> None:
    """``tar_number`` (written independently) reads every field as ``tarfile.nti`` does,
    refusing exactly what it refuses."""
    assert tar_number(field) == nti_or_none(field), field


def test_tarfile_nti_accepts_0o_checksum_nemo_the_red_team_spellings() -> None:
    for text, value in [(b"0o50447 ", 0o50447), (b"0O17\x00\x00\x00\x00", 0o17),
                        (b" +17 \x00xx", 0o17), (b"1_7\x00", 0o17), (b"\x1c17\x1f", 0o17),
                        (b"0o_17", 0o17), (b"-1\x00", -1), (b"       \x00", 0),
                        (b"\x80\x00\x00\x00\x00\x00\x01\x00", 256),
                        (b"\xff" * 8, -1)]:
        assert tar_number(text) == value == nti_or_none(text), text
    for text in [b"18\x00", b"0x17", b"1 7", b"_17", b"17_", b"1__7", b"0o", b"\xe917"]:
        assert tar_number(text) is None and nti_or_none(text) is None, text


def _header(fields: dict[int, bytes], kind: bytes, name: bytes, checksum: str) -> bytes:
    block = bytearray(BLOCK)
    block[0:len(name)] = name
    for at, value in fields.items():
        block[at:at + len(value)] = value
    block[156:157] = kind
    block[148:156] = b" " * 8
    unsigned = sum(block)
    signed = sum(b - 256 if b > 127 else b for b in block)
    field = {"octal": b"%06o\x00 " % unsigned, "0o": b"0o%05o " % unsigned,
             "signed": b"%06o\x00 " % signed, "wrong": b"%06o\x00 " % (unsigned + 1)}
    block[148:156] = field[checksum][:8].ljust(8, b"\x00")
    return bytes(block)


_FIELDS = ((100, 8), (108, 8), (116, 8), (124, 12), (136, 12), (329, 8), (337, 8),
           (386, 12), (398, 12), (483, 12))


@SETTINGS
@given(st.tuples(*(number_fields(length) for _, length in _FIELDS)),
       st.sampled_from([b"0", b"\x00", b"5", b"S", b"x", b"L", b"7", b"?"]),
       st.binary(max_size=100),
       st.sampled_from(["octal", "0o", "signed", "wrong"]))
def test_tarfile_frombuf_header_rules_match_tarfile(
        values: tuple[bytes, ...], kind: bytes, name: bytes, checksum: str) -> None:
    """``header_error`` accepts a block exactly when ``TarInfo.frombuf`` does (checksum
    unsigned or signed, every number field, the sparse map of ``S`` headers)."""
    header = _header({at: v for (at, _), v in zip(_FIELDS, values, strict=True)},
                     kind, name, checksum)
    assert (header_error(header) is None) is frombuf_ok(header), header
    assert is_tar_header(header + b"\x00" * BLOCK) is frombuf_ok(header)


def test_tarfile_frombuf_accepts_v7_header_with_empty_name_and_no_magic() -> None:
    """Red-team M3: tarfile reads a v7 header whose name is empty (first byte NUL) and
    that has no ``ustar`` magic; so must the sniffer."""
    header = _header({100: b"0000644 ", 124: b"00000000000 "}, b"0", b"", "octal")
    assert header[0] == 0 and b"ustar" not in header and frombuf_ok(header)
    assert is_tar_header(header + b"\x00" * 1024)
    assert not is_tar_header(b"\x00" * 1536)  # an all-NUL block is no member header


def nemo_tar(config: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in (("model_config.yaml", config), ("model_weights.ckpt", b"")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def with_0o_checksum(data: bytes) -> bytes:
    """The first header's checksum rewritten as ``0o<octal> `` (same value)."""
    out = bytearray(data)
    stored = tarfile.nti(bytes(out[148:156]))  # type: ignore[attr-defined]
    out[148:156] = (b"0o%o " % stored).ljust(8, b"\x00")
    assert tarfile.nti(bytes(out[148:156])) == stored  # type: ignore[attr-defined]
    return bytes(out)


def test_tarfile_nti_accepts_0o_checksum_nemo_config_is_read() -> None:
    """A plain ``.nemo`` tar whose first checksum is written ``0o...``: tarfile lists
    its members, so the config in it is judged (it scanned ``format.unrecognized``)."""
    data = with_0o_checksum(nemo_tar(CONFIG_PAYLOAD))
    assert tarfile.open(fileobj=io.BytesIO(data), mode="r:").getnames()[0] == (
        "model_config.yaml")
    blob = BytesBlob("model.nemo", data)
    assert sniff(blob) == "tar"
    found = analyze_blob(ScanContext(), blob)
    assert any(f.rule_id == "config.unsafe_target" and f.path == "model.nemo!model_config.yaml"
               for f in found), found
    assert worst(found) is Verdict.MALICIOUS


def test_tarfile_nti_accepts_0o_checksum_nemo_benign_stays_policy() -> None:
    """The benign counterpart: the same archive with a plain config is the tar policy
    only, as a tarfile-written one is."""
    for data in (nemo_tar(CONFIG_BENIGN), with_0o_checksum(nemo_tar(CONFIG_BENIGN))):
        found = analyze_blob(ScanContext(), BytesBlob("model.nemo", data))
        assert worst(found) is Verdict.POLICY, found
        assert {f.rule_id for f in found} == {"format.tar_not_allowed"}, found


def test_tarfile_prefix_field_joins_every_name_like_frombuf() -> None:
    """``frombuf`` prepends the prefix field whatever the magic; the walk names members
    as tarfile lists them."""
    header = bytearray(_header({124: b"00000000002 "}, b"0", b"ages", "octal"))
    header[345:349] = b"stor"
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\x00 " % sum(header)
    data = bytes(header) + b"}.".ljust(BLOCK, b"\x00") + b"\x00" * 1024  # a benign pickle
    assert tarfile.open(fileobj=io.BytesIO(data), mode="r:").getnames() == ["stor/ages"]
    found = analyze_tar(ScanContext(), BytesBlob("t.tar", data))
    assert {f.path for f in found} == {"t.tar", "t.tar!stor/ages"}, found
    assert all("malformed" not in f.rule_id for f in found), found


def test_tar_negative_size_is_malformed_not_looped() -> None:
    """``tarfile`` steps ceil(size/512) blocks: a negative size never moves forward (it
    re-reads one header forever); the walk stops with a finding."""
    header = _header({124: b"-1000\x00"}, b"0", b"a", "octal")
    assert frombuf_ok(header)
    found = analyze_tar(ScanContext(), BytesBlob("t.tar", header + b"\x00" * 1024))
    assert any(f.rule_id == "archive.malformed" and "negative" in f.message for f in found)


# --- the member walk: which blocks are headers, which names and sizes (TarFile.next) -------

class _Recorder(_TarWalk):
    """The walk, recording (name, data offset, size) of each member it reaches."""

    def __init__(self, data: bytes) -> None:
        super().__init__(ScanContext(), BytesBlob("t.tar", data))
        self.seen_members: list[tuple[str, int, int]] = []

    def member(self, name: str, kind: bytes, link: str, data_at: int, size: int) -> None:
        self.seen_members.append((name, data_at, size))


def walked(data: bytes) -> list[tuple[str, int, int]]:
    walk = _Recorder(data)
    walk.run()
    return walk.seen_members


def listed(data: bytes) -> list[tuple[str, int, int]]:
    """tarfile's own member list (parsing only): name, data offset, size."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
        return [(m.name, m.offset_data, m.size) for m in archive.getmembers()]


def _pax_block(records: dict[str, str], kind: bytes) -> bytes:
    return tarfile.TarInfo._create_pax_generic_header(  # type: ignore[attr-defined]
        records, kind, "utf-8")


_KINDS = [tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE,
          tarfile.DIRTYPE, tarfile.CHRTYPE, tarfile.FIFOTYPE, tarfile.CONTTYPE, b"Z"]
_member = st.tuples(st.sampled_from(["storages", "a/b", "dir/", "x" * 99, ""]),
                    st.sampled_from(_KINDS), st.integers(0, 1100),
                    st.sampled_from([None, {"path": "../p"}, {"size": "20"},
                                     {"path": "q/", "size": " +7"}, {"size": "bad"}]))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_member, min_size=1, max_size=4),
       st.sampled_from([None, {"path": "../../g"}, {"size": "30"}, {"linkpath": "/etc"}]),
       st.binary(min_size=0, max_size=64))
def test_tarfile_next_member_walk_matches_tarfile(
        members: list[tuple[str, bytes, int, dict[str, str] | None]],
        global_records: dict[str, str] | None, filler: bytes) -> None:
    """Headers after links, directories and devices (no data blocks, whatever their size
    field), v7 directories (``AREGTYPE`` named ``x/``), unknown types (read as regular),
    pax ``x`` records for one member and ``g`` records for all later ones (``path``,
    ``size``): the walk reaches the same members, at the same offsets, with the same names
    and sizes as ``tarfile`` lists."""
    out = bytearray()
    if global_records:
        out += _pax_block(global_records, tarfile.XGLTYPE)
    for name, kind, size, local in members:
        if local:
            out += _pax_block(local, tarfile.XHDTYPE)
        info = tarfile.TarInfo(name)
        info.type, info.size = kind, size
        header = bytearray(info.tobuf(format=tarfile.USTAR_FORMAT))
        if kind == tarfile.AREGTYPE:  # tobuf writes REGTYPE for it; v7 writers do not
            header[156:157] = b"\x00"
            header[148:156] = b" " * 8
            header[148:156] = b"%06o\x00 " % sum(header)
        out += header
        out += (filler * (size // max(len(filler), 1) + 1))[:size].ljust(
            -(-size // BLOCK) * BLOCK, b"\x00")
    out += b"\x00" * (2 * BLOCK)
    data = bytes(out)
    assert walked(data) == listed(data)


def test_tarfile_global_pax_path_names_every_later_member() -> None:
    """A ``g`` header's ``path`` renames every member after it (``tarfile`` would
    extract both to ``../../evil``): the traversal is found."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT,
                      pax_headers={"path": "../../evil"}) as tar:
        info = tarfile.TarInfo("a")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"}."))
    data = buf.getvalue()
    assert [n for n, _, _ in listed(data)] == ["../../evil"]
    found = analyze_tar(ScanContext(), BytesBlob("t.tar", data))
    assert any(f.rule_id == "archive.path_traversal" and f.path == "t.tar!../../evil"
               for f in found), found


def test_tarfile_link_header_size_is_not_data_storages_found() -> None:
    """A symbolic-link header whose size field says 1024: ``tarfile`` reads the next block
    as a header (``storages``, unpickled by torch.load); the walk skipped it as data and
    never judged the payload."""
    evil = b"cos\nsystem\n(S'id'\ntR."
    link = tarfile.TarInfo("link")
    link.type, link.size, link.linkname = tarfile.SYMTYPE, 1024, "x"
    member = tarfile.TarInfo("storages")
    member.size = len(evil)
    data = (link.tobuf(format=tarfile.USTAR_FORMAT) + member.tobuf(format=tarfile.USTAR_FORMAT)
            + evil.ljust(BLOCK, b"\x00") + b"\x00" * (2 * BLOCK))
    assert [n for n, _, _ in listed(data)] == ["link", "storages"]
    found = analyze_blob(ScanContext(), BytesBlob("pytorch_model.bin", data))
    assert any(f.verdict is Verdict.MALICIOUS and f.path == "pytorch_model.bin!storages"
               for f in found), found


def test_tarfile_nti_accepts_0o_checksum_nemo_tar_gz() -> None:
    """NeMo's second try is ``"r:gz"``: the gzip stream's first header is recognised by
    the same rules, so the config in a gzipped ``0o`` tar is judged too."""
    import gzip

    data = gzip.compress(with_0o_checksum(nemo_tar(CONFIG_PAYLOAD)))
    found = analyze_blob(ScanContext(), BytesBlob("model.nemo", data))
    assert any(f.rule_id == "config.unsafe_target" and f.path.endswith("model_config.yaml")
               for f in found), found
