#!/usr/bin/env python3
"""`tpserve serve` driven by the real `openai` Python client (and raw httpx / sockets where the client hides
what we need to see). Runs the real binary on SmolLM2-135M-Instruct (Q4_1, --threads 1) as a child process.

Checks:
  - completions, chat (non-stream and stream), stream_options.include_usage, models.list, typed errors
    (unknown model -> openai.NotFoundError, bad temperature -> openai.BadRequestError);
  - streamed chat deltas concatenate to the non-streamed content at temperature 0;
  - 8 concurrent streaming chat clients each get exactly the single-request text;
  - /metrics counters prompt_tokens_total / generation_tokens_total move by exactly the responses' usage;
  - a client that disconnects mid-stream leaves num_requests_running 0 and kv_cache_usage_perc 0;
  - with scheduler.max_num_seqs 1 and max_queued_requests 1, a burst gets HTTP 429 with an OpenAI error body
    (and openai.RateLimitError through the client) while the accepted requests succeed;
  - n choices (non-stream and stream, routed by index; choice i == a one-choice request with seed + i), seeds
    reproduce text, logprobs in both shapes (chat content/top_logprobs, completions tokens/token_logprobs/
    top_logprobs/text_offset) parse into the client's types and agree with the text, penalties change a
    repetitive greedy completion deterministically;
  - a random soak (every option, n, logprobs, stop strings, streams, invalid requests, clients hanging up
    mid-stream, 12 concurrent clients): every response well formed, invalid ones 400, and afterwards nothing
    running or waiting and zero KV blocks in use;
  - SIGTERM exits 0 (idle, and with streams in flight: a short one finishes, a long one is aborted at
    server.shutdown_deadline_s, the process exits 0 within the deadline + a few seconds).

Usage: openai_client_test.py TPSERVE_BIN MODEL_GGUF
Prints "N passed, M failed"; exits 1 on any failure.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import httpx
import openai

TPSERVE = sys.argv[1]
MODEL = sys.argv[2]

from checks import check, summary  # noqa: E402 - tests/e2e/checks.py, beside this script


class Server:
    """`tpserve serve --port 0 ...` as a child; its output is drained by a thread into self.lines."""

    def __init__(self, extra=()):
        self.lines = []
        self.proc = subprocess.Popen(
            [TPSERVE, "serve", "--model", MODEL, "--port", "0", "--threads", "1", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        self.url = None
        got_url = threading.Event()

        def drain():
            for line in self.proc.stdout:
                self.lines.append(line.rstrip("\n"))
                m = re.search(r"tpserve serving (\S+) at (http://[\d.]+:\d+)", line)
                if m and not got_url.is_set():
                    self.name, self.url = m.group(1), m.group(2)
                    got_url.set()
            got_url.set()

        self.drainer = threading.Thread(target=drain, daemon=True)
        self.drainer.start()
        if not got_url.wait(120) or self.url is None:
            self.kill()
            raise RuntimeError("server did not start:\n" + self.log())
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key="x", max_retries=0, timeout=60)

    def log(self):
        return "\n".join(self.lines[-40:])

    def sigterm_and_wait(self, timeout):
        """SIGTERM; returns (exit code or None on timeout, seconds taken)."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            rc = None
            self.kill()
        return rc, time.monotonic() - t0

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def metrics(self):
        """{metric name (with labels, model_name and engine removed): value}."""
        text = httpx.get(self.url + "/metrics", timeout=10).text
        out = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            key, _, value = line.rpartition(" ")
            key = re.sub(r'(model_name|engine)="[^"]*",?', "", key).replace(",}", "}").replace("{}", "")
            out[key] = float(value)
        return out

    def post(self, path, body):
        """POST a JSON body to a non-OpenAI route (/tokenize); the parsed JSON answer."""
        r = httpx.post(self.url + path, json=body, timeout=60)
        r.raise_for_status()
        return r.json()

    def wait_idle(self, timeout=5.0):
        """Polls /metrics until no request is running or waiting and the KV cache is empty; the last snapshot."""
        deadline = time.monotonic() + timeout
        while True:
            m = self.metrics()
            idle = (m["vllm:num_requests_running"] == 0 and m["vllm:num_requests_waiting"] == 0 and
                    m["vllm:kv_cache_usage_perc"] == 0)
            if idle or time.monotonic() > deadline:
                return m
            time.sleep(0.05)


def run(name, fn, *args):
    """Runs one test function; an exception is a failure (with its traceback), not a crash of the script."""
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - report and keep going
        check(name + " (raised)", False, "\n" + traceback.format_exc())


CHAT = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]


def stream_chat(client, model, max_tokens, **kw):
    """Streams a chat completion; returns (text, finish_reason, chunks)."""
    chunks = list(client.chat.completions.create(model=model, messages=CHAT, max_tokens=max_tokens, temperature=0,
                                                 stream=True, **kw))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    return text, (finish[-1] if finish else None), chunks


# ----------------------------------------------------------------------------------------------------------------
# The default server.


