#!/usr/bin/env python3
"""Predictions of `tpserve simulate` for Llama-3.1-8B, Llama-3.3-70B, Llama-3.1-405B and gpt-oss-120b on H100 / H200
nodes (tp 1-8 within a node, dp across nodes), beside TensorRT-LLM's published offline-throughput figures where they
exist. Writes bench/results/sim-predictions-YYYYMMDD-HHMM.md.

  bench/sim_predictions.py [--tpserve build/launch/tpserve]

Published figures: TensorRT-LLM docs/source/performance/perf-overview.md (NVIDIA/TensorRT-LLM, commit 00f37686aa85),
"Total Output Throughput (tokens/sec)", trtllm-bench throughput (every request queued at once), ModelOpt FP8
checkpoints (nvidia/Llama-3.1-8B-Instruct-FP8, ...), DGX H100 / DGX H200, PyTorch backend, CUDA graphs.
"""
import argparse, datetime, json, os, subprocess, sys, time

# (model, gpu, tp, isl/osl) -> published output tok/s (TensorRT-LLM perf overview, FP8 weights).
TRTLLM = {
    ("Llama-3.1-8B", "H100", 1, "1000/1000"): 15220, ("Llama-3.1-8B", "H200", 1, "1000/1000"): 17744,
    ("Llama-3.1-8B", "H100", 1, "128/128"): 28312, ("Llama-3.1-8B", "H200", 1, "128/128"): 27911,
    ("Llama-3.3-70B", "H100", 2, "1000/1000"): 4205, ("Llama-3.3-70B", "H200", 1, "1000/1000"): 2909,
    ("Llama-3.3-70B", "H100", 2, "128/128"): 6378, ("Llama-3.3-70B", "H200", 1, "128/128"): 3803,
    ("Llama-3.1-405B", "H100", 8, "1000/1000"): 2919, ("Llama-3.1-405B", "H200", 8, "1000/1000"): 3330,
    ("Llama-3.1-405B", "H100", 8, "128/128"): 3627, ("Llama-3.1-405B", "H200", 8, "128/128"): 3814,
}
WORKLOADS = {"1000/1000": "configs/workloads/offline-1000-1000.yaml", "128/128": "configs/workloads/offline-128-128.yaml"}
FORMAT = {"Llama-3.1-8B": "bf16", "Llama-3.3-70B": "bf16", "Llama-3.1-405B": "fp8", "gpt-oss-120b": "mxfp4"}


def sim(tpserve, model, gpu, tp, dp, workload, weights, kv, extra=()):
    cmd = [tpserve, "simulate", "--model", model, "--gpu", gpu, "--tp", str(tp), "--dp", str(dp), "--weights", weights,
           "--kv-dtype", kv, "--max-num-seqs", "512", "--max-num-batched-tokens", "8192", "--workload", workload,
           "--json", *extra]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    line = "$ tpserve " + " ".join(cmd[1:])
    if p.returncode != 0:
        return None, (p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"), wall, line
    return json.loads(p.stdout), "", wall, line


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpserve", default="build/launch/tpserve")
    a = ap.parse_args()
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    out = []
    w = out.append
    cpu = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True, capture_output=True, text=True).stdout.strip()
    w("# Simulator predictions: four big models on H100 / H200 nodes\n")
    w(f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%M:%SZ}; simulator run on {cpu} ({os.cpu_count()} cores)")
    w("- command: `bench/sim_predictions.py` (each point: `tpserve simulate ... --json`, listed below)")
    w("- hardware cards: configs/hardware/H100.yaml, H200.yaml (datasheet peaks; efficiencies are assumptions, see the cards)")
    w("- published: TensorRT-LLM perf overview (NVIDIA/TensorRT-LLM docs/source/performance/perf-overview.md, commit "
      "00f37686aa85): trtllm-bench offline throughput, FP8 ModelOpt checkpoints, DGX H100/H200. No vLLM figure is quoted: "
      "none is available here with a source we can cite.\n")

    w("## 1. Offline throughput beside TensorRT-LLM (FP8 weights, FP8 KV, 3000 requests queued at t = 0)\n")
    w("| model | GPU | tp | ISL/OSL | predicted out tok/s | TensorRT-LLM out tok/s | predicted / published | KV peak | preemptions | all-reduce share | sim wall s |")
    w("|---|---|--:|---|--:|--:|--:|--:|--:|--:|--:|")
    cmds = []
    for (model, gpu, tp, io), pub in TRTLLM.items():
        r, cmd, wall, line = sim(a.tpserve, model, gpu, tp, 1, WORKLOADS[io], "fp8", "fp8")
        cmds.append(line)
        if r is None:
            w(f"| {model} | {gpu} | {tp} | {io} | refused: {cmd} | {pub:,} | | | | | |")
            continue
        t = r["time_s"]; busy = sum(t.values())
        w(f"| {model} | {gpu} | {tp} | {io} | {r['output_tok_per_s']:,.0f} | {pub:,} | {r['output_tok_per_s']/pub:.2f} "
          f"| {100*r['kv_usage_peak']:.0f}% | {r['preemptions']} | {100*t['comm']/busy:.1f}% | {wall:.1f} |")
        print(model, gpu, tp, io, file=sys.stderr)

    w("\n## 2. Shapes on 2 nodes of 8 GPUs (chat workload: configs/workloads/chat-1000.yaml at 20 req/s)\n")
    w("dp = replicas across the 16 GPUs of 2 nodes = 16 / tp (tp stays within a node). Weights: "
      + ", ".join(f"{m} {f}" for m, f in FORMAT.items()) + "; KV bf16.\n")
    w("| model | GPU | tp x dp | req/s | out tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | KV peak | preemptions | all-reduce share |")
    w("|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for model, fmt in FORMAT.items():
        for gpu in ("H100", "H200"):
            for tp in (1, 2, 4, 8):
                r, cmd, _, line = sim(a.tpserve, model, gpu, tp, 16 // tp, "configs/workloads/chat-1000.yaml", fmt,
                                      "bf16", ("--nodes", "2"))
                cmds.append(line)
                if r is None:
                    w(f"| {model} | {gpu} | {tp} x {16 // tp} | refused: {cmd} |||||||||")
                    continue
                t = r["time_s"]; busy = sum(t.values())
                w(f"| {model} | {gpu} | {tp} x {16 // tp} | {r['req_per_s']:.2f} | {r['output_tok_per_s']:,.0f} "
                  f"| {1e3*r['ttft_s']['p50']:.0f} | {1e3*r['ttft_s']['p99']:.0f} | {1e3*r['itl_s']['p50']:.1f} "
                  f"| {1e3*r['itl_s']['p99']:.1f} | {100*r['kv_usage_peak']:.0f}% | {r['preemptions']} | {100*t['comm']/busy:.1f}% |")
                print(model, gpu, tp, file=sys.stderr)
    w("\n## Commands\n\n```")
    out.extend(cmds)
    w("```")
    path = f"bench/results/sim-predictions-{datetime.datetime.now(datetime.timezone.utc):%Y%m%d-%H%M}.md"
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    print(path)


if __name__ == "__main__":
    main()
