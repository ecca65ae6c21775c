"""[engine.parallel], [engine.gpu], quantization / KV-cache / prefix-caching keys and
[cluster]: bounded and strict in the policy, refused before launch when the engine cannot
run them, mapped into the launcher's argv (parsed by the installed vLLM's own parser)."""

import json
import os
from pathlib import Path

import pytest

from appliance.config.policy import EnginePolicy, load_policy
from appliance.engine.headless import HEADLESS_CODE
from appliance.engine.launcher import ClusterRole, EngineSpec, build_argv, build_env, command_line
from appliance.engine.parallel import check_parallel, model_heads, parallel_flags, visible_gpus
from appliance.errors import PolicyError

REPO = Path(__file__).resolve().parents[2]


def parallel_argv(engine: object) -> list[str]:
    """The parallel/GPU flags as the engine's command line carries them."""
    return command_line(parallel_flags(engine))[3:]  # type: ignore[arg-type]


def _policy(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "p.toml"
    path.write_text("schema_version = 1\n" + body)
    return path


def _engine(**update: object) -> EnginePolicy:
    base = load_policy(REPO / "policies" / "cpu-demo.toml").engine
    return EnginePolicy.model_validate({**base.model_dump(), **update})


def _model(tmp_path: Path, heads: int = 4, kv: int = 2) -> Path:
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(
        {"num_attention_heads": heads, "num_key_value_heads": kv}))
    (folder / "chat_template.jinja").write_text("{{ messages }}")
    return folder


def test_parallel_keys_load_and_map_into_argv(tmp_path: Path) -> None:
    policy = load_policy(_policy(tmp_path, """
[engine]
device = "gpu"
quantization = "fp8"
kv_cache_dtype = "fp8_e4m3"
enable_prefix_caching = true
max_num_batched_tokens = 8192
[engine.gpu]
memory_fraction = 0.85
[engine.parallel]
tensor_parallel_size = 8
pipeline_parallel_size = 2
data_parallel_size = 2
"""))
    argv = parallel_argv(policy.engine)
    assert argv == ["--tensor-parallel-size", "8", "--pipeline-parallel-size", "2",
                    "--data-parallel-size", "2", "--quantization", "fp8",
                    "--kv-cache-dtype", "fp8_e4m3", "--enable-prefix-caching",
                    "--gpu-memory-utilization", "0.85"]
    assert policy.engine.parallel.ranks == 32


def test_defaults_add_no_arguments() -> None:
    assert parallel_argv(_engine()) == []
    assert parallel_argv(_engine(enable_prefix_caching=False)) == ["--no-enable-prefix-caching"]
    # the GPU fraction means nothing to the CPU build
    assert parallel_argv(_engine(gpu={"memory_fraction": 0.5})) == []


@pytest.mark.parametrize(("body", "field"), [
    ("[engine.parallel]\ntensor_parallel_size = 0\n", "engine.parallel.tensor_parallel_size"),
    ("[engine.parallel]\ntensor_parallel_size = 65\n", "engine.parallel.tensor_parallel_size"),
    ("[engine.parallel]\npipeline_parallel_size = 17\n",
     "engine.parallel.pipeline_parallel_size"),
    ("[engine.parallel]\ndata_parallel_size = -1\n", "engine.parallel.data_parallel_size"),
    ("[engine.parallel]\nexpert_parallel = true\n", "engine.parallel.expert_parallel"),
    ("[engine]\nquantization = \"gguf\"\n", "engine.quantization"),
    ("[engine]\nquantization = \"torchao\"\n", "engine.quantization"),
    ("[engine]\nquantization = \"bitsandbytes\"\n", "engine.quantization"),
    ("[engine]\nkv_cache_dtype = \"fp8_inc\"\n", "engine.kv_cache_dtype"),
    ("[engine]\nenable_prefix_caching = \"yes\"\n", "engine.enable_prefix_caching"),
    ("[engine.gpu]\nmemory_fraction = 0.99\n", "engine.gpu.memory_fraction"),
    ("[engine.gpu]\nmemory_fraction = 0.05\n", "engine.gpu.memory_fraction"),
    ("[cluster]\nnodes = [\"10.0.0.1\"]\nsecret_file = \"s\"\n", "cluster.nodes"),
    ("[cluster]\nnodes = [\"10.0.0.1\", \"10.0.0.1\"]\nsecret_file = \"s\"\n", "cluster.nodes"),
    ("[cluster]\nnodes = [\"10.0.0.1\", \"127.0.0.1\"]\nsecret_file = \"s\"\n",
     "cluster.nodes"),
    ("[cluster]\nnodes = [\"10.0.0.1\", \"node2\"]\nsecret_file = \"s\"\n", "cluster.nodes"),
    ("[cluster]\nnodes = [\"10.0.0.1\", \"10.0.0.2\"]\n", "cluster.secret_file"),
    ("[cluster]\nnodes = [\"10.0.0.1\", \"10.0.0.2\"]\nsecret_file = \"s\"\nport = 80\n",
     "cluster.port"),
    ("[cluster]\nnodes = [\"10.0.0.1\", \"10.0.0.2\"]\nsecret_file = \"s\"\n"
     "firewall = \"iptables\"\n", "cluster.firewall"),
])
def test_bad_scale_keys_are_refused_naming_the_field(tmp_path: Path, body: str,
                                                     field: str) -> None:
    with pytest.raises(PolicyError) as info:
        load_policy(_policy(tmp_path, body))
    assert info.value.code == "policy_invalid"
    assert field in str(info.value.where)