def test_completions(s):
    r = s.client.completions.create(model=s.name, prompt="The capital of France is", max_tokens=8, temperature=0)
    check("completions: object", r.object == "text_completion", r.object)
    check("completions: model", r.model == s.name, r.model)
    check("completions: text non-empty", len(r.choices) == 1 and r.choices[0].text.strip() != "", repr(r))
    check("completions: finish_reason", r.choices[0].finish_reason in ("length", "stop"), r.choices[0].finish_reason)
    u = r.usage
    check("completions: usage", u is not None and u.prompt_tokens > 0 and 0 < u.completion_tokens <= 8 and
          u.total_tokens == u.prompt_tokens + u.completion_tokens, repr(u))
    check("completions: 8 tokens unless EOS", u.completion_tokens == 8 or r.choices[0].finish_reason == "stop",
          repr(r))
    # Streaming completions concatenate to the same text.
    parts = list(s.client.completions.create(model=s.name, prompt="The capital of France is", max_tokens=8,
                                             temperature=0, stream=True))
    text = "".join(p.choices[0].text for p in parts if p.choices)
    check("completions: stream == non-stream", text == r.choices[0].text, f"{text!r} vs {r.choices[0].text!r}")
    # Greedy is deterministic across requests.
    r2 = s.client.completions.create(model=s.name, prompt="The capital of France is", max_tokens=8, temperature=0)
    check("completions: greedy repeatable", r2.choices[0].text == r.choices[0].text)


def test_chat(s):
    r = s.client.chat.completions.create(model=s.name, messages=CHAT, max_tokens=16, temperature=0)
    c = r.choices[0]
    check("chat: object", r.object == "chat.completion", r.object)
    check("chat: role", c.message.role == "assistant", c.message.role)
    check("chat: content non-empty", (c.message.content or "").strip() != "", repr(r))
    check("chat: finish_reason", c.finish_reason in ("length", "stop"), c.finish_reason)
    check("chat: usage", r.usage.prompt_tokens > 0 and 0 < r.usage.completion_tokens <= 16 and
          r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, repr(r.usage))

    text, finish, chunks = stream_chat(s.client, s.name, 16)
    check("chat stream: chunk object", all(ch.object == "chat.completion.chunk" for ch in chunks))
    check("chat stream: first delta has role", chunks and chunks[0].choices[0].delta.role == "assistant")
    check("chat stream: one id", len({ch.id for ch in chunks}) == 1)
    check("chat stream: deltas == non-stream content", text == c.message.content,
          f"{text!r} vs {c.message.content!r}")
    check("chat stream: finish_reason == non-stream", finish == c.finish_reason, f"{finish} vs {c.finish_reason}")
    check("chat stream: no usage without include_usage", all(ch.usage is None for ch in chunks))

    text2, finish2, chunks2 = stream_chat(s.client, s.name, 16, stream_options={"include_usage": True})
    last = chunks2[-1]
    check("include_usage: last chunk has usage and no choices", last.usage is not None and last.choices == [],
          repr(last))
    check("include_usage: usage == non-stream usage",
          last.usage is not None and last.usage.prompt_tokens == r.usage.prompt_tokens and
          last.usage.completion_tokens == r.usage.completion_tokens and
          last.usage.total_tokens == r.usage.total_tokens, f"{last.usage!r} vs {r.usage!r}")
    check("include_usage: only the last chunk has usage", all(ch.usage is None for ch in chunks2[:-1]))
    check("include_usage: text unchanged", text2 == c.message.content)


def test_models(s):
    models = list(s.client.models.list())
    check("models.list: one model named as served", [m.id for m in models] == [s.name], repr(models))
    check("models.list: object", models and models[0].object == "model")


def test_errors(s):
    try:
        s.client.chat.completions.create(model="no-such-model", messages=CHAT, max_tokens=4)
        check("unknown model -> NotFoundError", False, "no exception")
    except openai.NotFoundError as e:
        check("unknown model -> NotFoundError", e.status_code == 404)
        body = e.body if isinstance(e.body, dict) else {}
        check("unknown model: error body", body.get("code") == "model_not_found" and "no-such-model" in
              body.get("message", ""), repr(e.body))
    try:
        s.client.completions.create(model=s.name, prompt="hi", max_tokens=4, temperature=7.5)
        check("bad temperature -> BadRequestError", False, "no exception")
    except openai.BadRequestError as e:
        check("bad temperature -> BadRequestError", e.status_code == 400)
        body = e.body if isinstance(e.body, dict) else {}
        check("bad temperature: error names the param", body.get("param") == "temperature" and
              body.get("type") == "invalid_request_error", repr(e.body))
    try:
        s.client.chat.completions.create(model=s.name, messages=CHAT, max_tokens=-1)
        check("max_tokens -1 -> BadRequestError", False, "no exception")
    except openai.BadRequestError as e:
        check("max_tokens -1 -> BadRequestError", e.status_code == 400)
    r = s.client.chat.completions.create(model=s.name, messages=CHAT, max_tokens=0)
    check("max_tokens 0: no content, finish_reason length, 0 completion tokens",
          r.choices[0].message.content == "" and r.choices[0].finish_reason == "length" and
          r.usage.completion_tokens == 0 and r.usage.prompt_tokens > 0, repr(r))


