#!/usr/bin/env python3
"""Structured output end to end: `tpserve serve` on SmolLM2-135M-Instruct (Q4_1, --threads 1) driven by the
`openai` client; every generation is checked with Python's `jsonschema`.

Checks:
  - 20 JSON schemas x n=10 choices = 200 generations (chat and completions; response_format json_schema,
    vLLM's guided_json and structured_outputs.json; temperature, top_p, top_k, min_p, penalties and
    logit_bias mixed in; 4 requests in flight at once so a step batches several constrained sequences):
    each parses and validates against its schema (jsonschema.Draft202012Validator), finish_reason "stop";
  - streaming: concatenated deltas parse and validate;
  - json_object: choices that stop are JSON objects (those cut by max_tokens start one); guided_regex / structured_outputs.regex match the regex; guided_choice /
    structured_outputs.choice give one of the choices; guided_grammar (EBNF) matches its language;
  - logprobs under a constraint come back for the chosen tokens;
  - an invalid schema, regex or grammar is a 400 (openai.BadRequestError) naming the field and the problem.

Usage: structured_output_test.py TPSERVE_BIN MODEL_GGUF
Prints "N passed, M failed"; exits 1 on any failure.
"""
import json
import re
import subprocess
import sys
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai

from checks import check, summary  # tests/e2e/checks.py, beside this script

TPSERVE, MODEL = sys.argv[1], sys.argv[2]


class Server:
    """`tpserve serve --port 0` as a child process; the URL is read from its start-up line."""

    def __init__(self):
        self.lines = []
        self.proc = subprocess.Popen([TPSERVE, "serve", "--model", MODEL, "--port", "0", "--threads", "1"],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        self.url = None
        ready = threading.Event()

        def drain():
            for line in self.proc.stdout:
                self.lines.append(line.rstrip("\n"))
                m = re.search(r"tpserve serving (\S+) at (http://[\d.]+:\d+)", line)
                if m and not ready.is_set():
                    self.name, self.url = m.group(1), m.group(2)
                    ready.set()
            ready.set()

        threading.Thread(target=drain, daemon=True).start()
        if not ready.wait(120) or self.url is None:
            self.kill()
            raise RuntimeError("server did not start:\n" + "\n".join(self.lines[-40:]))
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key="x", max_retries=0, timeout=600)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def s(max_len=16, **kw):
    return {"type": "string", "maxLength": max_len, **kw}


def obj(props, required=None):
    return {"type": "object", "properties": props, "required": list(props) if required is None else required}


