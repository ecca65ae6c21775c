"""The engine's CPU kernels run on an emulated CPU: the harness (issue 35).

Two halves in one file:

- run as a script (``python tests/preflight/emulated_cpu.py --steps ...``) it is the
  harness: in ONE process it loads the engine's kernels through the appliance's own probe
  (:func:`appliance.preflight.kernels.probe_in_process`, vLLM's dispatch picks the library;
  nothing here names one), prints the preflight report, runs the kernel ops the built-in
  model uses (``rms_norm``, ``fused_add_rms_norm``, ``rotary_embedding``, ``silu_and_mul``
  and vLLM's CPU paged attention: KV-cache write, scheduler metadata, attention) against
  pure-torch references, and optionally one greedy generation of a tiny random-weight model
  with vLLM's engine kept in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``). It prints
  one ``HARNESS {json}`` line as each step begins and one with its result; a result that is
  off its reference ends the process with exit 1.
- imported (by the tests), :func:`run` starts that script under ``qemu-x86_64 -cpu MODEL``
  (Debian's ``qemu-user``, user-mode emulation: only the started process is emulated, a
  child it spawns runs natively, hence one process) and :class:`Outcome` names how it ended:
  a signal by name (SIGILL: an instruction the emulated CPU lacks), the step it died in.

qemu's TCG (7.2, Debian 12) emulates up to AVX2: it has no AVX-512 at all, so the AVX-512
CPU models (``Skylake-Server-noTSX-IBRS``, ``Cooperlake``, ``max``) run as AVX2 CPUs there
(measured: torch capability ``AVX2``, ``_is_avx512_supported()`` False under each).

Inputs are fixed seeds; tolerances are those of the dtype (bf16: 8 bits of mantissa).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).resolve()
MARK = "HARNESS "
QEMU = "qemu-x86_64"
AVX2_ONLY = "Haswell-noTSX"
"""A Haswell without TSX: AVX2, FMA, F16C, BMI2, no AVX-512 (what an AVX2-only EPYC has)."""

STEPS = ("torch", "preflight", "ops")


# --- host side -------------------------------------------------------------------------------

@dataclass
class Outcome:
    """How one harness process ended: ``returncode`` (negative: killed by that signal),
    ``results`` the step results it printed (step name -> result object), ``begun`` the
    steps it started, ``seconds`` its wall time, ``tail`` the last lines of its output."""

    cpu: str
    returncode: int
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    begun: list[str] = field(default_factory=list)
    seconds: float = 0.0
    tail: str = ""

    @property
    def signal_name(self) -> str | None:
        if self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"

    @property
    def failed_step(self) -> str | None:
        return next((s for s in self.begun if s not in self.results), None)

    def explain(self) -> str:
        """One paragraph for a failure message: the CPU model, the signal by name or the exit
        status, the step it died in, the output's tail."""
        where = self.failed_step or "after its last step"
        if self.signal_name == "SIGILL":
            how = ("died with SIGILL (illegal instruction: code built for a CPU newer than "
                   f"the emulated {self.cpu} ran)")
        elif self.signal_name:
            how = f"died with {self.signal_name}"
        else:
            how = f"exited with status {self.returncode}"
        return (f"the harness on the emulated {self.cpu} CPU {how} in step {where!r} after "
                f"{self.seconds:.0f} s; results so far: {json.dumps(self.results)}\n"
                f"--- output tail ---\n{self.tail}")


def qemu() -> str | None:
    """The ``qemu-x86_64`` binary, or None (install Debian's ``qemu-user``)."""
    return shutil.which(QEMU)