def test_choices_and_seeds(s):
    kw = dict(model=s.name, prompt="Once upon a time", max_tokens=10, temperature=0.9, top_p=0.95)
    r = s.client.completions.create(n=3, seed=7, **kw)
    check("n=3: three choices indexed 0..2", sorted(c.index for c in r.choices) == [0, 1, 2], repr(r.choices))
    texts = {c.index: c.text for c in r.choices}
    check("n=3: usage sums the choices", r.usage.completion_tokens <= 30 and r.usage.completion_tokens >=
          sum(1 for c in r.choices if c.text), repr(r.usage))
    again = s.client.completions.create(n=3, seed=7, **kw)
    check("n=3: same seed, same texts", {c.index: c.text for c in again.choices} == texts)
    for i in range(3):
        solo = s.client.completions.create(seed=7 + i, **kw)
        check(f"n=3: choice {i} == one-choice request with seed 7+{i}", solo.choices[0].text == texts[i],
              f"{solo.choices[0].text!r} vs {texts[i]!r}")
    check("n=3: choices differ", len(set(texts.values())) > 1, repr(texts))
    parts = list(s.client.completions.create(n=3, seed=7, stream=True, **kw))
    streamed = {}
    finishes = {}
    for p in parts:
        for c in p.choices:
            streamed[c.index] = streamed.get(c.index, "") + c.text
            if c.finish_reason:
                finishes[c.index] = c.finish_reason
    check("n=3 stream: texts by index == non-stream", streamed == texts, f"{streamed!r} vs {texts!r}")
    check("n=3 stream: a finish_reason per choice", sorted(finishes) == [0, 1, 2], repr(finishes))
    chat = s.client.chat.completions.create(model=s.name, messages=CHAT, max_tokens=8, temperature=1.0, n=2, seed=3)
    check("chat n=2: two messages", sorted(c.index for c in chat.choices) == [0, 1] and
          all(c.message.role == "assistant" for c in chat.choices), repr(chat.choices))
    m = s.wait_idle()
    check("n: no KV blocks left in use", m.get("vllm:kv_cache_usage_perc") == 0.0, repr(m))


def test_logprobs(s):
    r = s.client.chat.completions.create(model=s.name, messages=CHAT, max_tokens=8, temperature=0, logprobs=True,
                                         top_logprobs=3)
    c = r.choices[0]
    content = c.logprobs.content if c.logprobs else None
    check("chat logprobs: one entry per token", content is not None and len(content) == r.usage.completion_tokens -
          (1 if c.finish_reason == "stop" else 0), repr(c.logprobs))
    if content:
        check("chat logprobs: tokens concatenate to the content", "".join(e.token for e in content) ==
              c.message.content, f"{''.join(e.token for e in content)!r} vs {c.message.content!r}")
        check("chat logprobs: 3 alternatives each, descending",
              all(len(e.top_logprobs) == 3 and [t.logprob for t in e.top_logprobs] ==
                  sorted((t.logprob for t in e.top_logprobs), reverse=True) for e in content))
        check("chat logprobs: greedy token is the top alternative with its logprob",
              all(e.top_logprobs[0].token == e.token and abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6 and
                  e.logprob <= 0 for e in content), repr(content[:2]))
        check("chat logprobs: bytes are the token's UTF-8", all(bytes(e.bytes).decode("utf-8", "replace") == e.token
                                                              for e in content))
    text, _, chunks = stream_chat(s.client, s.name, 8, logprobs=True, top_logprobs=1)
    streamed = [e for ch in chunks if ch.choices and ch.choices[0].logprobs for e in ch.choices[0].logprobs.content]
    check("chat logprobs stream: same tokens and values as non-stream",
          content is not None and [(e.token, round(e.logprob, 5)) for e in streamed] ==
          [(e.token, round(e.logprob, 5)) for e in content], f"{len(streamed)} vs {len(content or [])}")
    k = s.client.completions.create(model=s.name, prompt="The capital of France is", max_tokens=6, temperature=0,
                                    logprobs=2)
    lp = k.choices[0].logprobs
    check("completions logprobs: tokens concatenate to the text", lp is not None and "".join(lp.tokens) ==
          k.choices[0].text, repr(lp))
    if lp:
        check("completions logprobs: parallel arrays", len(lp.tokens) == len(lp.token_logprobs) ==
              len(lp.top_logprobs) == len(lp.text_offset), repr(lp))
        check("completions logprobs: text_offset is where each token starts",
              lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))], repr(lp))
        check("completions logprobs: top dicts hold the greedy token with its logprob",
              all(len(d) == 2 and abs(d[t] - v) < 1e-6 for t, v, d in zip(lp.tokens, lp.token_logprobs,
                                                                           lp.top_logprobs)), repr(lp.top_logprobs))
    no = s.client.completions.create(model=s.name, prompt="hi", max_tokens=2, temperature=0)
    check("no logprobs unless asked", no.choices[0].logprobs is None, repr(no.choices[0].logprobs))


