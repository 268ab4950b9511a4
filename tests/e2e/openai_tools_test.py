#!/usr/bin/env python3
"""Tool calling and /v1/responses through the real `openai` client against `tpserve serve` on SmolLM2
(Q4_1, --threads 1), its chat template rendered by the Jinja engine.

Checks:
  - tools + tool_choice auto / none accepted; assistant tool_calls and tool-role messages rendered through
    SmolLM2's own template: usage.prompt_tokens equals the token count of the text the template gives
    (transformers' rendering of the same messages, typed in below);
  - the auto parse path: a few-shot conversation in which SmolLM2 (temperature 0) writes a Hermes
    <tool_call> block comes back as message.tool_calls with finish_reason "tool_calls", content None; streamed,
    the deltas carry tool_calls (index/id/name, then argument fragments) that reassemble to the same call;
  - tool_choice required / a named function: generation is constrained to the call's JSON schema (structured
    output), so with a plain question (no few-shot) the answer is a tool call of a listed function whose arguments
    parse and carry the required "city" string, finish_reason "tool_calls", non-streamed and streamed; combined
    with response_format -> BadRequestError on tool_choice;
  - bad tools -> BadRequestError naming the field;
  - client.responses.create: text input + instructions, output_text equals the chat completion of the same
    messages at temperature 0, usage counts; streamed: the event types in order, the deltas concatenate to the
    text, response.completed / response.incomplete carries the response.

Usage: openai_tools_test.py TPSERVE_BIN MODEL_GGUF     Prints "N passed, M failed"; exits 1 on any failure.
"""
import json
import os
import re
import subprocess
import sys
import threading
import traceback

import httpx
import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import check, summary  # noqa: E402

TPSERVE, MODEL = sys.argv[1], sys.argv[2]

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
CALL_TEXT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
# SmolLM2 copies a call it has seen twice: the few-shot that exercises the parser end to end.
FEW_SHOT = [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": CALL_TEXT},
            {"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": CALL_TEXT},
            {"role": "user", "content": "Weather in Paris?"}]


class Server:
    def __init__(self):
        self.lines = []
        self.proc = subprocess.Popen([TPSERVE, "serve", "--model", MODEL, "--port", "0", "--threads", "1"],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        got = threading.Event()
        self.url = None

        def drain():
            for line in self.proc.stdout:
                self.lines.append(line.rstrip("\n"))
                m = re.search(r"tpserve serving (\S+) at (http://[\d.]+:\d+)", line)
                if m and not got.is_set():
                    self.name, self.url = m.group(1), m.group(2)
                    got.set()
            got.set()

        threading.Thread(target=drain, daemon=True).start()
        if not got.wait(120) or self.url is None:
            self.kill()
            raise RuntimeError("server did not start:\n" + "\n".join(self.lines[-40:]))
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key="x", max_retries=0, timeout=120)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def n_tokens(self, text):
        r = httpx.post(self.url + "/tokenize", json={"prompt": text, "add_special_tokens": False}, timeout=60)
        r.raise_for_status()
        return r.json()["count"]


def run(name, fn, *args):
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - report and keep going
        check(name + " (raised)", False, "\n" + traceback.format_exc())


def tools_accepted_and_rendered(s):
    c = s.client
    msgs = [{"role": "user", "content": "What's the weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18 C and sunny"}]
    for choice in ("auto", "none"):
        r = c.chat.completions.create(model=s.name, messages=msgs, tools=[WEATHER], tool_choice=choice,
                                      max_tokens=8, temperature=0)
        check(f"tool_choice {choice}: accepted", r.choices[0].finish_reason in ("stop", "length", "tool_calls"),
              repr(r.choices[0]))
        # SmolLM2's template (its tokenizer_config.json, also in the GGUF) renders every message as
        # <|im_start|>role\ncontent<|im_end|>\n, a default system prompt first, and ignores tools; transformers'
        # render_jinja_template (what apply_chat_template runs) gives exactly this text for these messages, the
        # assistant's null content passed as "" (as vLLM does) — checked with transformers 5.24.0.
        expected = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                    "<|im_end|>\n<|im_start|>user\nWhat's the weather in Paris?<|im_end|>\n"
                    "<|im_start|>assistant\n<|im_end|>\n<|im_start|>tool\n18 C and sunny<|im_end|>\n"
                    "<|im_start|>assistant\n")
        check(f"tool_choice {choice}: tool messages rendered by the model's template",
              r.usage.prompt_tokens == s.n_tokens(expected), f"{r.usage.prompt_tokens} vs {s.n_tokens(expected)}")


