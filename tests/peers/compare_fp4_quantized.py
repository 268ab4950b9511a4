"""Our FP4 quantizer against llm-compressor's on the same base weights, tensor by tensor (issue 14, deliverable 4:
why the NVFP4 / MXFP4 rows differ). Runs in tests/peers/make_ct_fixtures.sh's virtualenv (third_party/ct_venv).

usage: compare_fp4_quantized.py OURS_DIR THEIRS_DIR BASE_HF_DIR
  OURS_DIR     `tpserve quantize --scheme nvfp4|mxfp4 --method rtn` of the base GGUF
  THEIRS_DIR   tests/peers/llmcompressor_quality.sh's lc-nvfp4a16-rtn / lc-mxfp4a16-rtn
  BASE_HF_DIR  the base both were made from (`tpserve convert --to hf-f32`, llmcompressor_quality.sh's base-hf)

Both directories are compressed-tensors nvfp4-pack-quantized (or mxfp4-pack-quantized) checkpoints:
  <m>.weight_packed [n_out, n_in/2] uint8, two E2M1 codes a byte (low nibble first);
  <m>.weight_scale  [n_out, n_in/16] float8_e4m3fn (NVFP4) or [n_out, n_in/32] uint8 E8M0 (MXFP4);
  <m>.weight_global_scale [1] float32 (NVFP4 only): w' = e2m1 * scale / global_scale.
Prints, per quantized module: the global scales (ours, theirs, and max|W| * 448 * 6 / ... recomputed from the base),
the fraction of block-scale bytes and of E2M1 codes that differ, and the relative squared error
||W' - W||^2 / ||W||^2 of each tool's dequantized weight against the base; then the modules quantized by one tool
only and the unquantized tensors whose dtype differs; then the totals. With --explain it also recomputes
theirs from the base with compressed-tensors' own functions under two global-scale rules (per tensor, and
shared across the fused q|k|v and gate|up groups, llm-compressor's fuse_weight_observers) and says which one
their checkpoint equals.
"""
import argparse
import os
import sys

import torch
from safetensors import safe_open

E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])
FUSED = [("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj")]


def load_dir(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(d, f), "pt") as sf:
                for k in sf.keys():
                    out[k] = sf.get_tensor(k)
    return out


def codes_of(packed):
    lo = (packed & 15).to(torch.int64)
    hi = (packed >> 4).to(torch.int64)
    return torch.stack([lo, hi], dim=-1).reshape(packed.shape[0], -1)


def dequant(t, m, nv):
    codes = codes_of(t[m + ".weight_packed"])
    blk = 16 if nv else 32
    sc = t[m + ".weight_scale"]
    if nv:
        s = sc.to(torch.float32) / t[m + ".weight_global_scale"].to(torch.float32).reshape(())
    else:
        s = torch.pow(2.0, sc.to(torch.float32) - 127.0)
    return E2M1[codes] * s.repeat_interleave(blk, dim=1), codes, sc


def rel_err(a, w):
    return float(((a.double() - w.double()) ** 2).sum() / (w.double() ** 2).sum())


def modules(t):
    return sorted(k[: -len(".weight_packed")] for k in t if k.endswith(".weight_packed"))


