"""Every registry of the appliance's layout is complete (issue 20; docs/where-things-go.md):
a new policy key, CLI command group, engine flag, gateway route, request field bound or
preflight rule is one place plus one registry line, and these tests fail when the line is
missing."""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import appliance.cli as cli
import appliance.config as config_pkg
from appliance.config.base import StrictModel
from appliance.config.gateway import GatewayLimits, GatewayPolicy
from appliance.config.policy import Policy
from appliance.engine.launcher import EngineSpec, engine_flags
from appliance.gateway import GatewaySettings, create_app
from appliance.gateway.chat.bounds import BOOLEAN, NUMERIC
from appliance.gateway.chat.request_checks import SIMPLE
from appliance.gateway.http.openapi import build_document
from appliance.gateway.http.routes import ROUTES, bind
from appliance.preflight import PREFLIGHT_CODES, RULES, PreflightInput, run_preflight
from appliance.preflight.kernels import KERNEL_CODES

REPO = Path(__file__).resolve().parents[1]
SETTINGS = {"upstream_url": "http://127.0.0.1:9", "served_model_name": "m",
            "api_keys": ["k" * 20]}


# -- CLI: one module per command group, each listed in cli.COMMANDS --------------------------
def test_every_cli_command_module_is_registered() -> None:
    modules = {m.name for m in pkgutil.iter_modules(cli.__path__)
               if not m.name.startswith("_")}
    registered = {c.__name__.rpartition(".")[2] for c in cli.COMMANDS
                  if c.__name__.startswith("appliance.cli.")}
    assert modules == registered
    assert all(callable(getattr(c, "register", None)) for c in cli.COMMANDS)


def test_command_table_names_what_each_group_registers() -> None:
    """cli.GROUPS is the light table the lazy parser trusts: each group's listed
    commands are exactly what its ``register`` adds, and no name is listed twice."""
    for group in cli.GROUPS:
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(group.module).register(sub)
        assert tuple(sub.choices) == group.commands, group
    names = [name for group in cli.GROUPS for name in group.commands]
    assert len(names) == len(set(names))
    assert [g.module for g in cli.GROUPS] == [c.__name__ for c in cli.COMMANDS]


