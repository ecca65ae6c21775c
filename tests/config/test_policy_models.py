"""``[[models]]`` (appliance.config.models, issue 23): each entry's engine is ``[engine]``
overlaid with its own keys; conflicting, duplicate and overlapping entries are refused with
their own codes; without ``[[models]]`` the one model of ``[model]`` is the same shape."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.cli import main
from appliance.config.engine import EnginePolicy, cpu_ids
from appliance.config.models import ServedModel, check_host, served_models
from appliance.config.policy import load_policy
from appliance.engine.launcher import EngineSpec, build_env
from appliance.errors import PolicyError
from appliance.store import is_store_ref

REPO = Path(__file__).resolve().parents[2]

TWO = """\
schema_version = 1
[engine]
device = "cpu"
max_model_len = 2048
max_num_seqs = 16
[engine.cpu]
kvcache_space_gib = 1
[[models]]
served_name = "small"
model = "smollm2"
[models.engine.cpu]
omp_threads_bind = "0"
[[models]]
served_name = "tiny"
model = "./tiny"
[models.engine]
max_model_len = 1024
[models.engine.cpu]
omp_threads_bind = "1"
kvcache_space_gib = 2
"""


def _load(tmp_path: Path, text: str) -> object:
    path = tmp_path / "p.toml"
    path.write_text(text)
    return load_policy(path)


def _refused(tmp_path: Path, text: str) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        _load(tmp_path, text)
    return info.value


def test_entries_inherit_engine_and_override_it(tmp_path: Path) -> None:
    policy = load_policy(_write(tmp_path, TWO))
    small, tiny = policy.models
    assert (small.served_name, small.model) == ("small", "smollm2")
    assert small.engine.device == "cpu" and small.engine.max_model_len == 2048
    assert small.engine.cpu.omp_threads_bind == "0" and small.engine.cpu.kvcache_space_gib == 1
    assert tiny.engine.max_model_len == 1024 and tiny.engine.max_num_seqs == 16
    assert tiny.engine.cpu.omp_threads_bind == "1" and tiny.engine.cpu.kvcache_space_gib == 2
    models = served_models(policy, None, is_store_ref)
    assert [(m.served_name, m.ref, m.path) for m in models] == [
        ("small", "smollm2", None), ("tiny", None, tmp_path / "tiny")]


def test_single_model_policy_is_the_one_entry_case() -> None:
    policy = load_policy(REPO / "policies" / "cpu-demo.toml")
    assert policy.models == ()
    (one,) = served_models(policy, "smollm2@abcd1234", is_store_ref)
    assert one == ServedModel("appliance-model", policy.engine, ref="smollm2@abcd1234")
    (folder,) = served_models(policy, "/srv/models/m", is_store_ref)
    assert folder.path == Path("/srv/models/m") and folder.ref is None
    with pytest.raises(PolicyError, match="no model to serve"):
        served_models(policy, None, is_store_ref)


def test_models_beside_model_or_serve_model_is_refused(tmp_path: Path) -> None:
    err = _refused(tmp_path, '[model]\nserved_name = "x"\n' + TWO.split("\n", 1)[1])
    assert err.code == "models_conflict" and err.where is not None and \
        err.where.endswith(": model") and "[[models]]" in (err.fix or "")
    policy = load_policy(_write(tmp_path, TWO))
    with pytest.raises(PolicyError) as info:
        served_models(policy, "smollm2", is_store_ref)
    assert info.value.code == "models_conflict" and info.value.where == "--model"
    assert main(["serve", "--policy", str(tmp_path / "p.toml"), "--model", "smollm2"]) == 2


def test_duplicate_names_and_bad_entries_are_refused(tmp_path: Path) -> None:
    err = _refused(tmp_path, TWO.replace('served_name = "tiny"', 'served_name = "small"'))
    assert err.code == "models_duplicate" and err.where is not None
    assert err.where.endswith("models.1.served_name")
    err = _refused(tmp_path, TWO.replace('served_name = "tiny"', 'served_name = "a b"'))
    assert err.code == "policy_invalid" and "models.1.served_name" in (err.where or "")
    err = _refused(tmp_path, TWO.replace("max_model_len = 1024", "max_model_len = 1"))
    assert err.code == "policy_invalid" and "models.1.engine.max_model_len" in (err.where or "")
    err = _refused(tmp_path, TWO.replace('model = "./tiny"', 'model = "./tiny"\nport = 1'))
    assert err.code == "policy_invalid" and "models.1.port" in (err.where or "")
    assert _refused(tmp_path, "models = []\n").code == "policy_invalid"


def test_overlapping_resources_are_refused(tmp_path: Path) -> None:
    err = _refused(tmp_path, TWO.replace('omp_threads_bind = "1"', 'omp_threads_bind = "0-1"'))
    assert err.code == "models_cpu_overlap" and "core 0" in err.message
    assert (err.where or "").endswith("models.1.engine.cpu.omp_threads_bind")
    gpu = TWO.replace('device = "cpu"', 'device = "gpu"')
    err = _refused(tmp_path, gpu)  # neither names devices: both would use every GPU
    assert err.code == "models_gpu_overlap"
    split = gpu.replace('[models.engine.cpu]\nomp_threads_bind = "0"',
                        '[models.engine.gpu]\ndevices = [0, 1]', 1)
    split = split.replace('[models.engine.cpu]\nomp_threads_bind = "1"',
                          '[models.engine.gpu]\ndevices = [1]\n[models.engine.cpu]')
    assert _refused(tmp_path, split).code == "models_gpu_overlap"
    ok = load_policy(_write(tmp_path, split.replace("devices = [1]", "devices = [2, 3]")))
    spec = EngineSpec(model_dir=tmp_path, served_name="tiny", engine=ok.models[1].engine,
                      runtime_dir=tmp_path)
    assert build_env(spec, {})["CUDA_VISIBLE_DEVICES"] == "2,3"


def test_several_models_refuse_cluster_and_workers(tmp_path: Path) -> None:
    cluster = TWO + '[cluster]\nnodes = ["10.0.0.1", "10.0.0.2"]\nsecret_file = "s"\n'
    assert _refused(tmp_path, cluster).code == "models_cluster"
    workers = TWO + ('[gateway]\nworkers = 2\n[admission]\nbackend = "redis"\n'
                     '[admission.redis]\nurl = "redis://127.0.0.1:6379/0"\n')
    err = _refused(tmp_path, workers)
    assert err.code == "models_workers" and (err.where or "").endswith("gateway.workers")


def test_host_check_refuses_foreign_cores_and_too_much_kv_cache(tmp_path: Path) -> None:
    policy = load_policy(_write(tmp_path, TWO))
    models = served_models(policy, None, is_store_ref)
    check_host(models, cpus={0, 1}, memory_bytes=8 * 2**30)
    with pytest.raises(PolicyError) as info:
        check_host(models, cpus={0}, memory_bytes=8 * 2**30)
    assert info.value.code == "models_over_host" and "[1]" in info.value.message
    with pytest.raises(PolicyError) as info:
        check_host(models, cpus={0, 1}, memory_bytes=2 * 2**30)  # 1 + 2 GiB of KV cache
    assert info.value.code == "models_over_host" and "3 GiB" in info.value.message
    check_host(models[:1], cpus=set(), memory_bytes=0)  # one model: nothing to split


def test_cpu_ids() -> None:
    assert cpu_ids("0-2,5|7") == {0, 1, 2, 5, 7}
    assert cpu_ids("x") is None and cpu_ids("3-1") is None
    assert EnginePolicy().gpu.devices is None


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.toml"
    path.write_text(text)
    return path


def test_check_prints_each_model(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from appliance.cli.check import _print_models

    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: {0, 1, 2, 3})
    _print_models(load_policy(_write(tmp_path, TWO)))
    out = capsys.readouterr().out
    assert "model small: smollm2 (cpu, cores 0, KV cache 1 GiB, max_model_len 2048)" in out
    assert f"model tiny: {tmp_path / 'tiny'} (cpu, cores 1, KV cache 2 GiB" in out
