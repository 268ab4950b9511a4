"""llm-compressor on OUR base weights with OUR calibration tokens (run by llmcompressor_quality.sh; issue 14,
deliverable 4: the peer rows of the quality table).

usage: llmcompressor_quality.py BASE_HF_DIR CALIB_IDS_JSON SEQ_LEN OUT_ROOT CASE...
  BASE_HF_DIR     `tpserve convert --to hf-f32` of the base GGUF (so both tools start from the same F32 weights)
  CALIB_IDS_JSON  the calibration token ids (a JSON list): the first CALIB_TOKENS ids of CALIB as tpserve's
                  tokenizer cuts them (the shell script makes and checks them), cut here into rows of SEQ_LEN
                  tokens as `tpserve quantize --calib-seq-len` does (no shuffling, every row used)
  CASE            lc-w4a16-g64-gptq | lc-w4a16-g64-gptq-noact | lc-w4a16-g64-rtn | lc-w8a16-rtn |
                  lc-w8a8-sq-gptq | lc-w3a16-g64-gptq | lc-w3a16-g64-rtn | lc-w4a16-asym-g64-gptq |
                  lc-w4a16-asym-g64-rtn | lc-w8a16-gptq | lc-fp8-dynamic | lc-nvfp4a16-rtn | lc-mxfp4a16-rtn |
                  lc-w4a16-g64-awq | lc-w4a16-asym-g64-awq | lc-w8a8-rtn | lc-fp8-weight-rtn |
                  lc-w8a8-gptq | lc-nvfp4a16-gptq | lc-mxfp4a16-gptq | lc-fp8-weight-gptq | lc-fp8-dynamic-gptq |
                  lc-nvfp4a16-gptq-noact | lc-mxfp4a16-gptq-noact | lc-w8a16-awq | lc-w3a16-g64-awq
Writes OUT_ROOT/<case>/ (config.json + model.safetensors as llm-compressor saves them, save_compressed=True) and
OUT_ROOT/<case>/.row: "name|scheme|method|wall seconds|cpu seconds" of the oneshot call (loading and saving
excluded). llm-compressor's defaults otherwise: GPTQ dampening 0.01, block 128, actorder "static" (= "weight":
columns visited by decreasing Hessian diagonal, groups contiguous, scales from the original weights by the
memoryless min-max observer); SmoothQuant strength 0.5; AWQ (the transform AWQModifier before RTN's
QuantizationModifier, llm-compressor 0.14's API) with its default mappings for Llama (input_layernorm -> q|k|v,
v -> o, post_attention_layernorm -> gate|up, up -> down), duo_scaling True, n_grid 20; the sequential pipeline
propagating quantized outputs. GPTQ's actorder "static" applies to every strategy but per-tensor (channel, group,
tensor_group), so the fp4 / fp8 / W8A8 GPTQ cases carry it too (their config.json says "actorder": "static"; ours
writes null there: `tpserve quantize` has no act-order for fp schemes and keeps it out of the config for channel).
"""
import json
import os
import resource
import sys
import time

import torch
from datasets import Dataset
from llmcompressor import oneshot
from llmcompressor.modifiers.gptq import GPTQModifier
from llmcompressor.modifiers.quantization import QuantizationModifier
from llmcompressor.modifiers.smoothquant import SmoothQuantModifier
from llmcompressor.modifiers.transform import AWQModifier
from transformers import AutoModelForCausalLM, AutoTokenizer

IGNORE = ["lm_head"]

if not torch.cuda.is_available():
    # llm-compressor 0.14's AWQ pins its cached activations for faster host-to-device copies, which needs an
    # NVIDIA driver ("Found no NVIDIA driver"); on a CPU-only machine there is no copy to speed up, so they stay
    # unpinned (the values, and so the result, are the same).
    from llmcompressor.pipelines.cache import IntermediatesCache

    IntermediatesCache.pin_memory = lambda self, *args, **kwargs: None


def w(num_bits, strategy, **kw):
    d = {"num_bits": num_bits, "type": "int", "symmetric": True, "strategy": strategy, "dynamic": False}
    d.update(kw)
    return {"group_0": {"targets": ["Linear"], "weights": d}}


