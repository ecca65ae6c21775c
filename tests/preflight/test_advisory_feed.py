"""Signed advisory feed (issue 24): `appliance advisories export` signs the list (DSSE, the
model-signing machinery) with a serial and a date; `import` verifies it against the policy's
[trust] keys and installs it where preflight reads it; every refusal (rollback, altered byte,
unknown / revoked / expired key, unsigned list, model signature) has its own code and installs
nothing; preflight uses a newer installed feed and refuses one that no longer verifies."""

from __future__ import annotations

import base64
import datetime as dt
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from appliance import signing
from appliance.cli import main
from appliance.config.policy import load_policy
from appliance.errors import ApplianceError
from appliance.preflight import run_preflight
from appliance.preflight.feed import (
    FEED_PREDICATE_TYPE,
    FeedError,
    default_serial,
    export_feed,
    import_feed,
    list_in_force,
)

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "policies" / "advisories.json"
SERIAL = json.loads(SHIPPED.read_text())["serial"]
INSTALLED = ("vllm", "torch", "transformers", "xgrammar")


class Site:
    """A policy folder: packaged list, trust keys ``release`` (trusted) and ``stranger``."""

    def __init__(self, root: Path, *, revoked: bool = False, trusted: bool = True,
                 window: str = "", max_age_days: int = 90) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.packaged = root / "advisories.json"
        shutil.copyfile(SHIPPED, self.packaged)
        self.key, self.pub = root / "release.pem", root / "release.pub"
        self.other, self.other_pub = root / "stranger.pem", root / "stranger.pub"
        print_ = signing.keygen(self.key, self.pub)
        signing.keygen(self.other, self.other_pub)
        self.feed = root / "state" / "advisories" / "feed.json"
        keys = (f'[[trust.keys]]\nname = "release"\npublic_key = "release.pub"\n'
                f'algorithm = "P-256"\n{window}') if trusted else ""
        self.policy = root / "policy.toml"
        self.policy.write_text(
            f'[preflight]\nadvisories = "advisories.json"\n'
            f'advisory_feed = "state/advisories/feed.json"\n'
            f'advisories_max_age_days = {max_age_days}\n'
            f'[trust]\nrevoked = [{json.dumps(print_) if revoked else ""}]\n{keys}')

    def trust(self) -> signing.TrustStore:
        return load_policy(self.policy).trust.store()

    def export(self, serial: int, *, key: Path | None = None, out: str = "feed.sig",
               source: Path | None = None, date: dt.datetime | None = None) -> Path:
        path = self.root / out
        export_feed(source or self.packaged, key or self.key, path, serial, date)
        return path

    def import_(self, feed: Path) -> Any:
        return import_feed(feed, self.packaged, self.feed, self.trust())


def _refusal(site: Site, feed: Path) -> str:
    before = site.feed.read_bytes() if site.feed.exists() else None
    with pytest.raises(FeedError) as info:
        site.import_(feed)
    after = site.feed.read_bytes() if site.feed.exists() else None
    assert after == before, "a refused feed must not change what is installed"
    assert info.value.fix and info.value.where
    return info.value.code


def _list_with(site: Site, *extra: dict[str, Any]) -> Path:
    doc = json.loads(site.packaged.read_text())
    doc["advisories"] += list(extra)
    path = site.root / f"list-{len(list(site.root.iterdir()))}.json"
    path.write_text(json.dumps(doc))
    return path


HIGH_XGRAMMAR = {"id": "GHSA-test-feed-0001", "aliases": ["CVE-2099-1"], "package": "xgrammar",
                 "affected": "<99.0", "fixed": "99.0", "severity": "critical",
                 "severity_source": "test", "kind": "test", "summary": "feed test",
                 "source": "test"}