def test_cluster_policy_resolves_the_secret(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    policy = load_policy(_policy(tmp_path, """
[cluster]
nodes = ["10.99.0.1", "10.99.0.2"]
secret_file = "cluster.secret"
open_ports = [22]
"""))
    assert policy.cluster is not None
    assert policy.cluster.secret_path() == tmp_path / "cluster.secret"
    assert policy.cluster.port == 29511 and policy.cluster.firewall == "nftables"
    creds = load_policy(_policy(tmp_path, """
[cluster]
nodes = ["10.99.0.1", "10.99.0.2"]
secret_file = "${CREDENTIALS_DIRECTORY}/cluster-secret"
""")).cluster
    assert creds is not None
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    with pytest.raises(ValueError, match="CREDENTIALS_DIRECTORY"):
        creds.secret_path()
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", "/run/credentials/x")
    assert creds.secret_path() == Path("/run/credentials/x/cluster-secret")


def _refusal(engine: EnginePolicy, model: Path, **kw: object) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        check_parallel(engine, model, **kw)  # type: ignore[arg-type]
    return info.value


def test_pipeline_parallel_is_refused_on_the_cpu_build(tmp_path: Path) -> None:
    err = _refusal(_engine(parallel={"pipeline_parallel_size": 2},
                           cpu={"omp_threads_bind": "0|1"}), _model(tmp_path), cpus={0, 1})
    assert err.code == "pipeline_parallel_cpu"
    assert err.where == "engine.parallel.pipeline_parallel_size"
    assert "pipeline_parallel_size = 1" in str(err.fix)
    # on a GPU host it is allowed (TP*PP = 2 ranks, 2 GPUs)
    check_parallel(_engine(device="gpu", parallel={"pipeline_parallel_size": 2}),
                   _model(tmp_path), gpus=2)


@pytest.mark.parametrize(("heads", "kv", "tp", "ok"), [
    (9, 3, 2, False),  # the built-in SmolLM2-135M: TP=2 refused at config by vLLM
    (9, 3, 3, True),   # ... TP=3 works (measured)
    (4, 2, 2, True),   # the test-built tiny model
    (4, 2, 4, True),   # KV heads replicated (4 % 2 == 0)
    (12, 4, 8, False),
    (32, 8, 8, True),
    (24, 8, 6, False),  # 6 divides 24 but neither 8 % 6 nor 6 % 8
])
def test_tensor_parallel_must_divide_the_heads(tmp_path: Path, heads: int, kv: int, tp: int,
                                               ok: bool) -> None:
    engine = _engine(device="gpu", parallel={"tensor_parallel_size": tp})
    model = _model(tmp_path, heads, kv)
    if ok:
        check_parallel(engine, model, gpus=tp)
        return
    err = _refusal(engine, model, gpus=tp)
    assert err.code == "tensor_parallel_heads"
    assert err.where == "engine.parallel.tensor_parallel_size"
    assert f"num_attention_heads {heads}" in str(err)


def test_tensor_parallel_without_readable_heads_fails_closed(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    engine = _engine(device="gpu", parallel={"tensor_parallel_size": 2})
    assert _refusal(engine, model, gpus=2).code == "model_config_unreadable"
    (model / "config.json").write_text('{"num_attention_heads": true}')
    assert model_heads(model) is None
    assert _refusal(engine, model, gpus=2).code == "model_config_unreadable"
    (model / "config.json").write_text('{"text_config": {"num_attention_heads": 8}}')
    assert model_heads(model) == (8, 8)


def test_ranks_beyond_the_visible_gpus_are_refused(tmp_path: Path) -> None:
    engine = _engine(device="gpu", parallel={"tensor_parallel_size": 4,
                                             "data_parallel_size": 2})
    err = _refusal(engine, _model(tmp_path, 8, 8), gpus=4)
    assert err.code == "parallel_exceeds_devices" and "8 engine ranks" in str(err)
    check_parallel(engine, _model(tmp_path, 8, 8), gpus=8)
    check_parallel(engine, _model(tmp_path, 8, 8), gpus=None)  # not knowable: not checked
    # two nodes: each runs half of TP*PP
    check_parallel(_engine(device="gpu", parallel={"tensor_parallel_size": 8}),
                   _model(tmp_path, 8, 8), nodes=2, gpus=4)


def test_visible_gpus_counts_devices(tmp_path: Path) -> None:
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0,1,2"}, tmp_path) == 3
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, tmp_path) == 0
    assert visible_gpus({}, tmp_path) is None
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (tmp_path / name).touch()
    assert visible_gpus({}, tmp_path) == 2


def test_cluster_layouts(tmp_path: Path) -> None:
    model = _model(tmp_path)
    err = _refusal(_engine(parallel={"tensor_parallel_size": 2}), model, nodes=4, cpus={0, 1})
    assert err.code == "cluster_world_size"
    err = _refusal(_engine(parallel={"tensor_parallel_size": 2, "data_parallel_size": 2}),
                   model, nodes=2, cpus={0, 1})
    assert err.code == "cluster_data_parallel"
    # TP=2 over two nodes: one rank per node, the default binding fits
    check_parallel(_engine(parallel={"tensor_parallel_size": 2}), model, nodes=2, cpus={0, 1})


def test_cpu_binding_must_give_one_group_per_rank(tmp_path: Path) -> None:
    model = _model(tmp_path)
    err = _refusal(_engine(parallel={"data_parallel_size": 2}), model, cpus={0, 1})
    assert err.code == "cpu_binding_mismatch" and err.where == "engine.cpu.omp_threads_bind"
    assert "'0|1'" in str(err.fix)
    check_parallel(_engine(parallel={"data_parallel_size": 2},
                           cpu={"omp_threads_bind": "0|1"}), model, cpus={0, 1})
    err = _refusal(_engine(parallel={"data_parallel_size": 2},
                           cpu={"omp_threads_bind": "0|7"}), model, cpus={0, 1})
    assert err.code == "cpu_binding_mismatch" and "'7'" in str(err)


def test_cluster_argv_and_env(tmp_path: Path) -> None:
    model = _model(tmp_path)
    role = ClusterRole(node_rank=1, nodes=("10.99.0.1", "10.99.0.2"), port=29511,
                       interface="e-n1")
    engine = _engine(parallel={"tensor_parallel_size": 2})
    worker = EngineSpec(model_dir=model, served_name="m", engine=engine,
                        runtime_dir=tmp_path / "run", cluster=role)
    argv = build_argv(worker)
    assert argv[1:3] == ["-c", HEADLESS_CODE]
    joined = " ".join(argv)
    assert "--nnodes 2 --node-rank 1 --master-addr 10.99.0.1 --master-port 29511" in joined
    assert argv[-1] == "--headless" and "--tensor-parallel-size 2" in joined
    env = build_env(worker, {"PATH": "/usr/bin"})
    assert env["VLLM_HOST_IP"] == "10.99.0.2" and env["GLOO_SOCKET_IFNAME"] == "e-n1"
    head = EngineSpec(model_dir=model, served_name="m", engine=engine,
                      runtime_dir=tmp_path / "run",
                      cluster=ClusterRole(0, role.nodes, 29511, "e-n0"))
    argv = build_argv(head)
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert "--headless" not in argv and "--uds" in argv
    args = _installed_parse(argv[3:])
    assert (args.nnodes, args.node_rank, args.master_addr, args.master_port) == \
        (2, 0, "10.99.0.1", 29511)
    assert args.tensor_parallel_size == 2


def _installed_parse(argv: list[str]):  # type: ignore[no-untyped-def]
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    validate_parsed_serve_args(args)
    return args


def test_scale_argv_parses_with_the_installed_parser(tmp_path: Path) -> None:
    engine = _engine(parallel={"tensor_parallel_size": 2, "data_parallel_size": 2},
                     cpu={"omp_threads_bind": "0|1|0|1"}, enable_prefix_caching=True,
                     kv_cache_dtype="bfloat16", max_num_batched_tokens=4096)
    spec = EngineSpec(model_dir=_model(tmp_path), served_name="m", engine=engine,
                      runtime_dir=tmp_path / "run")
    args = _installed_parse(build_argv(spec)[3:])
    assert args.tensor_parallel_size == 2 and args.data_parallel_size == 2
    assert args.enable_prefix_caching is True and args.kv_cache_dtype == "bfloat16"
    assert args.max_num_batched_tokens == 4096

