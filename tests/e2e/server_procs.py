"""Starting tpserve processes and talking to them over HTTP, for the Python end-to-end tests (router_test.py,
router_kv_fetch_test.py): start() runs a command and waits for its 'MARKER ... http://host:port' stdout line;
call() makes one HTTP request and returns (status, body text, headers)."""
import http.client
import json
import os
import subprocess
import threading
import time


def start(cmd, log_path, marker, procs, timeout=120):
    """Starts cmd (an argv list) with stderr to log_path, appends it to procs (the caller kills them at the end);
    returns (proc, port) once it printed the marker line with its URL, or exits the test with the log's tail."""
    log = open(log_path, "w")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
    procs.append(p)
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        if marker in line and "http://" in line:
            port = int(line.split("http://")[1].split(":")[1].split()[0].rstrip("/"))
            threading.Thread(target=p.stdout.read, daemon=True).start()  # drain
            return p, port
    raise SystemExit(f"{os.path.basename(log_path)}: did not start: " + open(log_path).read()[-2000:])


def call(port, method, path, body=None, timeout=120):
    """One request to 127.0.0.1:port with a JSON body (or none); returns (status, body text, headers dict)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request(method, path, json.dumps(body) if body is not None else None, {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read().decode()
    return r.status, data, dict(r.getheaders())