def run(cpu: str, *args: str, timeout_s: float, env: dict[str, str] | None = None,
        native: bool = False) -> Outcome:
    """Run the harness under ``qemu-x86_64 -cpu cpu`` (or natively with ``native``) with
    ``args``; raises ``subprocess.TimeoutExpired`` past ``timeout_s`` (the process is killed)."""
    argv = [sys.executable, str(SCRIPT), *args]
    if not native:
        binary = qemu()
        assert binary, "qemu-x86_64 is not installed"
        argv = [binary, "-cpu", cpu, *argv]
    full = {**os.environ, "PYTHONPATH": str(ROOT), "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            "VLLM_CPU_OMP_THREADS_BIND": "nobind", **(env or {})}
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=full,
                          stdin=subprocess.DEVNULL, cwd=ROOT, check=False)
    outcome = Outcome(cpu="native" if native else cpu, returncode=done.returncode,
                      seconds=time.monotonic() - start)
    for line in done.stdout.splitlines():
        if not line.startswith(MARK):
            continue
        record = json.loads(line[len(MARK):])
        if record.get("begin"):
            outcome.begun.append(record["step"])
        else:
            outcome.results[record["step"]] = record
    noise = [x for x in (done.stdout + "\n" + done.stderr).splitlines()
             if x.strip() and "TCG doesn't support requested feature" not in x]
    outcome.tail = "\n".join(noise[-25:])
    return outcome


