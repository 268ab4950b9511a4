"""Summarize a llama.cpp GGUF for tests/common/dtype_test.cpp (run by make_q5_fixture.sh, make_lowbit_fixture.sh):
  {"command", "llama_cpp_version", "types": {tensor: ggml type name},
   "samples": {tensor: {"type", "row_len", "rows": [{"bytes": hex, "values": [gguf-py's dequantized floats]}]}}}
The values are gguf.quants.dequantize (llama.cpp's own Python reference decoder) of the rows' bytes.
The first two rows of the first 2-D tensor of each type in TYPES (ggml type names; default Q5_1 Q5_K) are sampled.
usage: make_q5_fixture.py GGUF COMMAND LLAMA_VERSION [TYPES...]
"""
import json
import sys

import numpy as np
from gguf import GGUFReader
from gguf.constants import GGMLQuantizationType as T
from gguf.quants import dequantize

path, command, version = sys.argv[1], sys.argv[2], sys.argv[3]
type_names = sys.argv[4:] or ["Q5_1", "Q5_K"]
r = GGUFReader(path)
types = {t.name: t.tensor_type.name for t in r.tensors}
samples = {}
want = {T[name]: 1 for name in type_names}
for t in r.tensors:
    if t.tensor_type in want and want[t.tensor_type] > 0 and len(t.shape) == 2:
        want[t.tensor_type] -= 1
        row_len = int(t.shape[0])  # ne[0]: the row
        data = np.asarray(t.data).reshape(int(t.shape[1]), -1)  # rows of raw bytes
        rows = []
        for i in (0, 1):
            raw = data[i].tobytes()
            vals = dequantize(np.frombuffer(raw, dtype=np.uint8), t.tensor_type).reshape(-1)
            assert vals.size == row_len
            rows.append({"bytes": raw.hex(), "values": [float("%.9g" % v) for v in vals.astype(np.float32)]})
        samples[t.name] = {"type": t.tensor_type.name, "row_len": row_len, "rows": rows}
assert all(v == 0 for v in want.values()), want
json.dump({"command": command, "llama_cpp_version": version, "types": types, "samples": samples}, sys.stdout,
          separators=(",", ":"))
print()
