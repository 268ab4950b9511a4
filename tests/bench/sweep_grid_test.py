#!/usr/bin/python3
"""bench/sweep_grid.py: a grid expands to the product of its axes (hosts 0 kept once whatever the bandwidth),
request counts follow requests.{per_client, min}, and every bad field is refused naming the file and field.
  sweep_grid_test.py REPO_ROOT"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(sys.argv[1], "bench"))
import sweep_grid  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


tmp = tempfile.mkdtemp()


def write(text):
    p = os.path.join(tmp, "s.yaml")
    with open(p, "w") as f:
        f.write(text)
    return p


BASE = """name: t
model: models/x.gguf
requests: {per_client: 3, min: 5}
grid:
  tp: [1, 3]
  hosts: [0, 3]
  bandwidth: [1gbit, 10mbit]
  concurrency: [1, 4]
  kv_dtype: [bf16, int8]
"""
s, g = sweep_grid.load_sweep(write(BASE))
pts = sweep_grid.expand(g)
# (tp 2) x (hosts 0: 1 bandwidth + hosts 3: 2 bandwidths = 3) x (kv 2) x (C 2) = 24
check(len(pts) == 24, f"24 points expected, got {len(pts)}")
check(len({sweep_grid.point_key(p) for p in pts}) == 24, "point keys must be distinct")
check(all(p["bandwidth"] == "local" for p in pts if p["hosts"] == 0), "hosts 0 points have bandwidth 'local'")
check(sweep_grid.n_requests(s, pts[0]) == 5 and sweep_grid.n_requests(s, dict(pts[0], concurrency=4)) == 12,
      "requests = max(min, per_client x C)")
# Points of one server shape are adjacent (one server start per shape).
keys = [sweep_grid.server_key(p) for p in pts]
check(len([i for i in range(1, len(keys)) if keys[i] != keys[i - 1]]) + 1 == len(set(keys)),
      "points of one server shape must be adjacent")

BAD = [
    ("model: models/x.gguf\n", "model", "model: models/x.gguf\nmodel_typo: 1\n"),
    ("  tp: [1, 3]", "grid.tp", "  tp: [0]"),
    ("  bandwidth: [1gbit, 10mbit]", "grid.bandwidth", "  bandwidth: [fast]"),
    ("  kv_dtype: [bf16, int8]", "grid.kv_dtype", "  kv_dtype: [fp4]"),
    ("  concurrency: [1, 4]", "grid.concurrency", "  concurrency: []"),
    ("  concurrency: [1, 4]", "grid.prompt_words", "  concurrency: [1]\n  prompt_words: [[50, 10]]"),
    ("  concurrency: [1, 4]", "grid.speed", "  concurrency: [1]\n  speed: [1]"),
    ("requests: {per_client: 3, min: 5}", "requests.min", "requests: {min: -1}"),
    ("model: models/x.gguf\n", "model", ""),
]
for old, field, new in BAD:
    try:
        sweep_grid.load_sweep(write(BASE.replace(old, new)))
        failures.append(f"{field}: accepted a bad value")
    except sweep_grid.SweepConfigError as e:
        check(f": {field}" in str(e) or f": {field.split('.')[0]}" in str(e), f"{field}: message names it: {e}")
        check(str(e).startswith(os.path.join(tmp, "s.yaml")), f"{field}: message names the file: {e}")
try:
    sweep_grid.load_sweep(os.path.join(tmp, "missing.yaml"))
    failures.append("a missing file was accepted")
except sweep_grid.SweepConfigError as e:
    check("cannot read" in str(e), f"missing file: {e}")

for f in failures:
    print("FAIL:", f)
print(f"sweep_grid_test: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
