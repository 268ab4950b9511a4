"""compressed-tensors fixtures: a small synthetic Llama quantized by llm-compressor into every scheme tpserve
loads, and transformers' reference logits on each directory.

Run by make_ct_fixtures.sh (which makes the pinned virtualenv); writes OUT/<scheme>/ (config.json +
model.safetensors, as llm-compressor saves them) and OUT/reference.json:
  {"versions": {...}, "prompts": [[ids]...], "gen": G,
   "schemes": {name: {"format": str, "prompts": [{"logits": [vocab floats at the last prompt position],
                                                   "tokens": [G greedy ids], "gaps": [G top-2 gaps]}]}}}
The model: LlamaForCausalLM, 2 layers, hidden 256, 8 heads (head_dim 32), 4 KV heads, intermediate 512,
vocab 512, untied lm_head, weights N(0, 0.05^2) from torch seed 0, saved as BF16 (scales come out BF16, as
in real checkpoints). The reference runs in F32 (`dtype=torch.float32`) with compressed-tensors
decompressing each quantized module (weights dequantized as compressed-tensors does; activation
quantization applied by its forward hooks), on CPU.
"""
import json
import os
import shutil
import sys

import torch

OUT = sys.argv[1]
PROMPTS = [[1], [5, 77, 300, 12, 9], [511, 0, 42, 42, 42, 7, 100, 256, 255, 3, 17, 400],
           [(i * 37 + 11) % 512 for i in range(30)]]
GEN = 8
VOCAB = 512

import compressed_tensors  # noqa: E402
import llmcompressor  # noqa: E402
import transformers  # noqa: E402
from datasets import Dataset  # noqa: E402
from llmcompressor import oneshot  # noqa: E402
from llmcompressor.modifiers.gptq import GPTQModifier  # noqa: E402
from llmcompressor.modifiers.quantization import QuantizationModifier  # noqa: E402
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM  # noqa: E402


def base_model():
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
                      num_key_value_heads=4, head_dim=32, vocab_size=VOCAB, max_position_embeddings=256,
                      rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, initializer_range=0.05,
                      bos_token_id=1, eos_token_id=2)
    m = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "norm" in n:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.05)
    return m.to(torch.bfloat16)


def load_base(tmp):
    # llm-compressor reads the model's config back from its directory: save the base model once.
    base = os.path.join(tmp, "base")
    if not os.path.exists(os.path.join(base, "config.json")):
        base_model().save_pretrained(base)
    return AutoModelForCausalLM.from_pretrained(base, dtype=torch.bfloat16)


def tokenizer():
    # oneshot wants a processor whenever it gets a dataset, although ours is already token ids.
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(VOCAB)}, unk_token="t0"))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", pad_token="t0")


def calibration():
    g = torch.Generator().manual_seed(1)
    ids = [torch.randint(0, VOCAB, (48,), generator=g).tolist() for _ in range(16)]
    return Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * 48 for _ in ids]})


def w(num_bits, type_, strategy, **kw):
    d = {"num_bits": num_bits, "type": type_, "symmetric": True, "strategy": strategy, "dynamic": False}
    d.update(kw)
    return d


def groups(**named):
    return {"config_groups": named}


