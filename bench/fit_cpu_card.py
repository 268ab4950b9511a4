#!/usr/bin/python3
"""Measures this CPU and fits a simulator hardware card for one tpserve rank on THREADS core(s).

  bench/fit_cpu_card.py [--threads 1] [--name cpu-zen4-2core] [--out configs/hardware/NAME.yaml] [--build build]

Runs (each once, the figures and commands go into the card's comment):
  mem_bandwidth T            DRAM read GB/s on T threads                       -> hbm_tbps
  gemm_gguf_bench 4608 1536 best M,...   Q4_1 GEMM time at M = 1..256 rows     -> peak, m_half, mem_efficiency
  kv_attention_bench         bf16 paged attention, decode (1 token) at 1024 context over 30 layers -> its GB/s;
                             a 128-token chunk at 1024 context -> FLOP/s        -> attention_efficiency
  decode_bench (SmolLM2-135M Q4_1 kept, T threads)  tg at batch 1, 4, 16 and pp 32, 128, 384
                                                                               -> step / token / logit overheads
Fits (the cost model of coordinator/sim_cost_model.h, tp 1, dense):
  GEMM   t(M) = max(W / (mem x mem_eff), 2 x MACs x (M + m_half) / peak) with compute_efficiency 1: a least-squares
         line t = a + b M over every M, weighted 1/t (relative error), gives peak = 2 MACs / b and m_half = a / b; mem_eff = (W / t(1)) / mem.
  attention_efficiency = achieved FLOP/s of the prefill chunk / peak.
  overheads: residual r = measured step time - (linear + lm_head + attention) for every decode_bench row;
         r = step + token x M + logit x rows-with-logits, least squares (non-negative) over all rows
         (decode at batch B: M = B, B logit rows; prefill of P: M = P, 1 logit row).
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

    ms = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    out = run([b("bench/gemm_gguf_bench"), "4608", "1536", "best", ",".join(map(str, ms))], env)
    tm = {}
    for line in out.splitlines():
        m = re.match(r"(?i)q4_1\s+m=(\d+)\s.*?([0-9.]+) us\s+([0-9.]+) GB/s\s+([0-9.]+) GMAC/s", line)
        if m:
            tm[int(m.group(1))] = float(m.group(2)) * 1e-6
    macs = 4608 * 1536
    wbytes = 4608 * 1536 * 20 / 32
    xs = np.array(ms, float)
    ys = np.array([tm[int(m)] for m in xs])
    slope, icpt = np.polyfit(xs, ys, 1, w=1 / ys)  # relative error: small M matters as much as large
    peak = 2 * macs / slope
    m_half = max(0.0, icpt / slope)
    mem_eff = min(1.0, (wbytes / tm[1]) / mem)
    notes.append("gemm_gguf_bench Q4_1 [4608 x 1536]: " + ", ".join(
        f"M={m} {tm[m] * 1e6:.0f} us ({2 * m * macs / tm[m] / 1e9:.1f} GFLOP/s)" for m in ms))
    notes.append(f"  fit t = a + b M over every M (weights 1/t): peak = 2 MACs / b = {peak / 1e9:.1f} GFLOP/s, m_half = a / b = "
                 f"{m_half:.2f}; M = 1 streams {wbytes / tm[1] / 1e9:.1f} GB/s -> mem_efficiency {mem_eff:.2f}")

    out = run([b("bench/kv_attention_bench"), "--threads", t, "--contexts", "1024", "--tokens", "1", "--layers",
               "30", "--dtypes", "bf16", "--paths", "avx2", "--reps", "20"], env)
    row = [r for r in out.splitlines() if r.startswith("| 1024 | bf16") and "tiled" in r][0].split("|")
    attn_dec_gbs = float(row[7])
    out = run([b("bench/kv_attention_bench"), "--threads", t, "--contexts", "1024", "--tokens", "128", "--layers",
               "30", "--dtypes", "bf16", "--paths", "avx2", "--reps", "5"], env)
    row = [r for r in out.splitlines() if r.startswith("| 1024 | bf16") and "tiled" in r][0].split("|")
    us = float(row[5])
    flops = 4 * HD * NH * sum(range(1024 - 128 + 1, 1024 + 1))
    attn_eff = min(1.0, flops / (us * 1e-6) / peak)
    notes.append(f"kv_attention_bench bf16 tiled, 1 layer of 30: decode at 1024 context {attn_dec_gbs:.1f} GB/s; "
                 f"128-token chunk at 1024: {us:.0f} us = {flops / us / 1e3:.1f} GFLOP/s -> attention_efficiency "
                 f"{attn_eff:.2f} of peak")

    def model_s(m, n_logits, attn_flops, kv_bytes):
        eff = m / (m + m_half)
        lin = max(2 * m * P_LIN / (peak * eff), P_LIN * BPP / (mem * mem_eff))
        head = max(2 * n_logits * P_HEAD / (peak * n_logits / (n_logits + m_half)), P_HEAD * BPP / (mem * mem_eff))
        att = max(attn_flops / (peak * attn_eff), kv_bytes / (mem * mem_eff))
        return lin + head + att

    rows = []  # (M, logit rows, measured s, model s)
    common = [b("bench/decode_bench"), "--model", MODEL, "--quantized", "keep", "--threads", t, "--reps", "2"]
    for pp, batch in ((32, 4), (128, 16), (384, 1)):
        out = run(common + ["--pp", str(pp), "--tg", "16", "--batch", str(batch)], env)
        pp_rate = float(re.search(r"\| pp\d+ ([0-9.]+)", out).group(1))
        tg_rate = float(re.search(r"\| tg\d+ ([0-9.]+)", out).group(1))
        notes.append(f"decode_bench --pp {pp} --tg 16 --batch {batch}: pp {pp_rate:.1f} tok/s, tg {tg_rate:.1f} tok/s"
                     + (f", tg x b{batch} " + re.search(r"x b\d+ ([0-9.]+)", out).group(1) + " tok/s" if batch > 1 else ""))
        # prefill of pp tokens from 0: one step (pp <= 512)
        af = 4 * HD * NH * L * pp * (pp + 1) / 2
        rows.append((pp, 1, pp / pp_rate, model_s(pp, 1, af, KV_LAYER_TOKEN * L * pp)))
        # decode at ~pp + 8 context, batch 1
        ctx = pp + 8
        rows.append((1, 1, 1 / tg_rate, model_s(1, 1, 4 * HD * NH * L * ctx, KV_LAYER_TOKEN * L * ctx)))
        if batch > 1:
            br = float(re.search(r"x b\d+ ([0-9.]+)", out).group(1))
            ctx = 64 + 8
            rows.append((batch, batch, batch / br,
                         model_s(batch, batch, batch * 4 * HD * NH * L * ctx, batch * KV_LAYER_TOKEN * L * ctx)))
    A = np.array([[1.0, m, n] for m, n, _, _ in rows])
    r = np.array([meas - mod for _, _, meas, mod in rows])
    active = [0, 1, 2]
    coef = np.zeros(3)
    while active:
        sol, *_ = np.linalg.lstsq(A[:, active], r, rcond=None)
        if (sol >= 0).all():
            coef[active] = sol
            break
        active.pop(int(np.argmin(sol)))
    step, tok, logit = coef
    for m, n, meas, mod in rows:
        fit = mod + step + tok * m + logit * n
        notes.append(f"  step M={m} logits={n}: measured {meas * 1e3:.2f} ms, roofline terms {mod * 1e3:.2f} ms, "
                     f"with the fitted overheads {fit * 1e3:.2f} ms ({100 * (fit / meas - 1):+.0f}%)")
    notes.append(f"  overheads (non-negative least squares on the residuals): step {step * 1e6:.0f} us, token "
                 f"{tok * 1e6:.1f} us, logit row {logit * 1e6:.1f} us")
    load1 = open("/proc/loadavg").read().split()[:3]
    cpu = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True, capture_output=True, text=True).stdout.strip()
    stamp = f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC"
    card = [f"# {cpu} ({os.cpu_count()} cores, AVX-512 F/BW/VL/BF16/VNNI, no AMX), for `tpserve simulate --gpu {a.name}`.",
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