def auto_parses_calls(s):
    r = s.client.chat.completions.create(model=s.name, messages=FEW_SHOT, tools=[WEATHER], max_tokens=40,
                                         temperature=0)
    ch = r.choices[0]
    calls = ch.message.tool_calls or []
    check("auto: finish_reason tool_calls", ch.finish_reason == "tool_calls", repr(ch))
    check("auto: one parsed call", len(calls) == 1 and calls[0].function.name == "get_weather" and
          json.loads(calls[0].function.arguments) == {"city": "Paris"} and calls[0].id.startswith("call_") and
          calls[0].type == "function", repr(calls))
    check("auto: no content besides the call", ch.message.content is None, repr(ch.message.content))
    # Without tools the same output is plain text.
    r2 = s.client.chat.completions.create(model=s.name, messages=FEW_SHOT, max_tokens=40, temperature=0)
    check("no tools: the call stays text", r2.choices[0].message.tool_calls is None and
          "<tool_call>" in (r2.choices[0].message.content or ""), repr(r2.choices[0].message))
    # Streamed: tool_calls deltas, reassembled as a client does.
    chunks = list(s.client.chat.completions.create(model=s.name, messages=FEW_SHOT, tools=[WEATHER], max_tokens=40,
                                                   temperature=0, stream=True))
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    acc = {}
    for c in chunks:
        for tc in (c.choices[0].delta.tool_calls or []) if c.choices else []:
            a = acc.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            a["id"] = tc.id or a["id"]
            if tc.function and tc.function.name:
                a["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                a["arguments"] += tc.function.arguments
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    check("stream: finish_reason tool_calls", finish == ["tool_calls"], repr(finish))
    check("stream: no content", content == "", repr(content))
    check("stream: the call reassembles", list(acc) == [0] and acc[0]["name"] == "get_weather" and
          acc[0]["id"].startswith("call_") and json.loads(acc[0]["arguments"]) == {"city": "Paris"}, repr(acc))


# The forced-call tests' weather tool: WEATHER with the city's length bounded, so that no sample can run past
# max_tokens inside the string (the grammar enforces maxLength).
WEATHER_BOUNDED = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}}, "required": ["city"]}}}