LINEAR = ["Linear"]
IGNORE = ["lm_head"]
# name -> (modifier class, modifier kwargs, needs calibration data)
SCHEMES = {
    "w4a16_g128_sym": (QuantizationModifier, dict(targets=LINEAR, scheme="W4A16", ignore=IGNORE), False),
    "w4a16_g128_asym": (QuantizationModifier, dict(targets=LINEAR, scheme="W4A16_ASYM", ignore=IGNORE), False),
    # The lm_head quantized too (nothing ignored): lm_head.weight_packed / _scale / _shape beside the dense embedding.
    "w4a16_g128_lm_head": (QuantizationModifier, dict(targets=LINEAR, scheme="W4A16", ignore=[]), False),
    # GPTQ with activation ordering as llm-compressor 0.14 does it ("weight": groups stay contiguous, no g_idx).
    "w4a16_g64_gptq_actorder_weight": (GPTQModifier, dict(ignore=IGNORE, **groups(
        group_0={"targets": LINEAR, "weights": w(4, "int", "group", group_size=64, actorder="weight")})), True),
    # The W8A16 preset of compressed-tensors 0.19 is int8 in groups of 128 (not per channel).
    "w8a16_g128": (QuantizationModifier, dict(targets=LINEAR, scheme="W8A16", ignore=IGNORE), False),
    "w8a16_channel_asym": (QuantizationModifier, dict(ignore=IGNORE, **groups(
        group_0={"targets": LINEAR, "weights": w(8, "int", "channel", symmetric=False)})), False),
    "w8a8_int8_dynamic": (QuantizationModifier, dict(targets=LINEAR, scheme="W8A8", ignore=IGNORE), False),
    # int4 g128 weights stored one a byte (int-quantized) with per-token int8 activations.
    "w4a8_int": (QuantizationModifier, dict(targets=LINEAR, scheme="W4A8", ignore=IGNORE), False),
    "w8a8_int8_static": (QuantizationModifier, dict(ignore=IGNORE, **groups(
        group_0={"targets": LINEAR, "weights": w(8, "int", "channel"),
                 "input_activations": w(8, "int", "tensor")})), True),
    "fp8_dynamic": (QuantizationModifier, dict(targets=LINEAR, scheme="FP8_DYNAMIC", ignore=IGNORE), False),
    "fp8_static": (QuantizationModifier, dict(targets=LINEAR, scheme="FP8", ignore=IGNORE), True),
    "fp8_block": (QuantizationModifier, dict(targets=LINEAR, scheme="FP8_BLOCK", ignore=IGNORE), False),
    "fp8_weight_only": (QuantizationModifier, dict(ignore=IGNORE, **groups(
        group_0={"targets": LINEAR, "weights": w(8, "float", "channel")})), False),
    "nvfp4a16": (QuantizationModifier, dict(targets=LINEAR, scheme="NVFP4A16", ignore=IGNORE), False),
    "nvfp4_w4a4": (QuantizationModifier, dict(targets=LINEAR, scheme="NVFP4", ignore=IGNORE), True),
    "mxfp4a16": (QuantizationModifier, dict(targets=LINEAR, scheme="MXFP4A16", ignore=IGNORE), False),
    # Attention in W8A16, MLP in W4A16 g128 (regex targets), layer 1's down_proj and lm_head left dense.
    "mixed_w8a16_w4a16": (QuantizationModifier, dict(
        ignore=["lm_head", "model.layers.1.mlp.down_proj"], **groups(
            attn={"targets": ["re:.*self_attn\\..*_proj$"], "weights": w(8, "int", "channel")},
            mlp={"targets": ["re:.*mlp\\..*_proj$"], "weights": w(4, "int", "group", group_size=128)})), False),
    # Two formats in one checkpoint ("format": "mixed-precision"): attention FP8 weight-only (naive-quantized),
    # MLP W4A16 g128 (pack-quantized); lm_head dense.
    "mixed_precision_fp8_w4a16": (QuantizationModifier, dict(ignore=IGNORE, **groups(
        attn={"targets": ["re:.*self_attn\\..*_proj$"], "weights": w(8, "float", "channel")},
        mlp={"targets": ["re:.*mlp\\..*_proj$"], "weights": w(4, "int", "group", group_size=128)})), False),
}