def explain(ours_t, theirs_t, base_t, mods):
    """Recompute NVFP4 from the base with compressed-tensors' functions under both global-scale rules."""
    from compressed_tensors.quantization.lifecycle.forward import quantize as ct_quantize
    from compressed_tensors.quantization.quant_scheme import preset_name_to_scheme
    from compressed_tensors.quantization.utils.helpers import calculate_qparams, generate_gparam

    args = preset_name_to_scheme("NVFP4A16", ["Linear"]).weights

    def gs_of(w):
        return generate_gparam(w.amin(), w.amax())

    def ct_codes(w, g):
        wb = w.reshape(w.shape[0], -1, 16)
        scale, zp = calculate_qparams(wb.amin(dim=-1), wb.amax(dim=-1), args, global_scale=g)
        q = ct_quantize(w, scale, zp, args, global_scale=g)
        return scale, q

    eq = {"per-tensor": [0, 0], "fused": [0, 0]}
    for m in mods:
        w = base_t[m + ".weight"].to(torch.float32)
        parent, leaf = m.rsplit(".", 1)
        group = next((g for g in FUSED if leaf in g), (leaf,))
        g_tensor = gs_of(w)
        g_fused = min(gs_of(base_t[f"{parent}.{x}.weight"].to(torch.float32)) for x in group)
        _, th_codes, th_sc = dequant(theirs_t, m, True)
        for rule, g in (("per-tensor", g_tensor), ("fused", g_fused)):
            scale, q = ct_codes(w, g)
            same = torch.equal(scale.to(torch.float8_e4m3fn).view(torch.uint8), th_sc.view(torch.uint8))
            same_q = torch.equal(q.to(torch.float32), E2M1[th_codes])
            eq[rule][0] += int(same and same_q)
            eq[rule][1] += 1
    for rule, (n, tot) in eq.items():
        print(f"compressed-tensors recomputed with the {rule} global scale: equals theirs in {n}/{tot} modules")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ours")
    ap.add_argument("theirs")
    ap.add_argument("base")
    ap.add_argument("--explain", action="store_true")
    ap.add_argument("--quiet", action="store_true", help="totals only")
    a = ap.parse_args()
    ours_t, theirs_t, base_t = load_dir(a.ours), load_dir(a.theirs), load_dir(a.base)
    nv = any(k.endswith(".weight_global_scale") for k in theirs_t)
    mo, mt = set(modules(ours_t)), set(modules(theirs_t))
    both = sorted(mo & mt)
    tot = {"scale_diff": 0, "scales": 0, "code_diff": 0, "codes": 0, "e_ours": 0.0, "e_theirs": 0.0, "wsq": 0.0}
    if not a.quiet:
        print(f"{'module':44s} {'G ours':>10s} {'G theirs':>10s} {'G base':>10s} {'scale%':>7s} {'code%':>7s}"
              f" {'err ours':>10s} {'err theirs':>10s}")
    for m in both:
        w = base_t[m + ".weight"].to(torch.float32)
        do, co, so = dequant(ours_t, m, nv)
        dt, ct, st = dequant(theirs_t, m, nv)
        sdiff = int((so.view(torch.uint8) != st.view(torch.uint8)).sum())
        cdiff = int((co != ct).sum())
        eo, et = rel_err(do, w), rel_err(dt, w)
        wsq = float((w.double() ** 2).sum())
        tot["scale_diff"] += sdiff
        tot["scales"] += so.numel()
        tot["code_diff"] += cdiff
        tot["codes"] += co.numel()
        tot["e_ours"] += eo * wsq
        tot["e_theirs"] += et * wsq
        tot["wsq"] += wsq
        if not a.quiet:
            g = [float(t[m + ".weight_global_scale"]) if nv else float("nan") for t in (ours_t, theirs_t)]
            gb = 448.0 * 6.0 / float(w.abs().max()) if nv else float("nan")
            print(f"{m:44s} {g[0]:10.2f} {g[1]:10.2f} {gb:10.2f} {100 * sdiff / so.numel():7.3f}"
                  f" {100 * cdiff / co.numel():7.3f} {eo:10.6f} {et:10.6f}")
    for m in sorted(mo - mt):
        print(f"quantized by ours only: {m}")
    for m in sorted(mt - mo):
        print(f"quantized by theirs only: {m}")
    for k in sorted(set(ours_t) & set(theirs_t)):
        if not k.endswith((".weight_packed", ".weight_scale", ".weight_global_scale")) and \
                ours_t[k].dtype != theirs_t[k].dtype:
            print(f"unquantized {k}: ours {ours_t[k].dtype}, theirs {theirs_t[k].dtype}")
    for k in sorted(set(ours_t) ^ set(theirs_t)):
        if not any(k.startswith(m + ".") for m in mo | mt):
            print(f"only in {'ours' if k in ours_t else 'theirs'}: {k}")
    print(f"modules quantized by both: {len(both)}; block scales differing: {tot['scale_diff']}/{tot['scales']}"
          f" ({100 * tot['scale_diff'] / max(tot['scales'], 1):.3f}%); codes differing: {tot['code_diff']}/"
          f"{tot['codes']} ({100 * tot['code_diff'] / max(tot['codes'], 1):.3f}%)")
    print(f"relative squared weight error, all modules: ours {tot['e_ours'] / tot['wsq']:.6f},"
          f" theirs {tot['e_theirs'] / tot['wsq']:.6f}")
    if a.explain and nv:
        explain(ours_t, theirs_t, base_t, both)


if __name__ == "__main__":
    sys.exit(main())