def test_export_writes_a_dsse_bundle_with_serial_and_date(tmp_path: Path) -> None:
    site = Site(tmp_path)
    when = dt.datetime(2026, 12, 3, 10, 0, tzinfo=dt.UTC)
    feed = site.export(SERIAL + 5, date=when)
    bundle = json.loads(feed.read_text())
    assert bundle["mediaType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
    statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    assert statement["predicateType"] == FEED_PREDICATE_TYPE
    assert statement["subject"][0]["name"] == "advisories.json"
    assert statement["predicate"]["serial"] == SERIAL + 5
    assert statement["predicate"]["date"] == "2026-12-03T10:00:00Z"
    assert len(statement["predicate"]["advisories"]) == len(
        json.loads(SHIPPED.read_text())["advisories"])


def test_default_serial_grows_and_export_refuses_a_serial_not_above_the_source(
        tmp_path: Path) -> None:
    now = dt.datetime(2027, 1, 2, 13, 5, tzinfo=dt.UTC)
    assert default_serial(SERIAL, now) == 2027010213
    assert default_serial(2027010299, now) == 2027010300
    site = Site(tmp_path)
    for serial in (SERIAL, SERIAL - 1):
        with pytest.raises(FeedError) as info:
            site.export(serial)
        assert info.value.code == "feed_serial_not_newer"
    assert not (tmp_path / "feed.sig").exists()


def test_a_newer_feed_is_installed_and_used_by_preflight(tmp_path: Path) -> None:
    site = Site(tmp_path)
    assert run_preflight(list_in_force(site.packaged, site.feed, site.trust()),
                         INSTALLED, env={}) == []
    feed = site.export(SERIAL + 1, source=_list_with(site, HIGH_XGRAMMAR))
    installed = site.import_(feed)
    assert installed.advisories.serial == SERIAL + 1 and installed.signer.name == "release"
    assert site.feed.read_bytes() == feed.read_bytes()  # the exact verified bytes
    assert sorted(p.name for p in site.feed.parent.iterdir()) == [
        "feed.json", "feed.json.floor", "feed.json.lock"]
    assert site.feed.with_name("feed.json.floor").read_text() == f"{SERIAL + 1}\n"
    in_force = list_in_force(site.packaged, site.feed, site.trust())
    assert in_force.feed is not None and in_force.advisories.serial == SERIAL + 1
    problems = run_preflight(in_force, INSTALLED, env={})
    assert [(p.code, p.subject.split()[0]) for p in problems] == [
        ("package_below_floor", "xgrammar")]
    assert "GHSA-test-feed-0001 (CVE-2099-1)" in problems[0].advisory
    assert "below the patched floor 99.0" in problems[0].message


def test_a_newer_release_supersedes_an_older_installed_feed(tmp_path: Path) -> None:
    site = Site(tmp_path)
    site.import_(site.export(SERIAL + 1, source=_list_with(site, HIGH_XGRAMMAR)))
    doc = json.loads(site.packaged.read_text())
    doc["serial"] = SERIAL + 2  # the next release's packaged list
    site.packaged.write_text(json.dumps(doc))
    in_force = list_in_force(site.packaged, site.feed, site.trust())
    assert in_force.feed is None and in_force.superseded
    assert run_preflight(in_force, INSTALLED, env={}) == []


@pytest.mark.parametrize("offset", [0, -1, -2])
def test_an_older_or_equal_serial_is_a_rollback(tmp_path: Path, offset: int) -> None:
    site = Site(tmp_path)
    site.import_(site.export(SERIAL + 3, out="newer.sig"))
    assert _refusal(site, site.export(SERIAL + 3 + offset, out="older.sig")) == "feed_rollback"


def test_a_feed_not_newer_than_the_packaged_list_is_a_rollback(tmp_path: Path) -> None:
    site = Site(tmp_path)
    doc = json.loads(site.packaged.read_text())
    doc["serial"] = SERIAL + 10
    newer_release = tmp_path / "release.json"
    newer_release.write_text(json.dumps(doc))
    feed = site.export(SERIAL + 4)
    with pytest.raises(FeedError) as info:
        import_feed(feed, newer_release, site.feed, site.trust())
    assert info.value.code == "feed_rollback" and not site.feed.exists()


def _tamper_payload(feed: Path) -> None:
    bundle = json.loads(feed.read_text())
    payload = bytearray(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    at = payload.index(b'"fixed": "0.31.0"') + len(b'"fixed": "0.')
    payload[at] = ord("1")  # floor 0.31.0 -> 0.11.0: one byte
    bundle["dsseEnvelope"]["payload"] = base64.b64encode(bytes(payload)).decode()
    feed.write_text(json.dumps(bundle))


def _flip_signature_byte(feed: Path) -> None:
    bundle = json.loads(feed.read_text())
    sig = bytearray(base64.b64decode(bundle["dsseEnvelope"]["signatures"][0]["sig"]))
    sig[-1] ^= 0x01
    bundle["dsseEnvelope"]["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    feed.write_text(json.dumps(bundle))


def _model_signature(site: Site) -> Path:
    model = site.root / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return signing.sign(model, site.key, site.root / "model.sig")


def _junk(path: Path) -> Path:
    path.write_bytes(b"\x00 not json")
    return path


CASES = {
    "altered payload byte": (lambda s: (f := s.export(SERIAL + 1), _tamper_payload(f), f)[2],
                             {}, "feed_signature_invalid"),
    "altered signature byte": (lambda s: (f := s.export(SERIAL + 1),
                                          _flip_signature_byte(f), f)[2],
                               {}, "feed_signature_invalid"),
    "unknown key": (lambda s: s.export(SERIAL + 1, key=s.other), {}, "feed_key_untrusted"),
    "revoked key": (lambda s: s.export(SERIAL + 1), {"revoked": True}, "feed_key_revoked"),
    "expired key": (lambda s: s.export(SERIAL + 1),
                    {"window": "not_after = 2020-01-01T00:00:00Z\n"}, "feed_key_expired"),
    "no trusted key": (lambda s: s.export(SERIAL + 1), {"trusted": False},
                       "feed_no_trusted_key"),
    "unsigned list": (lambda s: s.packaged, {}, "feed_unsigned"),
    "model signature": (_model_signature, {}, "feed_wrong_type"),
    "not a bundle": (lambda s: _junk(s.root / "junk"), {}, "feed_malformed"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_refusal_has_its_code_and_installs_nothing(tmp_path: Path, case: str) -> None:
    make, options, code = CASES[case]
    site = Site(tmp_path, **options)
    assert _refusal(site, make(site)) == code
    assert not site.feed.exists()


def test_the_refusal_codes_are_distinct() -> None:
    codes = [code for _, _, code in CASES.values()] + ["feed_rollback"]
    assert codes.count("feed_signature_invalid") == 2  # payload byte, signature byte
    assert len(set(codes)) == len(codes) - 1


def test_a_feed_is_not_a_model_signature(tmp_path: Path) -> None:
    site = Site(tmp_path)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    feed = site.export(SERIAL + 1)
    with pytest.raises(ApplianceError) as info:
        signing.verify(model, site.pub, feed)
    assert info.value.code == "bundle_unsupported"


def test_preflight_refuses_an_installed_feed_whose_key_was_revoked_since(
        tmp_path: Path) -> None:
    site = Site(tmp_path)
    site.import_(site.export(SERIAL + 1))
    print_ = signing.fingerprint(signing.load_public_key(site.pub))
    site.policy.write_text(site.policy.read_text().replace(
        "revoked = []", f"revoked = [{json.dumps(print_)}]"))
    in_force = list_in_force(site.packaged, site.feed, site.trust())
    assert in_force.feed is None and in_force.rejected is not None
    problems = run_preflight(in_force, INSTALLED, env={})
    assert [p.code for p in problems] == ["advisory_feed_rejected"]
    assert "feed_key_revoked" in problems[0].advisory


def test_cli_export_import_and_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                     ) -> None:
    site = Site(tmp_path)
    out = tmp_path / "cli.sig"
    assert main(["advisories", "export", "--private-key", str(site.key), "--serial",
                 str(SERIAL + 7), "--list", str(site.packaged), str(out)]) == 0
    assert f"serial {SERIAL + 7}" in capsys.readouterr().out
    assert main(["advisories", "import", "--policy", str(site.policy), str(out)]) == 0
    assert "signed by 'release'" in capsys.readouterr().out
    assert main(["check", "--policy", str(site.policy)]) == 0
    printed = capsys.readouterr()
    assert f"advisories: serial {SERIAL + 7}" in printed.out
    assert f"feed {site.feed} (signed by 'release')" in printed.out
    assert "days old" in printed.out and "advisories_stale" not in printed.err
    assert main(["advisories", "import", "--policy", str(site.policy), str(out)]) == 1
    assert "error[feed_rollback]" in capsys.readouterr().err


def test_check_warns_when_the_list_in_force_is_older_than_the_policy_allows(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    site = Site(tmp_path, max_age_days=30)
    old = dt.datetime.now(dt.UTC) - dt.timedelta(days=45)
    site.import_(site.export(SERIAL + 1, date=old))
    assert main(["check", "--policy", str(site.policy)]) == 0  # a warning, not a refusal
    printed = capsys.readouterr()
    assert "warning[advisories_stale]" in printed.err
    assert "45 days old" in printed.err and "advisories_max_age_days = 30" in printed.err
    assert main(["advisories", "show", "--policy", str(site.policy)]) == 0
    assert "(45.0 days old)" in capsys.readouterr().out


# ---- the rollback floor (issue 31): deleting or replacing the installed feed ----------------

def _codes(site: Site) -> list[str]:
    return [p.code for p in run_preflight(list_in_force(site.packaged, site.feed, site.trust()),
                                          INSTALLED, env={})]


def test_deleting_the_installed_feed_is_refused_not_a_silent_fallback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    site = Site(tmp_path)
    feed = site.export(SERIAL + 5)
    site.import_(feed)
    site.feed.unlink()
    in_force = list_in_force(site.packaged, site.feed, site.trust())
    assert in_force.floor == SERIAL + 5 and in_force.feed is None
    assert in_force.rolled_back is not None and in_force.rolled_back.code == "feed_below_floor"
    assert "missing" in in_force.rolled_back.message
    assert _codes(site) == ["advisory_feed_rolled_back"]
    assert main(["check", "--policy", str(site.policy)]) != 0
    err = capsys.readouterr().err
    assert "error[advisory_feed_rolled_back]" in err and "reset-floor" in err
    assert f"serial {SERIAL + 5}" in err
    site.import_(feed)  # re-installing the lost feed (serial == floor) is the repair
    assert _codes(site) == []


def test_replacing_the_feed_with_an_older_signed_one_is_refused(tmp_path: Path) -> None:
    site = Site(tmp_path)
    older = site.export(SERIAL + 2, out="older.sig")
    site.import_(site.export(SERIAL + 4))
    shutil.copyfile(older, site.feed)  # validly signed, but older than ever installed
    in_force = list_in_force(site.packaged, site.feed, site.trust())
    assert in_force.advisories.serial == SERIAL + 2
    assert in_force.rolled_back is not None and "older" in in_force.rolled_back.message
    assert _codes(site) == ["advisory_feed_rolled_back"]


def test_an_unreadable_feed_or_floor_after_an_import_is_refused(tmp_path: Path) -> None:
    site = Site(tmp_path)
    site.import_(site.export(SERIAL + 1))
    good = site.feed.read_bytes()
    site.feed.write_bytes(b"not a feed")
    assert _codes(site) == ["advisory_feed_rejected"]
    site.feed.write_bytes(good)
    assert _codes(site) == []
    floor = site.feed.with_name("feed.json.floor")
    for junk in (b"", b"20261207xx\n", b"-1\n"):
        floor.write_bytes(junk)
        in_force = list_in_force(site.packaged, site.feed, site.trust())
        assert in_force.rolled_back is not None
        assert in_force.rolled_back.code == "feed_floor_invalid", junk
        assert _codes(site) == ["advisory_feed_rolled_back"]
        with pytest.raises(FeedError) as info:  # nor does an import pass over it
            site.import_(site.export(SERIAL + 9, out="next.sig"))
        assert info.value.code == "feed_floor_invalid"


def test_an_import_never_lowers_the_floor(tmp_path: Path) -> None:
    site = Site(tmp_path)
    site.import_(site.export(SERIAL + 6))
    site.feed.unlink()
    assert _refusal(site, site.export(SERIAL + 3, out="older.sig")) == "feed_rollback"
    site.import_(site.export(SERIAL + 8, out="newer.sig"))
    assert site.feed.with_name("feed.json.floor").read_text() == f"{SERIAL + 8}\n"


def test_reset_floor_is_the_deliberate_way_back(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    site = Site(tmp_path)
    site.import_(site.export(SERIAL + 5))
    site.feed.unlink()
    assert main(["check", "--policy", str(site.policy)]) != 0
    capsys.readouterr()
    assert main(["advisories", "reset-floor", "--policy", str(site.policy)]) == 0
    assert f"{SERIAL + 5} -> {SERIAL}" in capsys.readouterr().out
    assert main(["check", "--policy", str(site.policy)]) == 0
    assert _codes(site) == []


def test_serve_refuses_a_rolled_back_feed_before_the_engine_starts(tmp_path: Path) -> None:
    from appliance.builtin.model import prepare
    from appliance.serve import Appliance

    site = Site(tmp_path)
    site.import_(site.export(SERIAL + 5))
    site.feed.unlink()
    demo = load_policy(REPO / "policies" / "cpu-demo.toml")
    mine = load_policy(site.policy)
    policy = demo.model_copy(update={"trust": mine.trust, "preflight": demo.preflight.model_copy(
        update={"advisories": mine.preflight.advisories,
                "advisory_feed": mine.preflight.advisory_feed})})
    model = prepare()
    app = Appliance(policy=policy, model_dir=model.model_dir, public_key=model.public_key,
                    api_keys=["k" * 24], host="127.0.0.1", port=0)
    try:
        with pytest.raises(ApplianceError) as info:
            app.check()
    finally:
        app.stop()
    assert info.value.code == "advisory_feed_rolled_back"
    assert f"serial {SERIAL + 5}" in info.value.message and app.runs == []
