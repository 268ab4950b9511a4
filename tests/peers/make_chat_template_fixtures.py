"""Chat-template fixtures: transformers.apply_chat_template over a table of conversations, per model family.

Usage: make_chat_template_fixtures.py TEMPLATES_DIR SMOLLM2_GGUF OUT_DIR   (make_chat_template_fixtures.sh runs it)
Writes OUT_DIR/<family>.json: {"family", "source", "template", "bos_token", "eos_token", "now",
"cases": [{"name", "messages", "tools", "documents", "kwargs", "add_generation_prompt", "expected" | "error"}]}.
"expected" is apply_chat_template(..., tokenize=False) byte for byte; "error" (the message) when the template
raises on that conversation (our engine must refuse it too). strftime_now() is pinned to the instant "now"
(unix seconds, UTC) so date-stamping templates render reproducibly.
"""
import datetime as dt
import json
import os
import sys

import gguf
import transformers.utils.chat_template_utils as ctu
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast

NOW = 1764547200  # 2025-12-01 00:00:00 UTC


class _FixedDatetime(dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return dt.datetime.fromtimestamp(NOW, tz)


ctu.datetime = _FixedDatetime  # what transformers' strftime_now() calls

# family -> (template file in llama.cpp's models/templates, HF repo, bos, eos)
FAMILIES = {
    "llama3.1": ("meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama/Llama-3.1-8B-Instruct",
                 "<|begin_of_text|>", "<|eot_id|>"),
    "llama3.2": ("meta-llama-Llama-3.2-3B-Instruct.jinja", "meta-llama/Llama-3.2-3B-Instruct",
                 "<|begin_of_text|>", "<|eot_id|>"),
    "qwen2.5": ("Qwen-Qwen2.5-7B-Instruct.jinja", "Qwen/Qwen2.5-7B-Instruct", None, "<|im_end|>"),
    "qwen3": ("Qwen-Qwen3-0.6B.jinja", "Qwen/Qwen3-0.6B", None, "<|im_end|>"),
    "mistral-nemo": ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistralai/Mistral-Nemo-Instruct-2407",
                     "<s>", "</s>"),
    "gemma2": ("google-gemma-2-2b-it.jinja", "google/gemma-2-2b-it", "<bos>", "<eos>"),
    "hermes2pro": ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
                   "NousResearch/Hermes-2-Pro-Llama-3-8B (tool_use)", "<|begin_of_text|>", "<|im_end|>"),
    "gpt-oss": ("openai-gpt-oss-120b.jinja", "openai/gpt-oss-120b", "<|startoftext|>", "<|return|>"),
}

# The tool_use template of Hermes 2 Pro iterates `tools` unconditionally (a TypeError in Python without them).
TOOLS_ONLY = {"hermes2pro"}

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
TIME_TOOL = {"type": "function", "function": {
    "name": "get_time", "description": "Current time in a time zone",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}

CALL = {"id": "call12345", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}
CALL2 = {"id": "call67890", "type": "function", "function": {"name": "get_time", "arguments": {"tz": "Europe/Paris"}}}

CASES = [
    {"name": "user_only", "messages": [{"role": "user", "content": "Hello!"}]},
    {"name": "system_user", "messages": [{"role": "system", "content": "You are terse."},
                                         {"role": "user", "content": "What is 2+2?"}]},
    {"name": "multi_turn", "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hi, who are you?"},
        {"role": "assistant", "content": "I am an assistant."},
        {"role": "user", "content": "  Tell me a joke about caf\u00e9s.  "}]},
    {"name": "no_generation_prompt", "add_generation_prompt": False, "messages": [
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello, how can I help?"}]},
    {"name": "tools_user", "tools": [WEATHER_TOOL, TIME_TOOL], "messages": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "What's the weather in Paris?"}]},
    {"name": "tool_call_and_result", "tools": [WEATHER_TOOL], "messages": [
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "{\"temp\": 18}"}]},
    {"name": "parallel_tool_calls", "tools": [WEATHER_TOOL, TIME_TOOL], "messages": [
        {"role": "system", "content": "Use tools when needed."},
        {"role": "user", "content": "Weather and time in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL, CALL2]},
        {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "18 C"},
        {"role": "tool", "tool_call_id": "call67890", "name": "get_time", "content": "09:00"},
        {"role": "assistant", "content": "It is 18 C and 09:00 in Paris."},
        {"role": "user", "content": "Thanks!"}]},
    {"name": "documents", "documents": [{"title": "Paris", "text": "Paris is the capital of France."}],
     "messages": [{"role": "user", "content": "What is the capital of France?"}]},
    {"name": "kwargs_no_thinking", "kwargs": {"enable_thinking": False},
     "messages": [{"role": "user", "content": "Hi"}]},
    {"name": "kwargs_date", "kwargs": {"date_string": "01 Dec 2025"},
     "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]},
]


def smollm2_template(path):
    r = gguf.GGUFReader(path)
    f = r.fields["tokenizer.chat_template"]
    return bytes(f.parts[f.data[0]]).decode("utf-8")


def tokenizer(template, bos, eos):
    vocab = {"<unk>": 0}
    for t in (bos, eos):
        if t:
            vocab.setdefault(t, len(vocab))
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="<unk>")),
                                  bos_token=bos, eos_token=eos, unk_token="<unk>")
    tok.chat_template = template
    return tok


def render(tok, case):
    kw = dict(case.get("kwargs") or {})
    try:
        text = tok.apply_chat_template(case["messages"], tools=case.get("tools"), documents=case.get("documents"),
                                       add_generation_prompt=case.get("add_generation_prompt", True),
                                       tokenize=False, **kw)
        return {"expected": text}
    except Exception as e:  # the template's raise_exception(), or a Jinja error on this input
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    templates, smol_gguf, out = sys.argv[1:4]
    families = {k: (open(os.path.join(templates, f), encoding="utf-8").read(), src, bos, eos)
                for k, (f, src, bos, eos) in FAMILIES.items()}
    families["smollm2"] = (smollm2_template(smol_gguf),
                           "HuggingFaceTB/SmolLM2-135M-Instruct (GGUF tokenizer.chat_template of our model)",
                           "<|im_start|>", "<|im_end|>")
    for name, (template, src, bos, eos) in sorted(families.items()):
        tok = tokenizer(template, bos, eos)
        cases = []
        for case in CASES:
            if name in TOOLS_ONLY and not case.get("tools"):
                continue
            c = {"name": case["name"], "messages": case["messages"], "tools": case.get("tools"),
                 "documents": case.get("documents"), "kwargs": case.get("kwargs"),
                 "add_generation_prompt": case.get("add_generation_prompt", True)}
            c.update(render(tok, case))
            cases.append(c)
        doc = {"family": name, "source": src, "template": template, "bos_token": bos or "", "eos_token": eos or "",
               "now": NOW, "transformers": __import__("transformers").__version__, "cases": cases}
        with open(os.path.join(out, name + ".json"), "w", encoding="utf-8") as fh:
            json.dump(doc, fh, ensure_ascii=False, indent=1)
            fh.write("\n")
        n_err = sum("error" in c for c in cases)
        print(f"{name}: {len(cases)} cases ({n_err} raise)")


if __name__ == "__main__":
    main()