def forced_and_bad(s):
    plain = [{"role": "user", "content": "What should I pack for a trip to Rome?"}]
    calc = {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        tools = [WEATHER_BOUNDED, calc] if choice == "required" else [WEATHER_BOUNDED]
        r = s.client.chat.completions.create(model=s.name, messages=plain, tools=tools, tool_choice=choice,
                                             max_tokens=96, temperature=0.7, seed=3)
        ch = r.choices[0]
        calls = ch.message.tool_calls or []
        ok = ch.finish_reason == "tool_calls" and len(calls) == 1 and ch.message.content is None
        if ok:
            args = json.loads(calls[0].function.arguments)
            names = {"get_weather"} if choice != "required" else {"get_weather", "add"}
            ok = calls[0].function.name in names and isinstance(args, dict) and (
                isinstance(args.get("city"), str) and len(args["city"]) <= 24 if calls[0].function.name == "get_weather"
                else isinstance(args.get("a"), int) and isinstance(args.get("b"), int))
        check(f"tool_choice {choice}: a valid forced call", ok, repr(ch))
    stream = s.client.chat.completions.create(model=s.name, messages=plain, tools=[WEATHER_BOUNDED], stream=True,
                                              tool_choice={"type": "function", "function": {"name": "get_weather"}},
                                              max_tokens=96, temperature=0.7, seed=3)  # the named call above, seeded
    name, args, finish = "", "", None
    for chunk in stream:
        for c in chunk.choices:
            for tc in (c.delta.tool_calls or []):
                name += (tc.function.name or "") if tc.function else ""
                args += (tc.function.arguments or "") if tc.function else ""
            finish = c.finish_reason or finish
    check("forced call streamed", name == "get_weather" and finish == "tool_calls" and
          isinstance(json.loads(args).get("city"), str), f"{name!r} {args!r} {finish!r}")
    try:
        s.client.chat.completions.create(model=s.name, messages=plain, tools=[WEATHER], tool_choice="required",
                                         response_format={"type": "json_object"}, max_tokens=8)
        check("forced call + response_format: refused", False, "accepted")
    except openai.BadRequestError as e:
        check("forced call + response_format: 400 on tool_choice", e.body.get("param") == "tool_choice", str(e))
    try:
        s.client.chat.completions.create(model=s.name, messages=FEW_SHOT, max_tokens=8,
                                         tools=[{"type": "function", "function": {"description": "no name"}}])
        check("bad tool: refused", False, "accepted")
    except openai.BadRequestError as e:
        check("bad tool: 400 naming tools[0].function.name", e.body.get("param") == "tools[0].function.name", str(e))


def responses(s):
    c = s.client
    chat = c.chat.completions.create(model=s.name, max_tokens=12, temperature=0, messages=[
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the capital of France?"}])
    r = c.responses.create(model=s.name, input="What is the capital of France?", instructions="Be brief.",
                           max_output_tokens=12, temperature=0)
    check("responses: object and id", r.object == "response" and r.id.startswith("resp_"), repr(r))
    check("responses: output_text == chat content", r.output_text == chat.choices[0].message.content,
          f"{r.output_text!r} vs {chat.choices[0].message.content!r}")
    check("responses: usage", r.usage.input_tokens == chat.usage.prompt_tokens and
          r.usage.output_tokens == chat.usage.completion_tokens, repr(r.usage))
    want_status = "incomplete" if chat.choices[0].finish_reason == "length" else "completed"
    check("responses: status", r.status == want_status, r.status)
    r2 = c.responses.create(model=s.name, input=[{"role": "system", "content": "Be brief."},
                                                 {"role": "user", "content": [{"type": "input_text",
                                                                               "text": "What is the capital of France?"}]}],
                            max_output_tokens=12, temperature=0)
    check("responses: message-list input", r2.output_text == r.output_text, f"{r2.output_text!r}")
    events = list(c.responses.create(model=s.name, input="What is the capital of France?", instructions="Be brief.",
                                     max_output_tokens=12, temperature=0, stream=True))
    types = [e.type for e in events]
    final = "response." + want_status
    head = ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
    tail = ["response.output_text.done", "response.content_part.done", "response.output_item.done", final]
    check("responses stream: event order", types[:4] == head and types[-4:] == tail and
          all(t == "response.output_text.delta" for t in types[4:-4]), repr(types))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    check("responses stream: deltas == text", text == r.output_text, f"{text!r}")
    check("responses stream: final response", events[-1].response.output_text == r.output_text and
          events[-1].response.usage.output_tokens == r.usage.output_tokens, repr(events[-1]))
    check("responses stream: sequence numbers", [e.sequence_number for e in events] == list(range(len(events))))
    try:
        c.responses.create(model=s.name, input="x", previous_response_id="resp_123")
        check("responses: previous_response_id refused", False, "accepted")
    except openai.BadRequestError as e:
        check("responses: previous_response_id refused", e.body.get("param") == "previous_response_id", str(e))


def main():
    s = Server()
    try:
        run("tools accepted and rendered", tools_accepted_and_rendered, s)
        run("auto parses calls", auto_parses_calls, s)
        run("forced and bad", forced_and_bad, s)
        run("responses", responses, s)
    finally:
        s.kill()
    return summary()


if __name__ == "__main__":
    sys.exit(main())
