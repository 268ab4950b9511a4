"""The sweep's grid: reads a sweep YAML (configs/sweeps/*.yaml) and expands it into points.

A point is one served run: a server shape (tp, dp, hosts, link bandwidth, KV dtype) under one load
(closed-loop concurrency C, prompt words [min, max], output tokens [min, max]), repeated `repeat` times.

YAML (every field named in errors as FILE: field: reason):
  name: smoke                      # used in the report's title
  model: models/X.gguf             # relative to the repository root, or absolute
  dtype: bf16                      # runtime weights (model.dtype)            optional, bf16
  quantized: keep                  # GGUF blocks: keep | dequantize           optional, keep
  threads: 1                       # compute threads per rank                 optional, 1
  cache_memory_mb: 256             # KV pool per rank                         optional, 256
  max_context: 2048                #                                          optional, 2048
  max_num_seqs: 64                 #                                          optional, 64
  max_num_batched_tokens: 2048     #                                          optional, 2048
  seed: 0                          # load_gen's seed (requests differ per point)  optional, 0
  requests: {per_client: 3, min: 8}  # N = max(min, per_client x C)          optional, {3, 8}
  repeat: 1                        # runs of every point (interleaved: all points, then again)  optional, 1
  grid:                            # every list is one axis; the points are their product
    tp: [1]
    dp: [1]                        # dp replicas = dp separate servers; requests go round robin
    hosts: [0]                     # 0: this host; N: N emulated hosts (launch/hosts), ranks spread over them
    bandwidth: [1gbit]             # link rate of the emulated hosts (tc tbf); ignored when hosts is 0
    concurrency: [1, 2, 4]
    prompt_words: [[40, 120]]      # [min, max] words (SmolLM2: ~1.05 tokens a word)
    output_tokens: [[16, 48]]      # [min, max] tokens (ignore_eos: exactly this many)
    kv_dtype: [bf16]               # bf16 | f32 | fp8_e4m3 | int8
Points with hosts 0 and different bandwidths are the same point (kept once, bandwidth "local").
"""
import itertools

import yaml

KV_DTYPES = ("bf16", "f32", "fp8_e4m3", "int8")
AXES = ("tp", "dp", "hosts", "bandwidth", "concurrency", "prompt_words", "output_tokens", "kv_dtype")
DEFAULTS = {"dtype": "bf16", "quantized": "keep", "threads": 1, "cache_memory_mb": 256, "max_context": 2048,
            "max_num_seqs": 64, "max_num_batched_tokens": 2048, "seed": 0, "repeat": 1}
AXIS_DEFAULTS = {"tp": [1], "dp": [1], "hosts": [0], "bandwidth": ["1gbit"], "concurrency": [1],
                 "prompt_words": [[40, 120]], "output_tokens": [[16, 48]], "kv_dtype": ["bf16"]}


class SweepConfigError(ValueError):
    """A bad sweep file: the message names the file and the field."""


def _err(path, field, why):
    return SweepConfigError(f"{path}: {field}: {why}")


def _int(path, field, v, lo, hi=1 << 30):
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise _err(path, field, f"must be a whole number in [{lo}, {hi}], got {v!r}")
    return v


def _range(path, field, v):
    if not (isinstance(v, list) and len(v) == 2):
        raise _err(path, field, f"must be [min, max], got {v!r}")
    lo, hi = (_int(path, field, x, 1) for x in v)
    if lo > hi:
        raise _err(path, field, f"min {lo} > max {hi}")
    return (lo, hi)


def _bandwidth(path, field, v):
    s = str(v)
    import re
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)?(bit|kbit|mbit|gbit)", s):
        raise _err(path, field, f"must be a tc rate such as 100mbit or 1gbit, got {v!r}")
    return s


