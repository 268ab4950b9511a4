"""The sweep's outputs: the CSV (one row per point and repeat), PNG plots and the markdown report (bench/sweep).

Plots (x: concurrency C; one line per shape = tp, dp, hosts, bandwidth, KV dtype, prompt and output lengths;
with repeats, the median over them):
  throughput.png   output tok/s
  ttft.png         TTFT p50 (solid) and p99 (dashed), ms
  itl.png          ITL p50 (solid) and p90 (dashed), ms
  allreduce.png    share of the engine's step time in all-reduce, % (tpserve:step_time_seconds_total)
  kv_usage.png     KV usage mean (solid) and peak (dashed), %
"""
import csv
import os
import statistics
import subprocess

CSV_FIELDS = ["key", "repeat", "time_utc", "tp", "dp", "hosts", "bandwidth", "concurrency", "prompt_min",
              "prompt_max", "out_min", "out_max", "kv_dtype", "requests", "ok", "errors", "prompt_tok_mean",
              "out_tok_mean", "out_tok_s", "req_s", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "itl_mean_ms",
              "itl_p50_ms", "itl_p90_ms", "itl_p99_ms", "e2e_p50_s", "wall_s", "allreduce_share", "step_time_s",
              "kv_usage_mean", "kv_usage_peak", "load1_before", "load1_after", "first_error"]


def done_keys(csv_path):
    """{(key, repeat)} of the rows already in the CSV (empty when it does not exist)."""
    if not os.path.exists(csv_path):
        return set()
    with open(csv_path, newline="") as f:
        return {(r["key"], int(r["repeat"])) for r in csv.DictReader(f)}


def append_row(csv_path, row):
    new = not os.path.exists(csv_path)
    with open(csv_path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        if new:
            w.writeheader()
        w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})


def read_rows(csv_path):
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k in CSV_FIELDS:
            if k in ("key", "time_utc", "bandwidth", "kv_dtype", "first_error"):
                continue
            try:
                r[k] = float(r[k])
            except (TypeError, ValueError):
                r[k] = float("nan")
    return rows


def shape_label(r):
    s = f"tp{int(r['tp'])} dp{int(r['dp'])}"
    if int(r["hosts"]) > 0:
        s += f" {int(r['hosts'])} hosts @{r['bandwidth']}"
    return (s + f" kv {r['kv_dtype']} p{int(r['prompt_min'])}-{int(r['prompt_max'])}w"
            f" o{int(r['out_min'])}-{int(r['out_max'])}")


def series(rows, field, scale=1.0):
    """{shape label: ([C...], [median over repeats...])}."""
    by = {}
    for r in rows:
        by.setdefault(shape_label(r), {}).setdefault(r["concurrency"], []).append(r[field] * scale)
    return {lab: (sorted(d), [statistics.median(d[c]) for c in sorted(d)]) for lab, d in by.items()}


def _plot(out, name, title, ylabel, rows, fields):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 5))
    colors = {}
    for field, scale, style, tag in fields:
        for lab, (xs, ys) in series(rows, field, scale).items():
            c = colors.setdefault(lab, f"C{len(colors) % 10}")
            ax.plot(xs, ys, style, color=c, marker="o", label=f"{lab}{tag}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrency (closed-loop clients)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, name), dpi=100)
    plt.close(fig)
    return name


def machine():
    def sh(cmd):
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    model = sh("lscpu | sed -n 's/^Model name: *//p'")
    flags = sh("grep -m1 -o -w -E 'avx512f|avx512bw|avx512_bf16|avx512_vnni|avx512vbmi|amx_tile|avx2' "
               "/proc/cpuinfo | sort -u | tr '\\n' ' '")
    return f"{model}, {os.cpu_count()} cores, flags: {flags.strip()}"


def write_report(out, settings, config_path, command):
    csv_path = os.path.join(out, "sweep.csv")
    rows = read_rows(csv_path) if os.path.exists(csv_path) else []
    plots = []
    if rows:
        plots = [
            _plot(out, "throughput.png", "Output throughput", "output tok/s", rows, [("out_tok_s", 1, "-", "")]),
            _plot(out, "ttft.png", "TTFT p50 (solid) / p99 (dashed)", "ms", rows,
                  [("ttft_p50_ms", 1, "-", " p50"), ("ttft_p99_ms", 1, "--", " p99")]),
            _plot(out, "itl.png", "ITL p50 (solid) / p90 (dashed)", "ms / token", rows,
                  [("itl_p50_ms", 1, "-", " p50"), ("itl_p90_ms", 1, "--", " p90")]),
            _plot(out, "allreduce.png", "Share of step time in all-reduce", "%", rows,
                  [("allreduce_share", 100, "-", "")]),
            _plot(out, "kv_usage.png", "KV usage mean (solid) / peak (dashed)", "% of the pool", rows,
                  [("kv_usage_mean", 100, "-", " mean"), ("kv_usage_peak", 100, "--", " peak")]),
        ]
    loads = [r["load1_before"] for r in rows] + [r["load1_after"] for r in rows]
    lines = [f"# Sweep `{settings['name']}`", "",
             f"- command: `{command}`", f"- config: `{config_path}`", f"- machine: {machine()}",
             f"- model: `{settings['model']}` ({settings['dtype']}, quantized {settings['quantized']}), "
             f"{settings['threads']} thread(s) per rank, KV pool {settings['cache_memory_mb']} MiB per rank, "
             f"max_num_seqs {settings['max_num_seqs']}, max_num_batched_tokens {settings['max_num_batched_tokens']}",
             "- client: bench/load_gen.py requests, closed loop at C, streaming, temperature 0, ignore_eos; "
             "requests per point max(min, per_client x C); dp replicas get requests round robin",
             f"- load average (1 min) over the runs: {min(loads):.1f} .. {max(loads):.1f}" if loads else "- no runs",
             "- metrics: TTFT / ITL / throughput on the client's clock (bench/sweep_point.py says the formulas); "
             "all-reduce share from tpserve:step_time_seconds_total; KV usage from kv_cache_usage_perc polled 4/s",
             "", "| point | rep | ok | prompt tok | out tok | out tok/s | TTFT p50 / p90 / p99 ms | ITL p50 / p90 ms "
             "| all-reduce % | KV mean / peak % | load1 |", "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        lines.append(f"| {r['key']} | {int(r['repeat'])} | {int(r['ok'])}/{int(r['requests'])} "
                     f"| {r['prompt_tok_mean']:.0f} | {r['out_tok_mean']:.0f} | {r['out_tok_s']:.1f} "
                     f"| {r['ttft_p50_ms']:.0f} / {r['ttft_p90_ms']:.0f} / {r['ttft_p99_ms']:.0f} "
                     f"| {r['itl_p50_ms']:.1f} / {r['itl_p90_ms']:.1f} | {100 * r['allreduce_share']:.1f} "
                     f"| {100 * r['kv_usage_mean']:.1f} / {100 * r['kv_usage_peak']:.1f} "
                     f"| {r['load1_before']:.1f}->{r['load1_after']:.1f} |")
    lines.append("")
    for p in plots:
        lines += [f"![{p}]({p})", ""]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines))