def test_batches_prompt_logprobs_and_bias(s):
    # A batch of 2 prompts x n=2: indices j*n + i, each choice prompt j's; usage sums the prompts.
    r = s.client.completions.create(model=s.name, prompt=["The capital of France is", "Once upon a time"],
                                    n=2, max_tokens=4, temperature=0)
    check("batched prompts: 4 choices indexed 0..3", sorted(c.index for c in r.choices) == [0, 1, 2, 3])
    by = {c.index: c.text for c in r.choices}
    solo = [s.client.completions.create(model=s.name, prompt=p, max_tokens=4, temperature=0).choices[0].text
            for p in ("The capital of France is", "Once upon a time")]
    check("batched prompts: choice j*n+i is prompt j's greedy text", [by[0], by[1], by[2], by[3]] ==
          [solo[0], solo[0], solo[1], solo[1]], repr(by))
    ids = s.post("/tokenize", {"prompt": "The capital of France is"})["tokens"]
    ids2 = s.post("/tokenize", {"prompt": "Once upon a time"})["tokens"]
    check("batched prompts: usage counts every prompt", r.usage.prompt_tokens == len(ids) + len(ids2), repr(r.usage))
    # echo + logprobs (lm-eval's loglikelihood request): prompt tokens first, the first with a null logprob.
    e = s.client.completions.create(model=s.name, prompt=[ids, ids2], max_tokens=1, logprobs=1, echo=True,
                                    temperature=0)
    lp = e.choices[0].logprobs
    check("echo+logprobs: prompt tokens lead the logprobs", len(lp.tokens) == len(ids) + 1 and
          lp.token_logprobs[0] is None and all(v <= 0 for v in lp.token_logprobs[1:]), repr(lp)[:400])
    check("echo+logprobs: the text starts with the prompt", e.choices[0].text.startswith("The capital of France is"))
    check("echo+logprobs: top_logprobs hold the prompt token", all(
        lp.tokens[i] in lp.top_logprobs[i] for i in range(1, len(ids))), repr(lp.top_logprobs)[:300])
    # max_tokens 0: only the prompt; its logprobs equal the echo ones.
    z = s.client.completions.create(model=s.name, prompt=ids, max_tokens=0, logprobs=1, echo=True)
    check("max_tokens 0: finish length, the prompt's logprobs only", z.choices[0].finish_reason == "length" and
          z.choices[0].logprobs.token_logprobs == lp.token_logprobs[:len(ids)] and z.usage.completion_tokens == 0,
          repr(z.choices[0].logprobs.token_logprobs))
    # vLLM's prompt_logprobs (extra_body): [null, {id: {logprob, rank, decoded_token}}...] on the choice.
    v = s.client.completions.create(model=s.name, prompt=ids, max_tokens=1, temperature=0,
                                    extra_body={"prompt_logprobs": 2})
    plp = v.choices[0].model_extra.get("prompt_logprobs")
    ok = isinstance(plp, list) and len(plp) == len(ids) and plp[0] is None
    if ok:
        for i in range(1, len(ids)):
            entry = plp[i].get(str(ids[i]))
            ok = ok and entry is not None and abs(entry["logprob"] - lp.token_logprobs[i]) < 1e-4 and entry["rank"] >= 1
            ok = ok and len(plp[i]) <= 3 and any(x["rank"] == 1 for x in plp[i].values())
    check("prompt_logprobs: vLLM's shape, equal to the echo logprobs", ok, repr(plp)[:400])
    cp = s.client.chat.completions.create(model=s.name, messages=CHAT, max_tokens=1, extra_body={"prompt_logprobs": 0})
    check("chat prompt_logprobs: at the top level", isinstance(cp.model_extra.get("prompt_logprobs"), list) and
          cp.model_extra["prompt_logprobs"][0] is None)
    # logit_bias: +100 on one token makes greedy decoding repeat it; -100 on the greedy token removes it.
    target = s.post("/tokenize", {"prompt": " banana"})["tokens"][0]
    b = s.client.completions.create(model=s.name, prompt="Hello", max_tokens=3, temperature=0,
                                    logit_bias={str(target): 100})
    check("logit_bias +100: the biased token every time", b.choices[0].text == " banana" * 3, repr(b.choices[0].text))
    greedy = s.client.completions.create(model=s.name, prompt="The capital of France is", max_tokens=1,
                                         temperature=0, logprobs=0)
    first = s.post("/tokenize", {"prompt": "The capital of France is" + greedy.choices[0].text})["tokens"][len(ids)]
    nb = s.client.completions.create(model=s.name, prompt="The capital of France is", max_tokens=1, temperature=0,
                                     logit_bias={str(first): -100})
    check("logit_bias -100: the greedy token is avoided", nb.choices[0].text != greedy.choices[0].text,
          repr((nb.choices[0].text, greedy.choices[0].text)))
    try:
        s.client.completions.create(model=s.name, prompt="x", max_tokens=1, logit_bias={"99999999": 1})
        check("logit_bias outside the vocabulary -> BadRequestError", False, "no exception")
    except openai.BadRequestError as e:
        check("logit_bias outside the vocabulary -> BadRequestError", e.status_code == 400 and
              (e.body or {}).get("param") == "logit_bias[0]", repr(e.body))
    # Streaming a batch: every index gets its text and exactly one finish_reason.
    finishes, texts = {}, {}
    for ch in s.client.completions.create(model=s.name, prompt=["Hi", "Hey"], n=2, max_tokens=3, temperature=0,
                                          stream=True):
        for c in ch.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
            if c.finish_reason:
                finishes[c.index] = finishes.get(c.index, 0) + 1
    check("streamed batch: one finish per index 0..3", finishes == {0: 1, 1: 1, 2: 1, 3: 1}, repr(finishes))
    s.wait_idle()


def test_penalties(s):
    kw = dict(model=s.name, prompt="List of fruits: apple, banana, apple, banana, apple,", max_tokens=16, temperature=0)
    plain = s.client.completions.create(**kw).choices[0].text
    variants = [("frequency_penalty", {"frequency_penalty": 2.0}), ("presence_penalty", {"presence_penalty": 2.0}),
                ("repetition_penalty", {"extra_body": {"repetition_penalty": 1.8}})]
    for name, extra in variants:
        a = s.client.completions.create(**kw, **extra).choices[0].text
        b = s.client.completions.create(**kw, **extra).choices[0].text
        check(f"{name}: changes a repetitive greedy completion", a != plain, f"{a!r} == {plain!r}")
        check(f"{name}: deterministic", a == b, f"{a!r} vs {b!r}")
        check(f"{name}: fewer repeats of 'apple'", a.count("apple") < plain.count("apple"), f"{a!r} vs {plain!r}")
    same = s.client.completions.create(**kw, extra_body={"repetition_penalty": 1.0}, frequency_penalty=0.0,
                                       presence_penalty=0.0).choices[0].text
    check("neutral penalties == none", same == plain, f"{same!r} vs {plain!r}")