# case -> (scheme, method, recipe factory)
CASES = {
    "lc-w4a16-g64-gptq": ("w4a16", "llm-compressor gptq (actorder static)",
                          lambda: [GPTQModifier(ignore=IGNORE, config_groups=w(4, "group", group_size=64))]),
    "lc-w4a16-g64-gptq-noact": ("w4a16", "llm-compressor gptq (actorder none)",
                                lambda: [GPTQModifier(ignore=IGNORE, actorder=None,
                                                      config_groups=w(4, "group", group_size=64))]),
    "lc-w4a16-g64-rtn": ("w4a16", "llm-compressor rtn",
                         lambda: [QuantizationModifier(ignore=IGNORE, config_groups=w(4, "group", group_size=64))]),
    "lc-w3a16-g64-gptq": ("w3a16", "llm-compressor gptq (actorder static)",
                          lambda: [GPTQModifier(ignore=IGNORE, config_groups=w(3, "group", group_size=64))]),
    "lc-w3a16-g64-rtn": ("w3a16", "llm-compressor rtn",
                         lambda: [QuantizationModifier(ignore=IGNORE, config_groups=w(3, "group", group_size=64))]),
    "lc-w8a16-rtn": ("w8a16", "llm-compressor rtn",
                     lambda: [QuantizationModifier(ignore=IGNORE, config_groups=w(8, "channel"))]),
    "lc-w4a16-asym-g64-gptq": ("w4a16-asym", "llm-compressor gptq (actorder static)",
                               lambda: [GPTQModifier(ignore=IGNORE, config_groups=w(4, "group", group_size=64,
                                                                                    symmetric=False))]),
    "lc-w4a16-asym-g64-rtn": ("w4a16-asym", "llm-compressor rtn",
                              lambda: [QuantizationModifier(ignore=IGNORE, config_groups=w(4, "group", group_size=64,
                                                                                           symmetric=False))]),
    "lc-w8a16-gptq": ("w8a16", "llm-compressor gptq (actorder static)",
                      lambda: [GPTQModifier(ignore=IGNORE, config_groups=w(8, "channel"))]),
    "lc-fp8-dynamic": ("fp8-dynamic", "llm-compressor rtn (FP8_DYNAMIC)",
                       lambda: [QuantizationModifier(ignore=IGNORE, targets=["Linear"], scheme="FP8_DYNAMIC")]),
    "lc-nvfp4a16-rtn": ("nvfp4", "llm-compressor rtn (NVFP4A16)",
                        lambda: [QuantizationModifier(ignore=IGNORE, targets=["Linear"], scheme="NVFP4A16")]),
    "lc-mxfp4a16-rtn": ("mxfp4", "llm-compressor rtn (MXFP4A16)",
                        lambda: [QuantizationModifier(ignore=IGNORE, targets=["Linear"], scheme="MXFP4A16")]),
    "lc-w4a16-g64-awq": ("w4a16", "llm-compressor awq (duo scaling, n_grid 20) + rtn",
                         lambda: [AWQModifier(),
                                  QuantizationModifier(ignore=IGNORE, config_groups=w(4, "group", group_size=64))]),
    # AWQ's usual scheme (llm-compressor's AWQ examples use W4A16_ASYM; group 64 here, as for every grouped row)
    "lc-w4a16-asym-g64-awq": ("w4a16-asym", "llm-compressor awq (duo scaling, n_grid 20) + rtn",
                              lambda: [AWQModifier(),
                                       QuantizationModifier(ignore=IGNORE, config_groups=w(4, "group", group_size=64,
                                                                                           symmetric=False))]),
    "lc-w8a8-rtn": ("w8a8-int8", "llm-compressor rtn (W8A8)",
                    lambda: [QuantizationModifier(ignore=IGNORE, targets=["Linear"], scheme="W8A8")]),
    "lc-fp8-weight-rtn": ("fp8-weight", "llm-compressor rtn (FP8 per channel, weights only)",
                          lambda: [QuantizationModifier(ignore=IGNORE, config_groups=w(8, "channel", type="float"))]),
    # GPTQ on the schemes ours has GPTQ rows for and llm-compressor had only RTN rows (each matches the config.json
    # quantization_config `tpserve quantize --scheme S` writes, but for the actorder field, see above)
    "lc-w8a8-gptq": ("w8a8-int8", "llm-compressor gptq (W8A8, no smoothing, actorder static)",
                     lambda: [GPTQModifier(ignore=IGNORE, targets=["Linear"], scheme="W8A8")]),
    "lc-nvfp4a16-gptq": ("nvfp4", "llm-compressor gptq (NVFP4A16, actorder static)",
                         lambda: [GPTQModifier(ignore=IGNORE, targets=["Linear"], scheme="NVFP4A16")]),
    # as ours: `tpserve quantize` has no act-order for fp schemes (its columns in order)
    "lc-nvfp4a16-gptq-noact": ("nvfp4", "llm-compressor gptq (NVFP4A16, actorder none)",
                               lambda: [GPTQModifier(ignore=IGNORE, targets=["Linear"], scheme="NVFP4A16",
                                                     actorder=None)]),
    "lc-mxfp4a16-gptq": ("mxfp4", "llm-compressor gptq (MXFP4A16, actorder static)",
                         lambda: [GPTQModifier(ignore=IGNORE, targets=["Linear"], scheme="MXFP4A16")]),
    "lc-mxfp4a16-gptq-noact": ("mxfp4", "llm-compressor gptq (MXFP4A16, actorder none)",
                               lambda: [GPTQModifier(ignore=IGNORE, targets=["Linear"], scheme="MXFP4A16",
                                                     actorder=None)]),
    "lc-fp8-weight-gptq": ("fp8-weight", "llm-compressor gptq (FP8 per channel, weights only, actorder static)",
                           lambda: [GPTQModifier(ignore=IGNORE, config_groups=w(8, "channel", type="float"))]),
    "lc-fp8-dynamic-gptq": ("fp8-dynamic", "llm-compressor gptq (FP8_DYNAMIC, actorder static)",
                            lambda: [GPTQModifier(ignore=IGNORE, targets=["Linear"], scheme="FP8_DYNAMIC")]),
    # AWQ (scale search against the scheme of the QuantizationModifier after it, then RTN) on more weight-only schemes
    "lc-w8a16-awq": ("w8a16", "llm-compressor awq (duo scaling, n_grid 20) + rtn",
                     lambda: [AWQModifier(), QuantizationModifier(ignore=IGNORE, config_groups=w(8, "channel"))]),
    "lc-w3a16-g64-awq": ("w3a16", "llm-compressor awq (duo scaling, n_grid 20) + rtn",
                         lambda: [AWQModifier(),
                                  QuantizationModifier(ignore=IGNORE, config_groups=w(3, "group", group_size=64))]),
    "lc-w8a8-sq-gptq": ("w8a8-int8", "llm-compressor smoothquant+gptq",
                        lambda: [SmoothQuantModifier(smoothing_strength=0.5),
                                 GPTQModifier(ignore=IGNORE, targets=["Linear"], scheme="W8A8")]),
}


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main():
    base, calib_json, seq_len, out_root, cases = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:]
    torch.set_num_threads(int(os.environ.get("THREADS", "2")))
    ids = json.load(open(calib_json))
    rows = [ids[i:i + seq_len] for i in range(0, len(ids), seq_len)]
    data = {"input_ids": rows, "attention_mask": [[1] * len(r) for r in rows]}
    tok = AutoTokenizer.from_pretrained(base)
    for c in cases:
        scheme, method, recipe = CASES[c]
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
        t0, c0 = time.time(), cpu_seconds()
        oneshot(model=model, recipe=recipe(), dataset=Dataset.from_dict(data), processor=tok,
                num_calibration_samples=len(rows), max_seq_length=seq_len, shuffle_calibration_samples=False)
        wall, cpu = time.time() - t0, cpu_seconds() - c0
        d = os.path.join(out_root, c)
        model.save_pretrained(d, save_compressed=True)
        tok.save_pretrained(d)
        with open(os.path.join(d, ".row"), "w") as f:
            f.write(f"{c}|{scheme}|{method}|{wall:.0f}|{cpu:.0f}\n")
        print(f"{c}: {wall:.0f} s wall, {cpu:.0f} s CPU -> {d}", flush=True)


main()