SCHEMAS = [
    obj({"name": s(), "age": {"type": "integer", "minimum": 0, "maximum": 120}}),
    obj({"city": s(), "country": s()}),
    obj({"answer": {"type": "boolean"}}),
    obj({"color": {"enum": ["red", "green", "blue"]}}),
    obj({"items": {"type": "array", "items": s(10), "minItems": 1, "maxItems": 3}}),
    obj({"title": s(24), "year": {"type": "integer", "minimum": 1900, "maximum": 2030}}),
    obj({"point": obj({"x": {"type": "integer", "minimum": -9, "maximum": 9},
                       "y": {"type": "integer", "minimum": -9, "maximum": 9}})}),
    obj({"ok": {"type": "boolean"}, "note": {"anyOf": [s(12), {"type": "null"}]}}),
    obj({"scores": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 100}, "maxItems": 4}}),
    obj({"status": {"const": "done"}, "count": {"type": "integer", "minimum": 1, "maximum": 5}}),
    obj({"first": s(), "last": s(), "email": s(24)}, required=["first", "last"]),
    obj({"sentiment": {"enum": ["positive", "negative", "neutral"]}, "confidence": {"enum": [1, 2, 3]}}),
    {"type": "array", "items": obj({"k": s(6), "v": {"type": "integer", "minimum": 0, "maximum": 9}}),
     "minItems": 1, "maxItems": 2},
    obj({"code": s(8, pattern="^[A-Z]{2}[0-9]{2}$")}),
    obj({"user": obj({"id": {"type": "integer", "minimum": 1, "maximum": 999}, "admin": {"type": "boolean"}}),
         "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}}),
    obj({"value": {"type": "number", "minimum": 0, "maximum": 10}}),
    obj({"kind": {"enum": ["cat", "dog"]}, "legs": {"type": "integer", "minimum": 0, "maximum": 4},
         "name": s(10)}),
    obj({"yes": {"type": "boolean"}, "no": {"type": "boolean"}, "maybe": {"type": "null"}}),
    obj({"matrix": {"type": "array", "maxItems": 2,
                    "items": {"type": "array", "maxItems": 2, "items": {"type": "integer", "minimum": 0,
                                                                     "maximum": 9}}}}),
    obj({"summary": s(30), "words": {"type": "integer", "minimum": 1, "maximum": 50}}),
]
assert len(SCHEMAS) == 20
N_CHOICES = 10
MAX_TOKENS = 160

# Sampling options rotated over the requests: the mask composes with each of them.
OPTIONS = [
    {"temperature": 0.8},
    {"temperature": 1.0, "top_p": 0.9},
    {"temperature": 0.7, "extra_body": {"top_k": 20, "min_p": 0.05}},
    {"temperature": 1.2, "presence_penalty": 0.5, "frequency_penalty": 0.3},
    {"temperature": 0.9, "logit_bias": {"28": 5, "90": -5}, "extra_body": {"repetition_penalty": 1.1}},
]


def generate(srv, i, schema):
    """Request i for `schema`: 10 choices; returns [(text, finish_reason)]."""
    kind = i % 4
    opts = dict(OPTIONS[i % len(OPTIONS)])
    extra = dict(opts.pop("extra_body", {}))
    prompt = f"Reply with JSON for this schema: {json.dumps(schema)}"
    common = dict(model=srv.name, n=N_CHOICES, max_tokens=MAX_TOKENS, seed=1000 + i, **opts)
    if kind == 0:
        r = srv.client.chat.completions.create(
            messages=[{"role": "user", "content": prompt}], extra_body=extra,
            response_format={"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema,
                                                                    "strict": True}}, **common)
    elif kind == 1:
        r = srv.client.chat.completions.create(messages=[{"role": "user", "content": prompt}],
                                               extra_body={**extra, "guided_json": schema}, **common)
    elif kind == 2:
        r = srv.client.chat.completions.create(messages=[{"role": "user", "content": prompt}],
                                               extra_body={**extra, "structured_outputs": {"json": schema}}, **common)
    else:
        r = srv.client.completions.create(prompt=prompt + "\nJSON:", extra_body={**extra, "guided_json": schema},
                                          **common)
        return [(c.text, c.finish_reason) for c in r.choices]
    return [(c.message.content, c.finish_reason) for c in r.choices]


def test_schemas(srv):
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda a: generate(srv, *a), enumerate(SCHEMAS)))
    n_valid, n_total, failures = 0, 0, []
    for i, (schema, outs) in enumerate(zip(SCHEMAS, results)):
        validator = jsonschema.Draft202012Validator(schema)
        for text, finish in outs:
            n_total += 1
            try:
                validator.validate(json.loads(text))
                ok = finish == "stop"
            except (json.JSONDecodeError, jsonschema.ValidationError) as e:
                ok = False
                text = f"{text!r} ({type(e).__name__}: {str(e).splitlines()[0]})"
            if ok:
                n_valid += 1
            else:
                failures.append(f"schema {i}: finish {finish}: {text}")
    print(f"  examples: {results[0][0][0]!r} | {results[12][0][0]!r} | {results[18][0][0]!r}", flush=True)
    check(f"200 generations over 20 schemas validate with jsonschema ({n_valid}/{n_total})",
          n_total == 200 and n_valid == 200, "\n    " + "\n    ".join(failures[:10]))
    distinct = {text for outs in results for text, _ in outs}
    check(f"the generations vary ({len(distinct)} distinct of 200)", len(distinct) > 40)


def test_streaming(srv):
    for i in (0, 12):
        schema = SCHEMAS[i]
        chunks = list(srv.client.chat.completions.create(
            model=srv.name, messages=[{"role": "user", "content": "JSON please"}], max_tokens=MAX_TOKENS, n=2,
            temperature=0.9, seed=5, stream=True,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}))
        texts, finish = ["", ""], [None, None]
        for c in chunks:
            for ch in c.choices:
                texts[ch.index] += ch.delta.content or ""
                finish[ch.index] = ch.finish_reason or finish[ch.index]
        ok = True
        for t in texts:
            try:
                jsonschema.validate(json.loads(t), schema)
            except Exception:  # noqa: BLE001
                ok = False
        check(f"streamed schema {i}: deltas concatenate to valid JSON", ok and finish == ["stop", "stop"],
              f"{texts} {finish}")
        # The completions stream too.
        text = "".join(c.choices[0].text for c in srv.client.completions.create(
            model=srv.name, prompt="JSON:", max_tokens=MAX_TOKENS, temperature=0.5, seed=3, stream=True,
            extra_body={"guided_json": schema}))
        try:
            jsonschema.validate(json.loads(text), schema)
            ok = True
        except Exception:  # noqa: BLE001
            ok = False
        check(f"streamed completion schema {i} validates", ok, repr(text))