def test_concurrent_streams(s, n=8, max_tokens=24):
    ref = s.client.chat.completions.create(model=s.name, messages=CHAT, max_tokens=max_tokens, temperature=0)
    want = ref.choices[0].message.content
    results = [None] * n
    errors = [None] * n
    go = threading.Barrier(n)

    def worker(i):
        try:
            go.wait()
            results[i] = stream_chat(s.client, s.name, max_tokens, stream_options={"include_usage": True})
        except Exception as e:  # noqa: BLE001
            errors[i] = repr(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    check(f"{n} concurrent streams: no errors", all(e is None for e in errors), repr(errors))
    for i, r in enumerate(results):
        if r is None:
            continue
        text, finish, chunks = r
        check(f"concurrent stream {i}: text == single request", text == want, f"{text!r} vs {want!r}")
        check(f"concurrent stream {i}: finish_reason", finish == ref.choices[0].finish_reason, finish)
        check(f"concurrent stream {i}: usage", chunks[-1].usage is not None and
              chunks[-1].usage.completion_tokens == ref.usage.completion_tokens, repr(chunks[-1].usage))
    m = s.wait_idle()
    check("after concurrent streams: idle, zero KV blocks in use",
          m["vllm:num_requests_running"] == 0 and m["vllm:kv_cache_usage_perc"] == 0, repr(m))


def random_request(rng):
    """A random generation request: (path, body, valid). About 1 in 12 is invalid on purpose."""
    chat = rng.random() < 0.5
    body = {"model": s_name_placeholder, "max_tokens": rng.randint(1, 24), "n": rng.choice([1, 1, 2, 3]),
            "temperature": rng.choice([0, 0.7, 1.3]), "seed": rng.randint(0, 1 << 30), "stream": rng.random() < 0.6}
    if rng.random() < 0.3:
        body["top_p"] = rng.choice([0.5, 0.9])
    if rng.random() < 0.3:
        body["top_k"] = rng.choice([1, 5, 40])
    if rng.random() < 0.2:
        body["min_p"] = 0.05
    for k in ("presence_penalty", "frequency_penalty"):
        if rng.random() < 0.25:
            body[k] = rng.choice([-1.0, 0.5, 2.0])
    if rng.random() < 0.2:
        body["repetition_penalty"] = rng.choice([0.8, 1.2])
    if rng.random() < 0.3:
        body["stop"] = rng.sample(["\n", ".", " the", ","], rng.randint(1, 2))
    if rng.random() < 0.2:
        body["ignore_eos"] = True
    if body["stream"] and rng.random() < 0.3:
        body["stream_options"] = {"include_usage": True}
    if chat:
        body["messages"] = [{"role": "user", "content": rng.choice(["Hi!", "Name a color.", "What is 2+2?",
                                                                      "Write one word."])}]
        if rng.random() < 0.3:
            body["logprobs"] = True
            body["top_logprobs"] = rng.randint(0, 3)
    else:
        prompts = ["Once upon a time", "The capital of France is", "1, 2, 3,", "def f(x):"]
        body["prompt"] = rng.choice(prompts) if rng.random() < 0.75 else rng.sample(prompts, 2)  # a batch of 2
        if rng.random() < 0.3:
            body["logprobs"] = rng.randint(0, 3)
            if rng.random() < 0.5:
                body["echo"] = True  # prompt logprobs, computed in the prefill
        if rng.random() < 0.1:
            body["prompt_logprobs"] = rng.randint(0, 2)
    if rng.random() < 0.15:
        body["logit_bias"] = {str(rng.randint(0, 49151)): rng.choice([-100, -1.5, 2, 100])}
    valid = True
    if rng.random() < 1 / 12:
        key, bad = rng.choice([("temperature", 7), ("top_p", 7), ("n", 17), ("presence_penalty", 7)])
        body[key] = bad
        valid = False
    return ("/v1/chat/completions" if chat else "/v1/completions"), body, valid


s_name_placeholder = None


def check_response(path, body, status, payload, events, done):
    """Problems with one finished (not disconnected) response, as a list of strings."""
    p = []
    if status != 200:
        return [f"status {status}: {payload[:200]!r}"]
    n = body["n"] * (len(body["prompt"]) if isinstance(body.get("prompt"), list) else 1)
    if body["stream"]:
        if not done:
            p.append("stream did not end with [DONE]")
        finishes = {}
        for e in events:
            for c in e.get("choices", []):
                if c.get("finish_reason"):
                    finishes[c["index"]] = c["finish_reason"]
        if sorted(finishes) != list(range(n)):
            p.append(f"finish_reason per choice: {finishes}")
        if body.get("stream_options", {}).get("include_usage") and not (events and events[-1].get("usage")):
            p.append("no usage chunk")
        return p
    j = json.loads(payload)
    if sorted(c["index"] for c in j["choices"]) != list(range(n)):
        p.append(f"choices {[c['index'] for c in j['choices']]}")
    if any(c["finish_reason"] not in ("stop", "length") for c in j["choices"]):
        p.append(f"finish_reason {[c['finish_reason'] for c in j['choices']]}")
    u = j["usage"]
    if body.get("echo") and any(not c["text"].startswith(body["prompt"] if isinstance(body["prompt"], str)
                                                          else body["prompt"][c["index"] // body["n"]])
                                for c in j["choices"]):
        p.append("echo: a choice's text does not start with its prompt")
    if not (0 <= u["completion_tokens"] <= n * body["max_tokens"]):
        p.append(f"usage {u}")
    if body.get("logprobs") not in (None, False) and any(c["logprobs"] is None for c in j["choices"]):
        p.append("logprobs missing")
    return p


def test_random_soak(s, n_requests=168, n_clients=12):
    """Random requests (every sampling option, n, logprobs, stop strings, streaming, invalid ones) from
    concurrent clients, some of which hang up mid-stream: every finished response is well formed, every
    invalid one is a 400, and afterwards nothing is left running, waiting or holding KV blocks."""
    import random
    global s_name_placeholder
    s_name_placeholder = s.name
    problems = []
    counts = {"ok": 0, "invalid": 0, "hung up": 0}
    lock = threading.Lock()
    host, port = s.url.removeprefix("http://").split(":")

    def worker(k):
        rng = random.Random(1000 + k)
        with httpx.Client(base_url=s.url, timeout=120) as c:
            for _ in range(n_requests // n_clients):
                path, body, valid = random_request(rng)
                hang_up = body["stream"] and valid and rng.random() < 0.2
                try:
                    if hang_up:
                        raw = dict(body)
                        got = b""
                        with socket.create_connection((host, int(port)), timeout=60) as sock:
                            data = json.dumps(raw).encode()
                            sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                         f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
                            while got.count(b"data: ") < 2:
                                chunk = sock.recv(4096)
                                if not chunk:
                                    break
                                got += chunk
                        with lock:
                            counts["hung up"] += 1
                        continue
                    if body["stream"]:
                        events, done = [], False
                        with c.stream("POST", path, json=body) as r:
                            status = r.status_code
                            if status != 200:
                                payload = r.read()
                            else:
                                payload = b""
                                for line in r.iter_lines():
                                    if line == "data: [DONE]":
                                        done = True
                                    elif line.startswith("data: "):
                                        events.append(json.loads(line[6:]))
                        result = (status, payload, events, done)
                    else:
                        r = c.post(path, json=body)
                        result = (r.status_code, r.content, [], False)
                    with lock:
                        if valid:
                            bad = check_response(path, body, *result)
                            if bad:
                                problems.append((body, bad))
                            counts["ok"] += 1
                        else:
                            err = json.loads(result[1]) if result[0] == 400 else {}
                            if result[0] != 400 or "error" not in err:
                                problems.append((body, [f"invalid request got {result[0]}"]))
                            counts["invalid"] += 1
                except Exception as e:  # noqa: BLE001
                    with lock:
                        problems.append((body, [repr(e)]))

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    check(f"soak: {n_requests} random requests, every response well formed ({counts}, "
          f"{time.monotonic() - t0:.0f} s)", not problems, repr(problems[:3]))
    m = s.wait_idle(10.0)
    check("soak: afterwards nothing running or waiting, zero KV blocks in use",
          m["vllm:num_requests_running"] == 0 and m["vllm:num_requests_waiting"] == 0 and
          m["vllm:kv_cache_usage_perc"] == 0, repr(m))
    check("soak: /health 200", httpx.get(s.url + "/health", timeout=10).status_code == 200)


def test_metrics_counters(s):
    before = s.wait_idle()
    usages = []
    r = s.client.completions.create(model=s.name, prompt="Once upon a time", max_tokens=6, temperature=0)
    usages.append(r.usage)
    r = s.client.chat.completions.create(model=s.name, messages=CHAT, max_tokens=5, temperature=0)
    usages.append(r.usage)
    chunks = list(s.client.chat.completions.create(
        model=s.name, messages=[{"role": "user", "content": "Name three colors."}], max_tokens=7, temperature=0,
        stream=True, stream_options={"include_usage": True}))
    usages.append(chunks[-1].usage)
    r = s.client.completions.create(model=s.name, prompt=[1, 2, 3, 4], max_tokens=3, temperature=0.8, seed=1)
    usages.append(r.usage)
    after = s.wait_idle()

    def delta(k):
        return after.get(k, 0) - before.get(k, 0)

    n_prompt = sum(u.prompt_tokens for u in usages)
    n_gen = sum(u.completion_tokens for u in usages)
    check("metrics: prompt_tokens_total += sum(usage.prompt_tokens)",
          delta("vllm:prompt_tokens_total") == n_prompt, f"{delta('vllm:prompt_tokens_total')} vs {n_prompt}")
    check("metrics: generation_tokens_total += sum(usage.completion_tokens)",
          delta("vllm:generation_tokens_total") == n_gen, f"{delta('vllm:generation_tokens_total')} vs {n_gen}")
    check("metrics: requests_submitted_total += 4", delta("tpserve:requests_submitted_total") == 4,
          str(delta("tpserve:requests_submitted_total")))
    n_finished = sum(v - before.get(k, 0) for k, v in after.items() if k.startswith("vllm:request_success_total"))
    check("metrics: request_success_total += 4", n_finished == 4, str(n_finished))
    check("metrics: http 200 += 4 (+ the /metrics scrapes)",
          delta('tpserve:http_responses_total{status="200"}') >= 4)
    check("metrics: e2e latency count += 4", delta("vllm:e2e_request_latency_seconds_count") == 4,
          str(delta("vllm:e2e_request_latency_seconds_count")))
    check("metrics: ttft count += 4", delta("vllm:time_to_first_token_seconds_count") == 4,
          str(delta("vllm:time_to_first_token_seconds_count")))


def raw_stream_then_close(url, body, n_events):
    """POSTs `body` on a raw socket, reads until `n_events` SSE data lines arrived, then closes abruptly."""
    host, port = url.removeprefix("http://").split(":")
    payload = json.dumps(body).encode()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
        got = b""
        while got.count(b"data: ") < n_events:
            chunk = sock.recv(4096)
            if not chunk:
                break
            got += chunk
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST on close
    return got


def test_disconnect(s):
    before = s.wait_idle()
    # Raw socket, closed after a few streamed tokens of a long request with 3 choices (all of them are freed).
    got = raw_stream_then_close(s.url, {"model": s.name, "messages": CHAT, "max_tokens": 400, "ignore_eos": True,
                                        "stream": True, "n": 3}, 8)
    check("disconnect: the stream had started", got.startswith(b"HTTP/1.1 200") and got.count(b"data: ") >= 8,
          repr(got[:200]))
    # httpx streaming, closed early.
    with httpx.Client(timeout=30) as c:
        with c.stream("POST", s.url + "/v1/completions",
                      json={"model": s.name, "prompt": "Count: 1, 2, 3,", "max_tokens": 400, "ignore_eos": True,
                            "stream": True}) as r:
            n = 0
            for line in r.iter_lines():
                n += line.startswith("data: ")
                if n >= 3:
                    break
    check("disconnect (httpx): the stream had started", n >= 3)
    t0 = time.monotonic()
    m = s.wait_idle(5.0)
    check("disconnect: num_requests_running 0 within 5 s", m["vllm:num_requests_running"] == 0, repr(m))
    check("disconnect: kv_cache_usage_perc 0 within 5 s", m["vllm:kv_cache_usage_perc"] == 0, repr(m))
    check("disconnect: num_requests_waiting 0", m["vllm:num_requests_waiting"] == 0)
    aborted = (m.get('vllm:request_success_total{finished_reason="abort"}', 0) -
               before.get('vllm:request_success_total{finished_reason="abort"}', 0))
    # request_success_total counts choices (vLLM: one child request per choice): 3 + 1.
    check("disconnect: every choice of both requests counted as aborted", aborted == 4, str(aborted))
    gen = m["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"]
    check("disconnect: generation stopped early (< 4 x 400 tokens)", gen < 800, str(gen))
    print(f"       (idle {time.monotonic() - t0:.2f} s after the disconnects)", flush=True)
    # The server still serves.
    r = s.client.completions.create(model=s.name, prompt="The capital of France is", max_tokens=4, temperature=0)
    check("disconnect: server still serves", r.choices[0].text != "")


# ----------------------------------------------------------------------------------------------------------------
# Shutdown with streams in flight (on the default server, last); 429 on a server with one sequence and one
# queued request.


def test_rate_limit(s, n=6):
    results = [None] * n
    go = threading.Barrier(n)

    def worker(i):
        with httpx.Client(timeout=60) as c:
            go.wait()
            r = c.post(s.url + "/v1/completions", json={"model": s.name, "prompt": f"Story {i}:", "max_tokens": 24,
                                                         "ignore_eos": True, "temperature": 0})
            results[i] = (r.status_code, r.text)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    statuses = [r[0] if r else None for r in results]
    print(f"       (statuses {statuses})", flush=True)
    check("429: at least one request rejected", statuses.count(429) >= 1, repr(statuses))
    check("429: at least one request served", statuses.count(200) >= 1, repr(statuses))
    check("429: nothing but 200 and 429", all(st in (200, 429) for st in statuses), repr(statuses))
    for st, body in (r for r in results if r):
        j = json.loads(body)
        if st == 429:
            e = j.get("error", {})
            check("429: OpenAI error body", isinstance(e.get("message"), str) and e["message"] != "" and
                  e.get("type") == "rate_limit_exceeded" and "param" in e and "code" in e, body)
        else:
            check("429: accepted request complete", j["usage"]["completion_tokens"] == 24 and
                  j["choices"][0]["finish_reason"] == "length", body)
    m = s.wait_idle()
    check("429: idle afterwards", m["vllm:num_requests_running"] == 0 and
          m["vllm:kv_cache_usage_perc"] == 0, repr(m))
    check("429: metrics count the 429 responses",
          m.get('tpserve:http_responses_total{status="429"}', 0) == statuses.count(429), repr(m))

    # Through the client: a busy server (one running, one waiting) raises openai.RateLimitError (retries off).
    # The two holding requests are long streams, closed (so aborted) once the check is done.
    release = threading.Event()

    def hold():
        with httpx.Client(timeout=60) as c:
            with c.stream("POST", s.url + "/v1/completions",
                          json={"model": s.name, "prompt": "x", "max_tokens": 1000, "ignore_eos": True,
                                "stream": True}):
                release.wait(30)

    holders = [threading.Thread(target=hold) for _ in range(2)]
    # The second only once the first runs: sent together, the second could meet the first still queued and be
    # refused itself (seen once in CI under load), leaving nothing waiting.
    holders[0].start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and s.metrics()["vllm:num_requests_running"] != 1:
        time.sleep(0.02)
    holders[1].start()
    # Until one runs and one waits, and the engine has stepped twice since: the queue bound only counts a request
    # moved into the scheduler after the step that moved it ends (see the report on engine.cpp's apply_inbox).
    deadline = time.monotonic() + 10
    steps_seen = None
    while time.monotonic() < deadline:
        m = s.metrics()
        if m["vllm:num_requests_running"] == 1 and m["vllm:num_requests_waiting"] == 1:
            if steps_seen is None:
                steps_seen = m["tpserve:engine_steps_total"]
            elif m["tpserve:engine_steps_total"] >= steps_seen + 2:
                break
        else:
            steps_seen = None
        time.sleep(0.02)
    try:
        r = s.client.completions.create(model=s.name, prompt="y", max_tokens=2)
        m2 = s.metrics()
        check("busy -> openai.RateLimitError", False, "no exception (running/waiting before: " +
              f"{m['vllm:num_requests_running']}/{m['vllm:num_requests_waiting']}); response {r!r}; "
              f"metrics after: {m2!r}")
    except openai.RateLimitError as e:
        check("busy -> openai.RateLimitError", e.status_code == 429 and
              isinstance(e.body, dict) and e.body.get("code") == "rate_limit_exceeded", repr(e.body))
    release.set()
    for t in holders:
        t.join(60)
    m = s.wait_idle()
    check("busy: closed holders leave zero KV blocks in use", m["vllm:num_requests_running"] == 0 and
          m["vllm:kv_cache_usage_perc"] == 0, repr(m))


def test_shutdown_in_flight(s, deadline_s):
    """A short stream finishes during the grace period; a long one is aborted at the deadline; exit 0."""
    results = {}
    started = {"short": threading.Event(), "long": threading.Event()}

    def streamer(key, max_tokens):
        events, finish, done, err = [], None, False, None
        try:
            with httpx.Client(timeout=60) as c:
                with c.stream("POST", s.url + "/v1/chat/completions",
                              json={"model": s.name, "messages": CHAT, "max_tokens": max_tokens, "ignore_eos": True,
                                    "stream": True}) as r:
                    for line in r.iter_lines():
                        if not line.startswith("data: "):
                            continue
                        started[key].set()
                        data = line[6:]
                        if data == "[DONE]":
                            done = True
                            continue
                        j = json.loads(data)
                        events.append(j)
                        for ch in j.get("choices", []):
                            finish = ch.get("finish_reason") or finish
        except Exception as e:  # noqa: BLE001 - a closed connection is an acceptable end for the long one
            err = repr(e)
        started[key].set()
        results[key] = (finish, done, err, len(events))

    threads = [threading.Thread(target=streamer, args=("long", 4000)),
               threading.Thread(target=streamer, args=("short", 6))]
    for t in threads:
        t.start()
    started["long"].wait(30)
    started["short"].wait(30)
    rc, took = s.sigterm_and_wait(deadline_s + 10)
    for t in threads:
        t.join(30)
    check("shutdown in flight: exit code 0", rc == 0, f"rc={rc}\n{s.log()}")
    check(f"shutdown in flight: exited within deadline {deadline_s} s + 5 s", rc is not None and
          took < deadline_s + 5, f"{took:.2f} s")
    print(f"       (exited after {took:.2f} s; streams {results})", flush=True)
    short = results.get("short")
    check("shutdown in flight: short stream finished normally", short is not None and short[0] == "length" and
          short[1], repr(short))
    # Today the long stream ends with the connection closed mid-chunked-body (no finish_reason "abort", no [DONE]):
    # serve_cmd.cpp calls server.stop(), which shuts every socket down, right after api.abort_all(), before the
    # handlers can write the abort chunk. Accepted here; a clean "abort" + [DONE] passes too.
    long = results.get("long")
    check("shutdown in flight: long stream ended (abort or closed)", long is not None and
          (long[0] == "abort" or long[2] is not None or long[1]) and long[0] != "length", repr(long))


def main():
    t_start = time.monotonic()
    deadline_s = 4.0  # room for the short stream on a loaded 2-core machine
    configs = []
    for text in (f"server:\n  shutdown_deadline_s: {deadline_s}\n",
                 "scheduler:\n  max_num_seqs: 1\n  max_queued_requests: 1\n"):
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write(text)
            configs.append(f.name)
    try:
        s = Server(["--config", configs[0]])
        try:
            print(f"server {s.name} at {s.url} (shutdown_deadline_s {deadline_s})", flush=True)
            run("completions", test_completions, s)
            run("chat", test_chat, s)
            run("models", test_models, s)
            run("choices and seeds", test_choices_and_seeds, s)
            run("logprobs", test_logprobs, s)
            run("penalties", test_penalties, s)
            run("batches, prompt logprobs, logit_bias", test_batches_prompt_logprobs_and_bias, s)
            run("errors", test_errors, s)
            run("metrics counters", test_metrics_counters, s)
            run("concurrent streams", test_concurrent_streams, s)
            run("random soak", test_random_soak, s)
            run("disconnect", test_disconnect, s)
            run("shutdown in flight", test_shutdown_in_flight, s, deadline_s)
        finally:
            s.kill()

        s2 = Server(["--config", configs[1]])
        try:
            print(f"server (max_num_seqs 1, max_queued_requests 1) at {s2.url}", flush=True)
            run("rate limit", test_rate_limit, s2)
            rc, took = s2.sigterm_and_wait(15)
            check("idle SIGTERM: exit code 0", rc == 0, f"rc={rc}\n{s2.log()}")
            check("idle SIGTERM: exit within 5 s", rc is not None and took < 5, f"{took:.2f} s")
        finally:
            s2.kill()
    finally:
        for c in configs:
            os.unlink(c)

    return summary(f" ({time.monotonic() - t_start:.1f} s)")


if __name__ == "__main__":
    sys.exit(main())
