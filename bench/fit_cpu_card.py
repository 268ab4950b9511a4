#!/usr/bin/python3
"""Measures this CPU and fits a simulator hardware card for one tpserve rank on THREADS core(s).

  bench/fit_cpu_card.py [--threads 1] [--name cpu-zen4-2core] [--out configs/hardware/NAME.yaml] [--build build]

Runs (each once, the figures and commands go into the card's comment):
  mem_bandwidth T            DRAM read GB/s on T threads                       -> hbm_tbps
  kv_attention_bench         bf16 paged attention, decode (1 token) at 1024 context over 30 layers -> its GB/s;
                             a 128-token chunk at 1024 context -> FLOP/s        -> attention rates
  decode_bench (SmolLM2-135M Q4_1 kept, T threads)  tg at batch 1, 4, 16 and pp 32, 128, 384
                                                                               -> mem_efficiency, peak, m_half
  tpserve serve + bench/load_gen.py requests (bench/sweep_point.py)             -> step / token / logit overheads
Fits (the cost model of coordinator/sim_cost_model.h, tp 1, dense), in this order:
  overheads, measured on a served run (tp 1, C = 4) from /metrics (tpserve:step_time_seconds_total by part):
         step = (schedule + postprocess) / steps, token = forward_other / computed tokens (norms, rope,
         embedding, activations outside linear and attention), logit = sample / generated tokens.
  attention: its measured rates (decode GB/s, chunk FLOP/s); attention_efficiency = chunk FLOP/s / peak.
  mem_efficiency: decode_bench's batch-1 steps less overheads and attention stream the linear weights and the
         lm_head once: (their bytes / that time) / DRAM GB/s (median over the rows).
  peak, m_half: decode_bench's steps of M >= 4 (batch 4, 16, prefill 32, 128, 384) less overheads and attention
         = (2 (P_lin M + P_head n) + m_half 2 (P_lin + P_head)) / peak: for each m_half of a grid, 1 / peak by
         least squares in relative error; the m_half kept is the one whose whole card (the max of compute and
         memory time, as the simulator takes it) has the least relative squared error over every step, M = 1
         included (a plain line through the M >= 4 steps gave Zen 3 an m_half of 5, which made its M = 1 steps
         compute bound in the card and 60% slower than measured).
  The synthetic GEMM's rates are printed beside as a cross-check (its layer is not the model's).
Prints the card; --out writes it.
"""
import argparse
import datetime
import os
import re
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf")
# SmolLM2-135M (configs/models/SmolLM2-135M.yaml) and the int4 format the simulator is run with (4.5 bits).
L, H, NH, NKV, HD, FF, V = 30, 576, 9, 3, 64, 1536, 49152
P_LIN = L * (H * (NH + 2 * NKV) * HD + NH * HD * H + 3 * H * FF)
P_HEAD = H * V
BPP = 4.5 / 8
KV_LAYER_TOKEN = 2 * NKV * HD * 2  # bf16


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"fit_cpu_card: {' '.join(cmd)} failed: {r.stderr.strip()[-600:]}")
    return r.stdout


def cpu_flags():
    for line in open("/proc/cpuinfo"):
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def isa_summary():
    """The vector features the kernels dispatch on, as the card's comment names them."""
    f = cpu_flags()
    avx512 = [n for n, flag in (("F", "avx512f"), ("BW", "avx512bw"), ("VL", "avx512vl"), ("BF16", "avx512_bf16"),
                                 ("VNNI", "avx512_vnni")) if flag in f]
    parts = [f"AVX-512 {'/'.join(avx512)}" if avx512 else "no AVX-512",
             "AVX2 + FMA" if {"avx2", "fma"} <= f else "no AVX2", "AMX" if "amx_tile" in f else "no AMX"]
    return ", ".join(parts)


def attention_path():
    """kv_attention_bench's path the engine takes on this CPU (paged_attention.cpp: AVX-512 F/BW/VL/DQ, else AVX2)."""
    return "avx512" if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= cpu_flags() else "avx2"


