#!/usr/bin/env python3
"""Cross-check fixtures/tokenizer_ids.json (made by tpserve-oracle via llama_tokenize) against llama.cpp's own
llama-tokenize tool, one process per string. Development aid; needs tests/peers/build_llama_cpp.sh first.
Skips the empty string and strings containing NUL (not expressible through llama-tokenize -f)."""
import json, os, subprocess, sys, tempfile

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
tool = os.path.join(root, "third_party/llama.cpp-build/bin/llama-tokenize")
fixture = json.load(open(os.path.join(root, "tests/peers/fixtures/tokenizer_ids.json")))
model = os.path.join(root, "models", fixture["model"])
bad = checked = 0
for case in fixture["cases"]:
    text = case["text"]
    if text == "" or "\x00" in text:
        continue
    with tempfile.NamedTemporaryFile("wb", delete=False) as f:
        f.write(text.encode())
    try:
        out = subprocess.run([tool, "-m", model, "-f", f.name, "--ids", "--log-disable", "--no-bos", "--no-escape"],
                             capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    finally:
        os.unlink(f.name)
    checked += 1
    if json.loads(out) != case["ids"]:
        bad += 1
        print("MISMATCH", repr(text), out, case["ids"])
print(f"checked {checked} of {len(fixture['cases'])} strings, {bad} mismatches")
sys.exit(1 if bad else 0)