def gidx_checkpoint(src, dst, group_size=64):
    """Act-order with g_idx ("actorder": "group"), which llm-compressor 0.14 no longer writes and
    compressed-tensors 0.19 no longer reads, but older checkpoints (GPTQ desc_act) hold: every linear of the
    base model quantized to symmetric int4 with groups of `group_size` columns chosen by a random permutation
    (g_idx[c] = position of c in the permutation // group_size), scales = max|w| / 7.5 of the group rounded
    to BF16, q = clamp(round(w / scale), -8, 7), packed by compressed-tensors' pack_to_int32. Returns the
    module name -> dequantized weight (the reference's weights: q * scale[g_idx])."""
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32
    from safetensors.torch import load_file, save_file
    shutil.copytree(src, dst)
    cfg_path = os.path.join(dst, "config.json")
    cfg = json.load(open(cfg_path))
    g = cfg["quantization_config"]["config_groups"]["group_0"]["weights"]
    g["group_size"], g["actorder"] = group_size, "group"
    json.dump(cfg, open(cfg_path, "w"), indent=2)
    base = load_file(os.path.join(OUT, ".work", "base", "model.safetensors"))
    out, deq = {}, {}
    gen = torch.Generator().manual_seed(7)
    for name, t in base.items():
        mod = name[: -len(".weight")]
        if not name.endswith("_proj.weight"):
            out[name] = t
            continue
        wf = t.float()
        n_out, n_in = wf.shape
        perm = torch.randperm(n_in, generator=gen)
        g_idx = torch.empty(n_in, dtype=torch.int32)
        g_idx[perm] = (torch.arange(n_in) // group_size).to(torch.int32)
        n_groups = n_in // group_size
        amax = torch.zeros(n_out, n_groups)
        for gi in range(n_groups):
            amax[:, gi] = wf[:, g_idx == gi].abs().amax(dim=1)
        scale = (amax / 7.5).clamp(min=1e-8).to(torch.bfloat16)
        s_col = scale.float()[:, g_idx.long()]
        q = torch.clamp(torch.round(wf / s_col), -8, 7).to(torch.int8)
        out[mod + ".weight_packed"] = pack_to_int32(q, 4)
        out[mod + ".weight_scale"] = scale
        out[mod + ".weight_shape"] = torch.tensor([n_out, n_in], dtype=torch.int64)
        out[mod + ".weight_g_idx"] = g_idx
        deq[mod] = q.float() * s_col
    save_file(out, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    return deq


NO_REFERENCE = {"nvfp4_w4a4"}  # FP4 activations: kept to check that tpserve refuses them by name
DECOMPRESS_BF16 = {"nvfp4a16", "mxfp4a16"}


def reference(path, replace=None):
    if replace is None:
        m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    else:  # the base model with these dequantized weights
        m = AutoModelForCausalLM.from_pretrained(os.path.join(OUT, ".work", "base"), dtype=torch.float32)
        with torch.no_grad():
            for mod, wdeq in replace.items():
                m.get_submodule(mod).weight.copy_(wdeq)
    m = m.to(torch.float32)  # FP4 decompression leaves BF16 weights behind
    m.eval()
    out = []
    with torch.no_grad():
        for p in PROMPTS:
            ids = list(p)
            logits0, tokens, gaps = None, [], []
            for step in range(GEN):
                lg = m(torch.tensor([ids])).logits[0, -1].float()
                if step == 0:
                    logits0 = lg.tolist()
                top = torch.topk(lg, 2)
                tokens.append(int(top.indices[0]))
                gaps.append(float(top.values[0] - top.values[1]))
                ids.append(tokens[-1])
            out.append({"logits": logits0, "tokens": tokens, "gaps": gaps})
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    only = set(sys.argv[2:])
    ref_path = os.path.join(OUT, "reference.json")
    ref = json.load(open(ref_path)) if os.path.exists(ref_path) else {"schemes": {}}
    ref["versions"] = {"llmcompressor": llmcompressor.__version__, "compressed-tensors": compressed_tensors.__version__,
                       "transformers": transformers.__version__, "torch": torch.__version__}
    ref["prompts"] = PROMPTS
    ref["gen"] = GEN
    for name, (modifier, kwargs, calib) in SCHEMES.items():
        if only and name not in only:
            continue
        d = os.path.join(OUT, name)
        shutil.rmtree(d, ignore_errors=True)
        model = load_base(os.path.join(OUT, ".work"))
        extra = dict(dataset=calibration(), processor=tokenizer(), num_calibration_samples=16,
                     max_seq_length=48) if calib else {}
        oneshot(model=model, recipe=[modifier(**kwargs)], **extra)
        model.save_pretrained(d, save_compressed=True)
        qc = json.load(open(os.path.join(d, "config.json")))["quantization_config"]
        if name in NO_REFERENCE:
            ref["schemes"].pop(name, None)
            print(f"{name}: {qc.get('format')} (no reference: tpserve refuses it)", flush=True)
            save(ref_path, ref)
            continue
        if name in DECOMPRESS_BF16:
            # transformers keeps compressed-tensors' FP4 decompression in BF16 and cannot run it in F32: take
            # the weights it decompressed and run them in the F32 model.
            from compressed_tensors.compressors.base import BaseCompressor
            mq = AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16)
            comp = BaseCompressor.get_value_from_registry(qc["format"])
            deq = {}
            for n, mod in mq.named_modules():
                if n.endswith("_proj") and getattr(mod, "quantization_scheme", None) is not None:
                    sd = {k: v.detach() for k, v in mod.state_dict().items()}
                    deq[n] = comp.decompress(sd, mod.quantization_scheme)["weight"].float()
            ref["schemes"][name] = {"format": qc.get("format"), "prompts": reference(d, deq)}
        else:
            ref["schemes"][name] = {"format": qc.get("format"), "prompts": reference(d)}
        print(f"{name}: {qc.get('format')}", flush=True)
        if name == "w4a16_g128_sym" and (not only or "w4a16_g64_gidx" in only):
            gd = os.path.join(OUT, "w4a16_g64_gidx")
            shutil.rmtree(gd, ignore_errors=True)
            deq = gidx_checkpoint(d, gd)
            ref["schemes"]["w4a16_g64_gidx"] = {"format": "pack-quantized", "prompts": reference(gd, deq)}
            print("w4a16_g64_gidx: pack-quantized (g_idx)", flush=True)
        save(ref_path, ref)
    shutil.rmtree(os.path.join(OUT, ".work"), ignore_errors=True)


def save(path, ref):
    with open(path, "w") as f:
        json.dump(ref, f, indent=None, separators=(",", ":"))
        f.write("\n")


main()