def test_scan_command_imports_only_the_scanner() -> None:
    """``appliance scan DIR`` builds a parser with the scan group alone: no pydantic,
    policy models, API keys or numpy are imported before the scan (issue 30)."""
    code = ("import sys\nfrom appliance.cli import build_parser\n"
            "args = build_parser(['scan', '--quiet', 'x']).parse_args(['scan', '--quiet', 'x'])\n"
            "print(args.command, sorted(m for m in ('pydantic', 'numpy', 'appliance.config', "
            "'appliance.cli.keys', 'appliance.convert') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=REPO)
    assert out.stdout.split() == ["scan", "[]"], out
    full = cli.build_parser([])  # no command: every group, as ``appliance --help`` shows
    sub = next(a for a in full._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == [n for g in cli.GROUPS for n in g.commands]


def test_scan_as_the_process_command_reports_completely(tmp_path: Path) -> None:
    """``appliance scan`` run as a process leaves through the fast exit (like ``python -m
    scanner``): the whole report is written and the exit status is the verdict's."""
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    (tmp_path / "evil.pkl").write_bytes(b"\x80\x02cposix\nsystem\nX\x04\x00\x00\x00true\x85R.")
    out = subprocess.run([sys.executable, "-m", "appliance.cli", "scan", "--format", "json",
                          "--quiet", str(tmp_path)], capture_output=True, text=True, cwd=REPO,
                         timeout=120)
    report = json.loads(out.stdout)
    assert out.returncode == 1 and report["verdict"] == "malicious", out.stderr
    assert report["summary"]["files_scanned"] == 2


def test_every_subcommand_has_a_function() -> None:
    """Each leaf command (``appliance models list``, ``appliance bench tools`` ...) or a
    parser above it sets ``func``."""
    def leaves(parser: argparse.ArgumentParser, path: tuple[str, ...],
               func: Any) -> list[tuple[tuple[str, ...], Any]]:
        func = parser.get_default("func") or func
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            return [(path, func)]
        return [leaf for sub in subs for name, child in sub.choices.items()
                for leaf in leaves(child, (*path, name), func)]

    found = leaves(cli.build_parser(), (), None)
    assert len(found) >= 19
    assert [path for path, func in found if not callable(func)] == []


# -- policy: one strict model per table, every table in Policy --------------------------------
def _tables(model: type[BaseModel]) -> set[type[BaseModel]]:
    out: set[type[BaseModel]] = set()
    for field in model.model_fields.values():
        for arg in (field.annotation, *getattr(field.annotation, "__args__", ())):
            if isinstance(arg, type) and issubclass(arg, BaseModel) and arg not in out:
                out |= {arg, *_tables(arg)}
    return out


def test_every_policy_table_is_strict_and_reachable_from_policy() -> None:
    reachable = _tables(Policy)
    for info in pkgutil.iter_modules(config_pkg.__path__):
        module = importlib.import_module(f"appliance.config.{info.name}")
        for obj in vars(module).values():
            if (isinstance(obj, type) and issubclass(obj, BaseModel)
                    and obj.__module__ == module.__name__ and obj is not StrictModel):
                assert issubclass(obj, StrictModel), obj
    assert {GatewayPolicy, GatewayLimits} & reachable
    assert all(issubclass(t, StrictModel) for t in reachable)


# Every policy key reaching its runtime setting (one table): tests/runtime/test_policy_to_runtime.py


def test_admission_and_drain_defaults_are_the_policys() -> None:
    settings = GatewaySettings(**SETTINGS)
    policy = Policy()
    assert settings.max_pending == policy.admission.max_pending == 256
    assert settings.drain_timeout_s == policy.supervisor.drain_timeout_s


# -- engine flags: declared once in launcher.engine_flags ---------------------------------------
def test_every_engine_policy_setting_reaches_an_engine_flag(tmp_path: Path) -> None:
    policy = Policy().engine.model_copy(update={
        "enforce_eager": True, "max_num_batched_tokens": 64, "num_kv_blocks": 8})
    flags = dict(engine_flags(EngineSpec(model_dir=tmp_path, served_name="m", engine=policy,
                                         runtime_dir=tmp_path)))
    assert flags["--max-model-len"] == str(policy.max_model_len)
    assert flags["--max-num-seqs"] == str(policy.max_num_seqs)
    assert flags["--dtype"] == policy.dtype
    assert flags["--tool-call-parser"] == policy.tool_call_parser
    assert flags["--max-num-batched-tokens"] == "64" and flags["--num-gpu-blocks-override"] == "8"
    assert "--enforce-eager" in flags


# -- gateway routes: routes.ROUTES, bound to handlers in app.route_table -----------------------
def test_every_route_row_has_a_handler_and_is_documented() -> None:
    settings = GatewaySettings(**SETTINGS)
    app = create_app(settings)
    assert [r.path for r in app.table.routes] == [s.path for s in ROUTES]
    assert list(build_document(settings)["paths"]) == [s.path for s in ROUTES]
    assert len({s.operation_id for s in ROUTES}) == len(ROUTES)


def test_bind_refuses_a_row_without_handler_or_a_handler_without_row() -> None:
    async def handler(scope: Any, receive: Any, send: Any) -> None:
        return None

    handlers = {s.path: handler for s in ROUTES}
    assert len(bind(handlers)) == len(ROUTES)
    with pytest.raises(ValueError, match="no handler for \\['/metrics'\\]"):
        bind({p: h for p, h in handlers.items() if p != "/metrics"})
    with pytest.raises(ValueError, match="no route row for \\['/v1/extra'\\]"):
        bind({**handlers, "/v1/extra": handler})


# -- request field bounds: chat/bounds.py for every simple field ------------------------------
def test_every_simple_chat_field_has_its_bounds_declared() -> None:
    assert set(NUMERIC) | set(BOOLEAN) | {"user", "stop", "logit_bias"} == SIMPLE


# -- preflight rules: preflight.RULES -----------------------------------------------------------
def test_every_preflight_code_is_reported_by_a_registered_rule() -> None:
    assert {code for rule in RULES for code in rule.codes} == set(PREFLIGHT_CODES) | set(
        KERNEL_CODES)
    assert len({rule.name for rule in RULES}) == len(RULES)


def test_each_environment_rule_fires_on_its_input() -> None:
    given = PreflightInput(env={"PYTHONOPTIMIZE": "1", "VLLM_SERVER_DEV_MODE": "1",
                                "VLLM_PLUGINS": "x"}, optimize_flag=0, floors={}, packages=())
    fired = {rule.name: [p.code for p in rule.check(given)] for rule in RULES}
    assert fired == {"python_optimize": ["python_optimize_not_allowed"],
                     "forbidden_environment": ["forbidden_environment"],
                     "vllm_plugins": ["forbidden_environment"], "advisory_feed": [],
                     "package_floors": [], "engine_kernels": []}


def test_run_preflight_runs_the_registered_rules_in_order(tmp_path: Path) -> None:
    advisories = REPO / "policies" / "advisories.json"
    problems = run_preflight(advisories, ("no-such-package-h20",),
                             env={"VLLM_PLUGINS": "x", "PYTHONOPTIMIZE": "1"})
    assert [(p.code, p.subject) for p in problems] == [
        ("python_optimize_not_allowed", "PYTHONOPTIMIZE / python -O"),
        ("forbidden_environment", "VLLM_PLUGINS"),
        ("package_missing", "no-such-package-h20")]
