"""transformers + compressed-tensors on OUR `tpserve quantize` output (run by make_quantize_ct_fixtures.sh).

usage: make_quantize_ct_fixtures.py [--merge] W OUT_JSON CASE...   (W/<case>/ is a directory tpserve wrote;
W/<case>/.flags its quantize flags; the cases "base" and "base_tied" are the unquantized synthetic models; --merge: OUT_JSON's other
cases are kept, its versions and prompts must be these)
Writes OUT_JSON:
  {"versions": {...}, "prompts": [[ids]...],
   "cases": {case: {"flags": str, "format": str | null, "crc32": {"model.safetensors": hex, "config.json": hex},
                    "logits": [[vocab floats after each prompt]],
                    "logits_vllm_rule": [[...]] (int8-activation cases only: see vllm_int8_rule)}}}
The reference: AutoModelForCausalLM.from_pretrained(dir, dtype=torch.float32) on CPU — compressed-tensors
decompresses each quantized module's weights and applies its activation quantization (W8A8: per-token dynamic
int8 fake quantization) in its forward hooks.
"""
import contextlib
import json
import os
import sys
import zlib

import torch

import compressed_tensors
import transformers
from transformers import AutoModelForCausalLM

PROMPTS = [[1], [5, 77, 300, 12, 9], [511, 0, 42, 42, 42, 7, 100, 256, 255, 3, 17, 400],
           [(i * 37 + 11) % 512 for i in range(30)]]


def crc(path):
    with open(path, "rb") as f:
        return "%08x" % (zlib.crc32(f.read()) & 0xFFFFFFFF)


def run(m):
    out = []
    with torch.no_grad():
        for p in PROMPTS:
            lg = m(torch.tensor([p])).logits[0, -1].float()
            out.append([float("%.7g" % v) for v in lg.tolist()])
    return out


def int8_activations(qc):
    if qc is None:
        return False
    a = [g.get("input_activations") for g in qc["config_groups"].values()]
    return any(x and x["type"] == "int" and x["num_bits"] == 8 and x["dynamic"] for x in a)


@contextlib.contextmanager
def vllm_int8_rule():
    """compressed-tensors' dynamic int8 activation fake quantization takes scale = max|x| / 127.5 into
    [-128, 127]; vLLM's kernels (and tpserve) take max|x| / 127 into [-127, 127]. "logits_vllm_rule" is the
    same model with the scale multiplied by 127.5 / 127 (then no value reaches the clamp), i.e. vLLM's rule."""
    import compressed_tensors.quantization.lifecycle.forward as fwd
    orig = fwd.compute_dynamic_scales_and_zp

    def patched(value, args, module, global_scale=None):
        scale, zp = orig(value, args, module, global_scale)
        if args.type == "int" and args.num_bits == 8 and args.symmetric:
            scale = scale * (127.5 / 127.0)
        return scale, zp

    fwd.compute_dynamic_scales_and_zp = patched
    try:
        yield
    finally:
        fwd.compute_dynamic_scales_and_zp = orig


FP4_FORMATS = {"nvfp4-pack-quantized", "mxfp4-pack-quantized"}


def check_quantized(m, c):
    """compressed-tensors really took the modules over (not a silent dense load)."""
    n_q = sum(1 for _, mod in m.named_modules() if getattr(mod, "quantization_scheme", None) is not None)
    assert n_q == 14, f"{c}: {n_q} modules carry a quantization scheme, expected 2 layers x 7 linears"


def load(w, d, qc, c):
    if qc is None or qc.get("format") not in FP4_FORMATS:
        m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).to(torch.float32)
        if qc is not None:
            check_quantized(m, c)
        return m.eval()
    # transformers keeps compressed-tensors' FP4 decompression in BF16 and cannot run it in F32 (as in
    # make_ct_fixtures.py): the weights its compressor decompresses, run in the F32 base model.
    from compressed_tensors.compressors.base import BaseCompressor
    mq = AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16)
    check_quantized(mq, c)
    comp = BaseCompressor.get_value_from_registry(qc["format"])
    m = AutoModelForCausalLM.from_pretrained(os.path.join(w, "base"), dtype=torch.float32).to(torch.float32)
    with torch.no_grad():
        for n, mod in mq.named_modules():
            if getattr(mod, "quantization_scheme", None) is not None:
                sd = {k: v.detach() for k, v in mod.state_dict().items()}
                m.get_submodule(n).weight.copy_(comp.decompress(sd, mod.quantization_scheme)["weight"].float())
    return m.eval()


def main():
    args = sys.argv[1:]
    merge = bool(args) and args[0] == "--merge"
    w, out_json, cases = args[merge], args[merge + 1], args[merge + 2:]
    torch.set_num_threads(2)
    ref = {"versions": {"compressed-tensors": compressed_tensors.__version__, "transformers": transformers.__version__,
                        "torch": torch.__version__},
           "prompts": PROMPTS, "cases": {}}
    if merge:
        old = json.load(open(out_json))
        for k in ("versions", "prompts"):
            if old[k] != ref[k]:
                sys.exit(f"--merge: {out_json}'s {k} {old[k]} are not these {ref[k]}: remake every case")
        ref["cases"] = old["cases"]
    for c in cases:
        d = os.path.join(w, c)
        flags_path = os.path.join(d, ".flags")
        flags = open(flags_path).read().strip() if os.path.exists(flags_path) else ""
        qc = json.load(open(os.path.join(d, "config.json"))).get("quantization_config")
        m = load(w, d, qc, c)
        ref["cases"][c] = {"flags": flags, "format": None if qc is None else qc.get("format"),
                           "crc32": {f: crc(os.path.join(d, f)) for f in ("model.safetensors", "config.json")},
                           "logits": run(m)}
        if int8_activations(qc):
            with vllm_int8_rule():
                ref["cases"][c]["logits_vllm_rule"] = run(m)
        print(f"{c}: {ref['cases'][c]['format']} {ref['cases'][c]['crc32']}", flush=True)
    with open(out_json, "w") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")


main()
