#!/usr/bin/env python3
"""Summarize a quantized GGUF for tests/rank/quant_peer_test.cpp: every tensor's ggml type, the CRC-32 (zlib's)
of its bytes, and the bytes of the first rows of a few tensors (hex), as JSON.

  quant_fixture.py GGUF COMMAND > out.json     (COMMAND: the llama-quantize command that made GGUF, recorded)
"""
import hashlib
import json
import struct
import sys
import zlib

SAMPLES = {"blk.0.attn_k.weight": 4, "blk.0.ffn_down.weight": 2, "blk.29.ffn_down.weight": 2, "token_embd.weight": 2}
BLOCK = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 8: (32, 34), 12: (256, 144), 14: (256, 210),
         30: (1, 2)}


def crc32(b: bytes) -> str:
    return f"{zlib.crc32(b) & 0xFFFFFFFF:08x}"


def read_gguf(path):
    f = open(path, "rb")
    data = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v

    def string():
        nonlocal pos
        (n,) = take("Q")
        s = data[pos:pos + n]
        pos += n
        return s.decode()

    sizes = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "B", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("IQ")
            return [value(et) for _ in range(n)]
        return take(sizes[t])[0]

    _, _, n_tensors, n_kv = take("IIQQ")
    kv = {}
    for _ in range(n_kv):
        k = string()
        (t,) = take("I")
        kv[k] = value(t)
    align = kv.get("general.alignment", 32)
    infos = []
    for _ in range(n_tensors):
        name = string()
        (nd,) = take("I")
        ne = take("Q" * nd)
        t, off = take("IQ")
        infos.append((name, ne, t, off))
    base = (pos + align - 1) // align * align
    out = {}
    for name, ne, t, off in infos:
        elems, bbytes = BLOCK[t]
        n = 1
        for d in ne:
            n *= d
        size = n // elems * bbytes
        out[name] = (t, ne, data[base + off: base + off + size])
    return kv, out


def main():
    path, command = sys.argv[1], sys.argv[2]
    kv, tensors = read_gguf(path)
    doc = {"command": command, "file_type": kv.get("general.file_type"),
           "sha256": hashlib.sha256(open(path, "rb").read()).hexdigest(), "tensors": {}}
    for name, (t, ne, b) in tensors.items():
        e = {"type": t, "crc32": crc32(b)}
        if name in SAMPLES:
            elems, bbytes = BLOCK[t]
            row = ne[0] // elems * bbytes
            e["sample_rows"] = SAMPLES[name]
            e["sample_hex"] = b[:row * SAMPLES[name]].hex()
        doc["tensors"][name] = e
    json.dump(doc, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