def build_tiny_model(dst: Path, seed: int = 35) -> Path:
    """A random-weight 2-layer Llama (hidden 128, 4 heads, 2 KV heads, head 32, vocab 512,
    bf16 safetensors) in ``dst``; weights drawn with ``initializer_range`` 0.2 so that greedy
    choices are not near-ties that kernel rounding could flip. No tokenizer: the harness
    feeds token ids."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=32, max_position_embeddings=256, initializer_range=0.2,
                         tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(dst, safe_serialization=True)
    return dst


# --- the harness (runs in the emulated process) ---------------------------------------------

def _say(record: dict[str, Any]) -> None:
    print(MARK + json.dumps(record), flush=True)


def _force(library: str) -> None:
    """Break vLLM's dispatch on purpose: make torch.cpu claim the CPU features that select
    ``library`` (``_C``: AVX-512 with BF16; ``_C_AVX512``: AVX-512 without)."""
    import torch

    answers = {"_C": {"_is_avx512_supported": True, "_is_avx512_bf16_supported": True},
               "_C_AVX512": {"_is_avx512_supported": True, "_is_avx512_bf16_supported": False}}
    for name, value in answers[library].items():
        setattr(torch.cpu, name, lambda value=value: value)


def _err(got: Any, want: Any) -> float:
    """Max of ``|got - want| / (1 + |want|)``: absolute near 0, relative for large values."""
    want = want.float()
    return float(((got.float() - want).abs() / (1 + want.abs())).max())


def _tolerance(dtype: Any) -> float:
    """bf16: 4 units in the last place (2**-8 each) at 1; fp32: accumulation-order noise."""
    import torch

    return 1.6e-2 if dtype == torch.bfloat16 else 1e-4


def _ops() -> dict[str, Any]:
    """Each kernel op against a pure-torch reference, for bf16 (the built-in model's dtype)
    and fp32; ``errors``: op@dtype -> max abs error (inputs are O(1)); ``failed``: those past
    the dtype's tolerance."""
    import torch
    import torch.nn.functional as F  # noqa: N812 - torch's own convention

    ops = torch.ops._C
    errors: dict[str, float] = {}
    limit: dict[str, float] = {}
    gen = torch.Generator().manual_seed(35)

    def rand(*shape: int, dtype: Any) -> Any:
        return torch.randn(*shape, generator=gen, dtype=torch.float32).to(dtype)

    def rms_ref(x: Any, w: Any, eps: float) -> Any:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)

    for dtype in (torch.bfloat16, torch.float32):
        tag = str(dtype).removeprefix("torch.")
        tokens, hidden, eps = 7, 576, 1e-5  # the built-in SmolLM2-135M's hidden size
        x, w = rand(tokens, hidden, dtype=dtype), rand(hidden, dtype=dtype)
        out = torch.empty_like(x)
        ops.rms_norm(out, x, w, eps)
        errors[f"rms_norm@{tag}"] = _err(out, rms_ref(x, w, eps))

        residual = rand(tokens, hidden, dtype=dtype)
        want_res = (x.float() + residual.float()).to(dtype)
        want = rms_ref(want_res, w, eps)
        x2, r2 = x.clone(), residual.clone()
        ops.fused_add_rms_norm(x2, r2, w, eps)
        errors[f"fused_add_rms_norm@{tag}"] = max(_err(x2, want), _err(r2, want_res))

        inter = 1536
        gate_up = rand(tokens, 2 * inter, dtype=dtype)
        act = torch.empty(tokens, inter, dtype=dtype)
        ops.silu_and_mul(act, gate_up)
        g, u = gate_up.float().chunk(2, dim=-1)
        errors[f"silu_and_mul@{tag}"] = _err(act, (F.silu(g) * u).to(dtype))

        # Rotary (NeoX style, as Llama): cos_sin_cache [max_pos, rot] = cos | sin halves.
        heads, kv_heads, head, max_pos = 9, 3, 64, 64
        inv = 1.0 / (10000.0 ** (torch.arange(0, head, 2, dtype=torch.float32) / head))
        freqs = torch.outer(torch.arange(max_pos, dtype=torch.float32), inv)
        cache = torch.cat([freqs.cos(), freqs.sin()], dim=-1).to(dtype)
        positions = torch.tensor([0, 1, 2, 5, 17, 40, 63])
        q, k = rand(tokens, heads * head, dtype=dtype), rand(tokens, kv_heads * head, dtype=dtype)

        def rope(t: Any, n: int) -> Any:
            t = t.float().view(tokens, n, head)
            cos, sin = cache[positions].float().chunk(2, dim=-1)
            cos, sin = cos[:, None, :], sin[:, None, :]
            a, b = t[..., : head // 2], t[..., head // 2:]
            return torch.cat([a * cos - b * sin, b * cos + a * sin], -1).view(tokens, -1)

        q2, k2 = q.clone(), k.clone()
        ops.rotary_embedding(positions, q2, k2, head, cache, True)
        errors[f"rotary_embedding@{tag}"] = max(_err(q2, rope(q, heads)),
                                                _err(k2, rope(k, kv_heads)))

        errors[f"attention@{tag}"] = _attention(dtype, rand)
        for name in list(errors):
            limit[name] = _tolerance(torch.bfloat16 if name.endswith("bfloat16") else dtype)
    failed = sorted(n for n, e in errors.items() if not e <= limit[n])  # NaN fails too
    return {"errors": errors, "failed": failed}


def _attention(dtype: Any, rand: Any) -> float:
    """vLLM's CPU paged attention as its backend drives it (vllm/v1/attention/backends/
    cpu_attn.py: the ISA its own ``_get_attn_isa`` picks, KV written by
    ``cpu_attn_reshape_and_cache``, ``get_scheduler_metadata``, ``cpu_attention_with_kv_cache``)
    for two requests (a 3-token chunk after 16 cached tokens; a 1-token decode after 39),
    against causal GQA softmax attention in fp32."""
    import torch
    from vllm import _custom_ops as ops
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    heads, kv_heads, head, block = 9, 3, 64, 32
    isa = _get_attn_isa(dtype, block, head, "auto")
    seq_lens, q_lens = [19, 40], [3, 1]
    blocks_per_seq = 2
    kv_cache = torch.zeros(2 * blocks_per_seq, kv_heads, block, 2 * head, dtype=dtype)
    key_cache, value_cache = kv_cache.view(2 * blocks_per_seq, kv_heads, 2 * block, head).chunk(
        2, dim=2)
    block_table = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
    keys = [rand(n, kv_heads, head, dtype=dtype) for n in seq_lens]
    values = [rand(n, kv_heads, head, dtype=dtype) for n in seq_lens]
    slots = torch.cat([block_table[i, torch.arange(n) // block] * block + torch.arange(n) % block
                       for i, n in enumerate(seq_lens)]).to(torch.int64)
    ops.cpu_attn_reshape_and_cache(torch.cat(keys), torch.cat(values), key_cache, value_cache,
                                   slots, isa)
    query = rand(sum(q_lens), heads, head, dtype=dtype)
    query_start = torch.tensor([0, q_lens[0], sum(q_lens)], dtype=torch.int32)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    scale = head ** -0.5
    meta = ops.cpu_attn_get_scheduler_metadata(
        num_reqs=2, num_heads=heads, num_kv_heads=kv_heads, head_dim=head, seq_lens=lens,
        dtype=dtype, query_start_loc=query_start, causal=True, sliding_window_size=-1, isa=isa,
        enable_kv_split=True)
    out = torch.empty_like(query)
    ops.cpu_attention_with_kv_cache(
        query=query, key_cache=key_cache, value_cache=value_cache, output=out,
        query_start_loc=query_start, seq_lens=lens, scale=scale, causal=True,
        alibi_slopes=None, sliding_window=-1, block_table=block_table, softcap=0.0,
        scheduler_metadata=meta, s_aux=None)
    want = []
    group = heads // kv_heads
    for i, (n, m) in enumerate(zip(seq_lens, q_lens, strict=True)):
        q = query[int(query_start[i]):int(query_start[i + 1])].float().transpose(0, 1)
        k = keys[i].float().repeat_interleave(group, dim=1).transpose(0, 1)
        v = values[i].float().repeat_interleave(group, dim=1).transpose(0, 1)
        scores = q @ k.transpose(1, 2) * scale  # [heads, m, n]
        allowed = torch.arange(n)[None, :] <= (n - m + torch.arange(m))[:, None]
        scores = scores.masked_fill(~allowed, float("-inf"))
        want.append((scores.softmax(-1) @ v).transpose(0, 1))
    return _err(out, torch.cat(want))


def _decode(model: str, prompt: list[int], tokens: int) -> dict[str, Any]:
    """Greedy generation of ``tokens`` tokens (the first from the prefill, the rest one decode
    step each) with vLLM's engine in this process."""
    from vllm import LLM, SamplingParams

    start = time.monotonic()
    llm = LLM(model=model, dtype="bfloat16", enforce_eager=True, max_model_len=128,
              max_num_seqs=1, skip_tokenizer_init=True, kv_cache_memory_bytes=32 << 20,
              block_size=32, seed=0)
    loaded = time.monotonic()
    params = SamplingParams(temperature=0.0, max_tokens=tokens, detokenize=False)
    out = llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)
    return {"tokens": list(out[0].outputs[0].token_ids), "load_s": round(loaded - start, 1),
            "generate_s": round(time.monotonic() - loaded, 1)}


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", default=",".join(STEPS))
    parser.add_argument("--force-library", choices=("_C", "_C_AVX512"))
    parser.add_argument("--decode-model")
    parser.add_argument("--decode-tokens", type=int, default=2)
    parser.add_argument("--prompt", default="1,17,29,101,7,250")
    args = parser.parse_args(argv)
    steps = args.steps.split(",")
    failed = False

    def step(name: str, body: Any) -> None:
        nonlocal failed
        _say({"step": name, "begin": True})
        start = time.monotonic()
        try:
            result = body()
        except Exception as exc:  # noqa: BLE001 - reported as the step's failure
            result = {"error": f"{type(exc).__name__}: {exc}"}
        result = {"step": name, "seconds": round(time.monotonic() - start, 1), **result}
        failed = failed or "error" in result or bool(result.get("failed"))
        _say(result)

    if "torch" in steps:
        def torch_step() -> dict[str, Any]:
            import torch

            return {"capability": torch.backends.cpu.get_cpu_capability(),
                    "avx512": torch.cpu._is_avx512_supported(),
                    "avx512_bf16": torch.cpu._is_avx512_bf16_supported(),
                    "amx": torch.cpu._is_amx_tile_supported()}
        step("torch", torch_step)
    if args.force_library:
        _force(args.force_library)
    if "preflight" in steps:
        def preflight_step() -> dict[str, Any]:
            from appliance.preflight.kernels import probe_in_process

            report = probe_in_process()
            return {"report": report.to_json(), "level": report.level, "text": report.render()}
        step("preflight", preflight_step)
    if "ops" in steps:
        step("ops", _ops)
    if "decode" in steps:
        prompt = [int(t) for t in args.prompt.split(",")]
        step("decode", lambda: _decode(args.decode_model, prompt, args.decode_tokens))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
