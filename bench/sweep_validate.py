#!/usr/bin/python3
"""Simulator vs the sweep's measured points: `tpserve simulate` on each point's own requests.

  bench/sweep_validate.py SWEEP_DIR --card NAME|PATH --weights FORMAT [--model-card NAME] [--out FILE.md]
                          [--json FILE]

For every row of SWEEP_DIR/sweep.csv on this host (hosts 0): a JSONL trace of the point's requests exactly as
served (requests/KEY-rR.jsonl: prompt_len from the server's usage, output_len), replayed closed loop at the
point's C (`tpserve simulate --concurrency C`, requests in the order the clients took them) with the sweep's tp,
dp, KV dtype, KV pool, context and scheduler limits. Compares:
  throughput  output tok/s                    error = (predicted - measured) / measured
  TTFT p50    ms                              error likewise
  mean ITL    ms (measured: mean of the requests' mean ITL; simulated: mean over every gap)
  ratios      a point's throughput, TTFT p50 and TTFT mean over the same shape's lowest-C point (measured vs
              predicted):
              machine load that slows every point alike cancels in them.
Prints a markdown table (or writes --out) and the median |error| of each; --json writes the numbers.
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import sweep_report  # noqa: E402

ROOT = os.path.dirname(HERE)
KV = {"bf16": "bf16", "f32": "f32", "fp8_e4m3": "fp8", "int8": "int8"}


def simulate(tpserve, row, reqs, settings, card, weights, model_card, tmp):
    trace = os.path.join(tmp, f"{row['key']}-r{int(row['repeat'])}.jsonl")
    with open(trace, "w") as f:
        for r in sorted(reqs, key=lambda r: r["index"]):
            f.write(json.dumps({"arrival_s": 0, "prompt_len": r["prompt_len"], "output_len": r["output_len"]}) + "\n")
    cmd = [tpserve, "simulate", "--model", model_card, "--gpu", card, "--tp", str(int(row["tp"])),
           "--dp", str(int(row["dp"])), "--weights", weights, "--kv-dtype", KV[row["kv_dtype"]],
           "--kv-mem", f"{settings['cache_memory_mb']}MiB", "--context", str(settings["max_context"]),
           "--max-num-seqs", str(settings["max_num_seqs"]),
           "--max-num-batched-tokens", str(settings["max_num_batched_tokens"]),
           "--concurrency", str(int(row["concurrency"])), "--workload", trace, "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return json.loads(r.stdout)


def compare(sweep_dir, settings, card, weights, model_card, tpserve):
    rows = [r for r in sweep_report.read_rows(os.path.join(sweep_dir, "sweep.csv"))
            if int(r["hosts"]) == 0 and int(r["errors"]) == 0]
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for row in rows:
            path = os.path.join(sweep_dir, "requests", f"{row['key']}-r{int(row['repeat'])}.jsonl")
            reqs = [json.loads(line) for line in open(path)]
            s = simulate(tpserve, row, reqs, settings, card, weights, model_card, tmp)
            out.append({"key": row["key"], "repeat": int(row["repeat"]), "tp": int(row["tp"]), "dp": int(row["dp"]),
                        "c": int(row["concurrency"]), "shape": sweep_report.shape_label(row),
                        "load1": row["load1_before"],
                        "prompt_tok": row["prompt_tok_mean"], "out_tok": row["out_tok_mean"],
                        "meas_tps": row["out_tok_s"], "pred_tps": s["output_tok_per_s"],
                        "meas_ttft": row["ttft_p50_ms"], "pred_ttft": 1e3 * s["ttft_s"]["p50"],
                        "meas_itl": row["itl_mean_ms"], "pred_itl": 1e3 * s["itl_s"]["mean"],
                        "meas_ttft_mean": 1e3 * statistics.mean(r["ttft_s"] for r in reqs),
                        "pred_ttft_mean": 1e3 * s["ttft_s"]["mean"]})
    # Ratios over the same shape and repeat's lowest-C point.
    base = {}
    for r in out:
        k = (r["shape"], r["repeat"])
        if k not in base or r["c"] < base[k]["c"]:
            base[k] = r
    for r in out:
        b = base[(r["shape"], r["repeat"])]
        r["meas_tps_ratio"] = r["meas_tps"] / b["meas_tps"]
        r["pred_tps_ratio"] = r["pred_tps"] / b["pred_tps"]
        r["meas_ttft_ratio"] = r["meas_ttft"] / b["meas_ttft"]
        r["pred_ttft_ratio"] = r["pred_ttft"] / b["pred_ttft"]
        r["meas_ttft_mean_ratio"] = r["meas_ttft_mean"] / b["meas_ttft_mean"]
        r["pred_ttft_mean_ratio"] = r["pred_ttft_mean"] / b["pred_ttft_mean"]
        r["is_base"] = r is b
        for m in ("tps", "ttft", "itl"):
            r[f"err_{m}"] = (r[f"pred_{m}"] - r[f"meas_{m}"]) / r[f"meas_{m}"]
        for m in ("tps", "ttft", "ttft_mean"):
            r[f"err_{m}_ratio"] = r[f"pred_{m}_ratio"] / r[f"meas_{m}_ratio"] - 1
    return out


def medians(out):
    med = lambda xs: statistics.median(xs) if xs else float("nan")  # noqa: E731
    nb = [r for r in out if not r["is_base"]]
    return {"tps": med([abs(r["err_tps"]) for r in out]), "ttft": med([abs(r["err_ttft"]) for r in out]),
            "itl": med([abs(r["err_itl"]) for r in out]),
            "tps_ratio": med([abs(r["err_tps_ratio"]) for r in nb]),
            "ttft_ratio": med([abs(r["err_ttft_ratio"]) for r in nb])}


def table(out):
    lines = ["| point | rep | load1 | prompt / out tok | out tok/s meas / pred / err | TTFT p50 ms meas / pred / err "
             "| mean ITL ms meas / pred | tok/s ratio to lowest C meas / pred | TTFT ratio meas / pred |",
             "|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in out:
        lines.append(f"| {r['key']} | {r['repeat']} | {r['load1']:.1f} | {r['prompt_tok']:.0f} / {r['out_tok']:.0f} "
                     f"| {r['meas_tps']:.1f} / {r['pred_tps']:.1f} / {100 * r['err_tps']:+.0f}% "
                     f"| {r['meas_ttft']:.0f} / {r['pred_ttft']:.0f} / {100 * r['err_ttft']:+.0f}% "
                     f"| {r['meas_itl']:.1f} / {r['pred_itl']:.1f} "
                     f"| {r['meas_tps_ratio']:.2f} / {r['pred_tps_ratio']:.2f} "
                     f"| {r['meas_ttft_ratio']:.2f} / {r['pred_ttft_ratio']:.2f} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sweep_dir")
    ap.add_argument("--config", required=True, help="the sweep's YAML (its scheduler and cache settings)")
    ap.add_argument("--card", required=True, help="hardware card name or file (configs/hardware)")
    ap.add_argument("--weights", required=True, help="simulate --weights (int4 for Q4_1 GGUF kept quantized)")
    ap.add_argument("--model-card", default="SmolLM2-135M")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    import sweep_grid
    settings, _ = sweep_grid.load_sweep(a.config)
    tpserve = os.environ.get("TPSERVE", os.path.join(ROOT, "build/launch/tpserve"))
    out = compare(a.sweep_dir, settings, a.card, a.weights, a.model_card, tpserve)
    m = medians(out)
    print(table(out))
    print(f"\nmedian |error|: throughput {100 * m['tps']:.0f}%, TTFT p50 {100 * m['ttft']:.0f}%, "
          f"mean ITL {100 * m['itl']:.0f}%; ratios to the lowest C: throughput {100 * m['tps_ratio']:.0f}%, "
          f"TTFT {100 * m['ttft_ratio']:.0f}%")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"points": out, "median_abs_error": m}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