def test_other_constraints(srv):
    # json_object has no schema to bound it: a choice that hits max_tokens is cut (finish "length"), as with
    # OpenAI; those that stop must be JSON objects, and the cut ones prefixes of one.
    chat = [{"role": "user", "content": "Give a short JSON object with a dog's name and age."}]
    r = srv.client.chat.completions.create(model=srv.name, messages=chat, max_tokens=MAX_TOKENS, n=6,
                                           temperature=0.3, seed=7, response_format={"type": "json_object"})
    ok, n_stop = True, 0
    for c in r.choices:
        text = c.message.content
        if c.finish_reason == "stop":
            n_stop += 1
            try:
                ok = ok and isinstance(json.loads(text), dict)
            except json.JSONDecodeError:
                ok = False
        else:
            ok = ok and c.finish_reason == "length" and text.startswith("{")
    check(f"json_object: the {n_stop} of 6 choices that stop are JSON objects, the rest cut prefixes",
          ok and n_stop >= 1, [(c.message.content, c.finish_reason) for c in r.choices])

    pattern = r"[0-9]{3}-[a-z]{2,4}"
    for field, body in (("guided_regex", {"guided_regex": pattern}),
                        ("structured_outputs.regex", {"structured_outputs": {"regex": pattern}})):
        r = srv.client.completions.create(model=srv.name, prompt="A code:", max_tokens=20, n=5, temperature=1.0,
                                          seed=11, extra_body=body)
        texts = [c.text for c in r.choices]
        check(f"{field}: every choice matches {pattern}", all(re.fullmatch(pattern, t) for t in texts), texts)

    colors = ["red", "green", "blue", "light yellow"]
    for field, body in (("guided_choice", {"guided_choice": colors}),
                        ("structured_outputs.choice", {"structured_outputs": {"choice": colors}})):
        r = srv.client.chat.completions.create(
            model=srv.name, messages=[{"role": "user", "content": "Pick a color."}], max_tokens=10, n=6,
            temperature=1.0, seed=13, logprobs=True, top_logprobs=2, extra_body=body)
        texts = [c.message.content for c in r.choices]
        check(f"{field}: every choice is one of {colors}", all(t in colors for t in texts), texts)
        lp_ok = all(c.logprobs and "".join(t.token for t in c.logprobs.content) == c.message.content
                    for c in r.choices)
        check(f"{field}: logprobs cover the constrained tokens", lp_ok)

    grammar = 'root ::= "(" [a-c]+ ")" | "none"'
    r = srv.client.completions.create(model=srv.name, prompt="Answer:", max_tokens=12, n=5, temperature=1.0,
                                      seed=17, extra_body={"guided_grammar": grammar})
    texts = [c.text for c in r.choices]
    check("guided_grammar: every choice is in the grammar's language",
          all(re.fullmatch(r"\([a-c]+\)|none", t) for t in texts), texts)


def test_invalid(srv):
    chat = [{"role": "user", "content": "x"}]
    cases = [
        ("response_format.json_schema.schema", {"response_format": {
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "no-such-type"}}}}),
        ("guided_json", {"extra_body": {"guided_json": {"type": "object", "properties": 5}}}),
        ("guided_regex", {"extra_body": {"guided_regex": "(unclosed"}}),
        ("guided_grammar", {"extra_body": {"guided_grammar": "root ::= missing_rule"}}),
        ("guided_json", {"extra_body": {"guided_json": "{not json"}}),
    ]
    for param, kw in cases:
        try:
            srv.client.chat.completions.create(model=srv.name, messages=chat, max_tokens=5, **kw)
            check(f"invalid {param}: 400", False, "accepted")
        except openai.BadRequestError as e:
            err = e.body if isinstance(e.body, dict) else {}
            check(f"invalid {param}: 400 naming it ({err.get('message', '')[:90]!r})",
                  e.status_code == 400 and err.get("param") == param and param in err.get("message", "") + param,
                  str(e.body))


def run(name, fn, *args):
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - report and keep going
        check(name + " (raised)", False, "\n" + traceback.format_exc())


def main():
    srv = Server()
    try:
        run("invalid constraints", test_invalid, srv)
        run("other constraints", test_other_constraints, srv)
        run("streaming", test_streaming, srv)
        run("schemas", test_schemas, srv)
    finally:
        srv.kill()
    return summary()


if __name__ == "__main__":
    sys.exit(main())