def tiled_row(out):
    """kv_attention_bench's markdown row of the model's tiled kernel at 1024 context, bf16, as {column header: cell}:
    with AMX "tiled+amx", else on AVX-512 "tiled+lanes", else "tiled" (kv_attention_bench.cpp names them so)."""
    rows = [[c.strip() for c in r.strip().strip("|").split("|")] for r in out.splitlines() if r.startswith("| ")]
    header = rows[0]
    found = {}
    for r in rows[1:]:
        cell = dict(zip(header, r))
        if cell.get("context") == "1024" and cell.get("KV dtype") == "bf16":
            found[cell.get("kernel")] = cell
    for kernel in ("tiled+amx", "tiled+lanes", "tiled"):
        if kernel in found:
            return found[kernel]
    sys.exit(f"fit_cpu_card: no tiled bf16 row at 1024 context in kv_attention_bench's output:\n{out}")


def served_overheads(threads):
    """The engine's own costs per step / token / logit row from a served run's /metrics (tp 1, one short load):
    step = d(schedule + postprocess) / d(steps); token = d(forward_other) / d(computed tokens);
    logit = d(sample) / d(generated tokens) (every generated token is one row with logits)."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import sweep_point
    settings = {"model": MODEL, "dtype": "bf16", "quantized": "keep", "threads": threads, "cache_memory_mb": 128,
                "max_context": 2048, "max_num_seqs": 64, "max_num_batched_tokens": 2048}
    point = {"tp": 1, "dp": 1, "hosts": 0, "bandwidth": "local", "concurrency": 4, "prompt_min": 40,
             "prompt_max": 160, "out_min": 16, "out_max": 48, "kv_dtype": "bf16"}
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        with sweep_point.Servers(ROOT, settings, (1, 1, 0, "local", "bf16"), tmp, lambda m: None) as srv:
            sweep_point.warmup(srv.urls)
            def counters():
                text = sweep_point._get(srv.urls[0] + "/metrics")
                c = {}
                for line in text.splitlines():
                    m = re.match(r'^tpserve:step_time_seconds_total\{[^}]*part="([a-z_]+)"[^}]*\}\s+(\S+)', line)
                    if m:
                        c[m.group(1)] = float(m.group(2))
                    m = re.match(r"^(tpserve:engine_steps_total|tpserve:computed_tokens_total|"
                                 r"[a-z]+:generation_tokens_total)(\{[^}]*\})?\s+(\S+)", line)
                    if m:
                        c[m.group(1).split(":")[1]] = float(m.group(3))
                return c
            c0 = counters()
            sweep_point.run_load(srv.urls, point, 12, 5)
            c1 = counters()
    d = {k: c1[k] - c0.get(k, 0.0) for k in c1}
    step = (d["schedule"] + d["postprocess"]) / d["engine_steps_total"]
    tok = d["forward_other"] / d["computed_tokens_total"]
    logit = d["sample"] / d["generation_tokens_total"]
    note = (f"served run (tpserve serve, C = 4, 12 requests of 40-160 words / 16-48 tokens), /metrics deltas: "
            f"{d['engine_steps_total']:.0f} steps, {d['computed_tokens_total']:.0f} computed tokens, "
            f"{d['generation_tokens_total']:.0f} generated; schedule + postprocess {1e3 * (d['schedule'] + d['postprocess']):.0f} ms, "
            f"forward_other {1e3 * d['forward_other']:.0f} ms, sample {1e3 * d['sample']:.0f} ms "
            f"-> step {step * 1e6:.0f} us, token {tok * 1e6:.1f} us, logit row {logit * 1e6:.1f} us")
    return step, tok, logit, note


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--name", default="cpu-zen4-2core")
    ap.add_argument("--out", default="")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = ap.parse_args()
    b = lambda p: os.path.join(a.build, p)  # noqa: E731
    t = str(a.threads)
    env = dict(os.environ, OMP_NUM_THREADS=t)
    notes = []
    load0 = open("/proc/loadavg").read().split()[:3]

    out = run([b("bench/mem_bandwidth"), t])
    mem = float(re.search(r"read ([0-9.]+) GB/s", out).group(1)) * 1e9
    notes.append(f"mem_bandwidth {t}: {mem / 1e9:.1f} GB/s")


    out = run([b("bench/kv_attention_bench"), "--threads", t, "--contexts", "1024", "--tokens", "1", "--layers",
               "30", "--dtypes", "bf16", "--paths", attention_path(), "--reps", "20"], env)
    attn_dec_Bps = float(tiled_row(out)["GB/s"]) * 1e9
    out = run([b("bench/kv_attention_bench"), "--threads", t, "--contexts", "1024", "--tokens", "128", "--layers",
               "30", "--dtypes", "bf16", "--paths", attention_path(), "--reps", "5"], env)
    us = float(tiled_row(out)["µs per call"])
    flops = 4 * HD * NH * sum(range(1024 - 128 + 1, 1024 + 1))
    attn_flops_rate = flops / (us * 1e-6)
    notes.append(f"kv_attention_bench bf16 tiled, 1 layer of 30: decode at 1024 context {attn_dec_Bps / 1e9:.1f} GB/s; "
                 f"128-token chunk at 1024: {us:.0f} us = {attn_flops_rate / 1e9:.1f} GFLOP/s")

    raw = []  # (M, logit rows, measured s, attention FLOPs, KV bytes)
    common = [b("bench/decode_bench"), "--model", MODEL, "--quantized", "keep", "--threads", t, "--reps", "2"]
    for pp, batch in ((32, 4), (128, 16), (384, 1)):
        out = run(common + ["--pp", str(pp), "--tg", "16", "--batch", str(batch)], env)
        pp_rate = float(re.search(r"\| pp\d+ ([0-9.]+)", out).group(1))
        tg_rate = float(re.search(r"\| tg\d+ ([0-9.]+)", out).group(1))
        notes.append(f"decode_bench --pp {pp} --tg 16 --batch {batch}: pp {pp_rate:.1f} tok/s, tg {tg_rate:.1f} tok/s"
                     + (f", tg x b{batch} " + re.search(r"x b\d+ ([0-9.]+)", out).group(1) + " tok/s" if batch > 1 else ""))
        raw.append((pp, 1, pp / pp_rate, 4 * HD * NH * L * pp * (pp + 1) / 2, KV_LAYER_TOKEN * L * pp))  # one step
        ctx = pp + 8
        raw.append((1, 1, 1 / tg_rate, 4 * HD * NH * L * ctx, KV_LAYER_TOKEN * L * ctx))
        if batch > 1:
            br = float(re.search(r"x b\d+ ([0-9.]+)", out).group(1))
            ctx = 64 + 8
            raw.append((batch, batch, batch / br, batch * 4 * HD * NH * L * ctx, batch * KV_LAYER_TOKEN * L * ctx))
    step, tok, logit, served = served_overheads(a.threads)
    notes.append(served)

    def attn_s(af, kvb):  # the measured attention rates
        return max(af / attn_flops_rate, kvb / attn_dec_Bps)

    # Memory bound decode (M = 1): what is left of the step after the per-token / per-logit overheads and
    # attention streams every linear weight and the lm_head once.
    left1 = [tm_ - tok - logit - attn_s(af, kvb) for m, n, tm_, af, kvb in raw if m == 1]
    mem_eff = min(1.0, (P_LIN + P_HEAD) * BPP / (mem * float(np.median(left1))))
    # Compute bound rows (M >= 4): t - overheads - attention = (X + m_half Y) / peak, X = 2 (P_LIN M + P_HEAD n).
    big = [(2 * (P_LIN * m + P_HEAD * n), tm_ - tok * m - logit * n - attn_s(af, kvb)) for m, n, tm_, af, kvb in raw
           if m >= 4]
    X = np.array([x for x, _ in big]); T = np.array([y for _, y in big])
    Y = 2 * (P_LIN + P_HEAD)

    def model_s(m, n_logits, af, kvb, peak, m_half):
        lin = max(2 * P_LIN * (m + m_half) / peak, P_LIN * BPP / (mem * mem_eff))
        head = max(2 * P_HEAD * (n_logits + m_half) / peak, P_HEAD * BPP / (mem * mem_eff))
        att = max(af / min(attn_flops_rate, peak), kvb / (mem * mem_eff))  # the card's attention_efficiency <= 1
        return lin + head + att + tok * m + logit * n_logits

    best = None
    for m_half in np.arange(0.0, 16.0, 0.01):
        Z = (X + m_half * Y) / T  # T / peak = Z T -> relative residual 1 - Z / (T peak)
        peak = float(np.sum(Z * Z) / np.sum(Z))  # minimises sum (Z / peak - 1)^2 over 1 / peak
        err = sum((model_s(m, n, af, kvb, peak, m_half) / tm_ - 1) ** 2 for m, n, tm_, af, kvb in raw)
        if best is None or err < best[0]:
            best = (err, peak, float(m_half))
    _, peak, m_half = best
    attn_eff = min(1.0, attn_flops_rate / peak)
    notes.append(f"  fit on decode_bench: M = 1 rows -> mem_efficiency {mem_eff:.3f} (median of {len(left1)}); "
                 f"M >= 4 rows for 1 / peak, every row for m_half -> peak {peak / 1e9:.1f} GFLOP/s, m_half {m_half:.2f}; "
                 f"attention_efficiency = chunk rate / peak = {attn_eff:.2f}")

    for m, n, tm_, af, kvb in raw:
        fit = model_s(m, n, af, kvb, peak, m_half)
        notes.append(f"  decode_bench step M={m} logits={n}: measured {tm_ * 1e3:.2f} ms, card {fit * 1e3:.2f} ms "
                     f"({100 * (fit / tm_ - 1):+.0f}%; decode_bench has no engine step overhead)")
    load1 = open("/proc/loadavg").read().split()[:3]
    cpu = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True, capture_output=True, text=True).stdout.strip()
    stamp = f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC"
    card = [f"# {cpu} ({os.cpu_count()} cores, {isa_summary()}), for `tpserve simulate --gpu {a.name}`.",
            f"# One \"device\" = one tpserve rank on {t} thread(s); a node = the {os.cpu_count()} cores. Measured {stamp},",
            f"# load average {' '.join(load0)} before, {' '.join(load1)} after (a shared machine), by",
            f"# `bench/fit_cpu_card.py --threads {t} --name {a.name}` (the fits are in its docstring):"]
    card += [f"#   {n}" for n in notes]
    card += ["# Links: MPI_Allreduce between 2 local ranks (DESIGN.md 4): 0.7 us at 2 KB, 100 us at 590 KB -> ~6 GB/s;",
             "# emulated hosts (launch/hosts) at 1 gbit: 0.125 GB/s, ~50 us a hop (TCP through namespaces). Not refitted.",
             f"name: {a.name}", "memory: 8GiB", "reserve: 1GiB",
             f"peak_bf16_tflops: {peak / 1e12:.5f}", f"hbm_tbps: {mem / 1e12:.5f}", f"mem_efficiency: {mem_eff:.3f}",
             "compute_efficiency: 1.0", f"m_half: {m_half:.3f}", f"attention_efficiency: {attn_eff:.3f}",
             f"devices_per_node: {os.cpu_count()}", "intra_node_gbps: 6", "intra_node_latency_us: 0.3",
             "inter_node_gbps: 0.125", "inter_node_latency_us: 50",
             f"step_overhead_us: {step * 1e6:.1f}", f"token_overhead_us: {tok * 1e6:.2f}",
             f"logit_overhead_us: {logit * 1e6:.2f}", "act_bytes: 4", ""]
    text = "\n".join(card)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
