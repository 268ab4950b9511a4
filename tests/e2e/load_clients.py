#!/usr/bin/env python3
"""Concurrent OpenAI clients for the replica-death tests (stdlib only).
usage: load_clients.py PORT N_STREAM N_PLAIN MAX_TOKENS OUT_JSON
Each client sends one /v1/completions request (ignore_eos, so it runs MAX_TOKENS tokens) and records how its
response ended: stream -> "done" ([DONE] after a finish_reason), "error_done" (an error event, then [DONE]),
"cut" (the body ended without [DONE]); non-stream -> the HTTP status and error type; "no_response" when the
connection closed or timed out (120 s) without a response. Writes one JSON list to OUT_JSON."""
import http.client, json, sys, threading

port, n_stream, n_plain, max_tokens, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
results = [None] * (n_stream + n_plain)


def body(stream):
    return json.dumps({"prompt": "Once upon a time", "max_tokens": max_tokens, "ignore_eos": True,
                       "temperature": 0, "stream": stream})


def stream_client(i):
    r = {"kind": "stream", "end": "cut", "tokens": 0}
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        c.request("POST", "/v1/completions", body(True), {"Content-Type": "application/json"})
        resp = c.getresponse()
        r["status"] = resp.status
        saw_error = saw_finish = False
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                r["end"] = "error_done" if saw_error else ("done" if saw_finish else "done_without_finish")
                break
            j = json.loads(data)
            if "error" in j:
                saw_error = True
                r["error"] = j["error"]
                continue
            for ch in j.get("choices", []):
                if ch.get("text"):
                    r["tokens"] += 1
                if ch.get("finish_reason"):
                    saw_finish = True
                    r["finish_reason"] = ch["finish_reason"]
    except Exception as e:  # a reset or a timeout: the stream was cut
        r["exception"] = repr(e)
    results[i] = r


def plain_client(i):
    r = {"kind": "plain", "end": "no_response"}
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        c.request("POST", "/v1/completions", body(False), {"Content-Type": "application/json"})
        resp = c.getresponse()
        r["status"] = resp.status
        j = json.loads(resp.read())
        r["end"] = "ok" if resp.status == 200 else "error"
        if "error" in j:
            r["error"] = j["error"]
    except Exception as e:
        r["exception"] = repr(e)
    results[i] = r


threads = [threading.Thread(target=stream_client, args=(i,)) for i in range(n_stream)]
threads += [threading.Thread(target=plain_client, args=(n_stream + i,)) for i in range(n_plain)]
for t in threads:
    t.start()
for t in threads:
    t.join()
json.dump(results, open(out, "w"), indent=1)