def load_sweep(path):
    """Reads and validates a sweep file; returns (settings dict, grid dict of axis -> list)."""
    try:
        with open(path) as f:
            root = yaml.safe_load(f)
    except OSError as e:
        raise SweepConfigError(f"{path}: cannot read the file: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise SweepConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(root, dict):
        raise _err(path, "<yaml>", "expected a mapping")
    known = set(DEFAULTS) | {"name", "model", "requests", "grid"}
    for k in root:
        if k not in known:
            raise _err(path, k, f"unknown field (known: {', '.join(sorted(known))})")
    s = dict(DEFAULTS)
    s.update({k: v for k, v in root.items() if k in DEFAULTS})
    if not isinstance(root.get("model"), str) or not root["model"]:
        raise _err(path, "model", "missing (a GGUF file or HF directory)")
    s["model"] = root["model"]
    s["name"] = str(root.get("name", "sweep"))
    if s["dtype"] not in ("bf16", "f32"):
        raise _err(path, "dtype", f"must be bf16 or f32, got {s['dtype']!r}")
    if s["quantized"] not in ("keep", "dequantize"):
        raise _err(path, "quantized", f"must be keep or dequantize, got {s['quantized']!r}")
    for k in ("threads", "cache_memory_mb", "max_context", "max_num_seqs", "max_num_batched_tokens", "repeat"):
        s[k] = _int(path, k, s[k], 1)
    s["seed"] = _int(path, "seed", s["seed"], 0)
    req = root.get("requests", {}) or {}
    if not isinstance(req, dict) or set(req) - {"per_client", "min"}:
        raise _err(path, "requests", "must be a mapping with per_client and/or min")
    s["requests_per_client"] = _int(path, "requests.per_client", req.get("per_client", 3), 1)
    s["requests_min"] = _int(path, "requests.min", req.get("min", 8), 1)
    grid = root.get("grid")
    if not isinstance(grid, dict):
        raise _err(path, "grid", "missing (a mapping of axis -> list)")
    for k in grid:
        if k not in AXES:
            raise _err(path, f"grid.{k}", f"unknown axis (axes: {', '.join(AXES)})")
    g = {}
    for axis in AXES:
        vals = grid.get(axis, AXIS_DEFAULTS[axis])
        if not isinstance(vals, list) or not vals:
            raise _err(path, f"grid.{axis}", f"must be a non-empty list, got {vals!r}")
        f = f"grid.{axis}"
        if axis in ("tp", "dp", "concurrency"):
            vals = [_int(path, f, v, 1, 4096) for v in vals]
        elif axis == "hosts":
            vals = [_int(path, f, v, 0, 64) for v in vals]
        elif axis == "bandwidth":
            vals = [_bandwidth(path, f, v) for v in vals]
        elif axis in ("prompt_words", "output_tokens"):
            vals = [_range(path, f, v) for v in vals]
        elif axis == "kv_dtype":
            for v in vals:
                if v not in KV_DTYPES:
                    raise _err(path, f, f"must be one of {', '.join(KV_DTYPES)}, got {v!r}")
        g[axis] = vals
    return s, g


def point_key(p):
    """The point's identity in the CSV (resume skips rows with this key and repeat)."""
    return (f"tp{p['tp']}-dp{p['dp']}-h{p['hosts']}-{p['bandwidth']}-c{p['concurrency']}"
            f"-p{p['prompt_min']}_{p['prompt_max']}-o{p['out_min']}_{p['out_max']}-{p['kv_dtype']}")


def server_key(p):
    """Points with the same server key share one started server (shape and KV dtype)."""
    return (p["tp"], p["dp"], p["hosts"], p["bandwidth"], p["kv_dtype"])


def expand(grid):
    """The grid's points (dicts), deduplicated, ordered so points of one server shape are adjacent."""
    seen, points = set(), []
    for tp, dp, hosts, bw, kv, pw, ot, c in itertools.product(
            grid["tp"], grid["dp"], grid["hosts"], grid["bandwidth"], grid["kv_dtype"], grid["prompt_words"],
            grid["output_tokens"], grid["concurrency"]):
        p = {"tp": tp, "dp": dp, "hosts": hosts, "bandwidth": bw if hosts > 0 else "local", "concurrency": c,
             "prompt_min": pw[0], "prompt_max": pw[1], "out_min": ot[0], "out_max": ot[1], "kv_dtype": kv}
        k = point_key(p)
        if k not in seen:
            seen.add(k)
            points.append(p)
    return points


def n_requests(settings, p):
    return max(settings["requests_min"], settings["requests_per_client"] * p["concurrency"])
