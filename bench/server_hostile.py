#!/usr/bin/env python3
"""A hostile client's probe of `tessera serve`, one row per finding of issue 23
(the requests that crashed or starved the server before its HTTP layer was
rebuilt), measured on a server started here on loopback: the status each
gets, peak and settled memory, and /health latency with 200 slow
connections open.

  bench/server_hostile.py -m MODEL [--bin build/release/bin/tessera]

Standard library only; every connection goes to 127.0.0.1 and every loop is
bounded.
"""
import argparse, gzip, http.client, json, os, re, signal, socket, statistics, sys, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_load import start  # noqa: E402


def rss_kib(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def raw(port, data, timeout=30):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
    except OSError:
        pass
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except OSError:
        pass
    s.close()
    return out


def status(resp):
    m = re.match(rb"HTTP/1.1 (\d+)", resp)
    return int(m.group(1)) if m else None


def post(path, body, extra=b""):
    return (b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + extra +
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def slow_connections(port, n=200):
    """n connections that each sent one byte of a request head."""
    out = []
    for _ in range(n):
        c = socket.create_connection(("127.0.0.1", port), timeout=30)
        c.sendall(b"G")
        out.append(c)
    return out


def health_ms(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    t0 = time.perf_counter()
    c.request("GET", "/health")
    c.getresponse().read()
    return 1000 * (time.perf_counter() - t0)


def metric(port, name):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    m = re.search(r"\n" + name + r" (\S+)", text)
    return float(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "../build/release/bin/tessera"))
    a = ap.parse_args()
    p, port = start(a.bin, a.model, 4)
    rows = []

    def row(finding, what):
        rows.append((finding, what))
        print(f"| {finding} | {what} |", flush=True)

    print("| finding | behaviour now |\n|---|---|")
    for i in range(8):  # warm: plans built, worker threads' allocations settled
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        path, req = [("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 32}),
                     ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 16}),
                     ("/v1/embeddings", {"input": "Once upon a time"}),
                     ("/tokenize", {"content": "Once upon a time " * 100, "with_pieces": True})][i % 4]
        c.request("POST", path, json.dumps(req), {"Content-Type": "application/json"})
        c.getresponse().read()

    def complete(prompt):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("POST", "/v1/completions", json.dumps({"prompt": prompt, "max_tokens": 48}),
                  {"Content-Type": "application/json"})
        c.getresponse().read()
    for _ in range(3):  # slots decoding together, some queued: the batch shapes of busy traffic
        ts = [threading.Thread(target=complete, args=(p_,))
              for p_ in ["Once", "One day", "Lily", "The sun", "Tom", "A dog", "It was", "The cat"]]
        [t.start() for t in ts]
        [t.join() for t in ts]
    time.sleep(0.5)
    steady = rss_kib(p.pid)
    steady_anon = rss_kib(p.pid, "RssAnon")
    plans = metric(port, "tessera_plans_built_total")
    deep = b'{"prompt":"x","max_tokens":' + b"[" * 60000 + b"1" + b"]" * 60000 + b"}"
    r = raw(port, post(b"/v1/completions", deep))
    row("1. JSON nested 60,000 deep (120 KB)", f"{status(r)}, server alive: {health_ms(port) < 5000}")
    chunked = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    piece = b"100000\r\n" + b" " * 0x100000 + b"\r\n"
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(chunked)
    sent = 0
    try:
        while sent < 300 << 20:
            s.sendall(piece)
            sent += 0x100000
    except OSError:
        pass
    r = s.recv(4096)
    s.close()
    row("2a. 300 MB chunked body", f"{status(r)} after {sent >> 20} MB sent; peak RSS {rss_kib(p.pid, 'VmHWM') // 1024} MB")
    bomb = gzip.compress(b" " * (200 << 20), 9)
    r = raw(port, post(b"/v1/completions", bomb, b"Content-Encoding: gzip\r\n"))
    row(f"2b. gzip body of {len(bomb) >> 10} KB expanding to 200 MB",
        f"{status(r)}; peak RSS {rss_kib(p.pid, 'VmHWM') // 1024} MB")
    slow = slow_connections(port)
    lat = [health_ms(port) for _ in range(20)]
    row("3. 200 slow connections (one header byte each)",
        f"/health median {statistics.median(lat):.1f} ms, max {max(lat):.1f} ms")
    text = "a" * (1 << 20)
    before = rss_kib(p.pid)
    codes = []
    for _ in range(5):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("POST", "/tokenize", json.dumps({"content": text, "with_pieces": True}),
                  {"Content-Type": "application/json"})
        codes.append(c.getresponse().status)
    row("4. /tokenize with_pieces on 1 MB, 5 times", f"{codes[0]}; RSS {before // 1024} -> {rss_kib(p.pid) // 1024} MB")
    for _ in range(40):
        c = socket.create_connection(("127.0.0.1", port), timeout=30)
        c.sendall(post(b"/v1/completions", b'{"prompt":"Once","max_tokens":400,"ignore_eos":true}'))
        c.close()
    time.sleep(1.0)
    row("5. 40 non-streaming requests whose clients left",
        f"after 1 s: {metric(port, 'tessera_slots_busy'):.0f} slots busy, "
        f"{metric(port, 'tessera_requests_queued'):.0f} queued, "
        f"{metric(port, 'tessera_requests_cancelled_total'):.0f} cancelled")
    body = b'{"prompt":"x","max_tokens":1}'
    r1 = raw(port, b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 29\r\nContent-Length: 5\r\n\r\n" + body)
    q, qp = start(a.bin, a.model, 4, 0, "--api-key", "KEY")
    r2 = raw(qp, b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nX-Foo: a\nX-Api-Key: KEY\r\n\r\n")
    q.send_signal(signal.SIGTERM)
    q.wait(timeout=30)
    row("6. two Content-Lengths / bare LF smuggling an API key", f"{status(r1)} / {status(r2)}")
    msgs = [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}, {"role": "assistant", "content": None},
            {"role": "user", "content": "Go on"}]
    got = []
    for path, req in [("/v1/chat/completions", {"messages": msgs, "max_tokens": 4}),
                      ("/v1/completions", {"prompt": "x", "max_tokens": 2, "logit_bias": {"13": 5}}),
                      ("/v1/chat/completions", {"messages": msgs, "tools": [{}]}),
                      ("/v1/embeddings", {"input": "x", "dimensions": 8})]:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("POST", path, json.dumps(req), {"Content-Type": "application/json"})
        got.append(c.getresponse().status)
    row("7. text parts + null content / logit_bias / tools / dimensions", " / ".join(map(str, got)))
    big = b'{"prompt":"x","max_tokens":"' + b"y" * (7 << 20) + b'"}'
    r = raw(port, post(b"/v1/completions", big))
    row("8. an error about a 7 MB value", f"{status(r)}, response {len(r)} bytes")
    for c in slow:
        c.close()
    time.sleep(6)  # the server trims its heap 5 s after requests
    after, after_anon = rss_kib(p.pid), rss_kib(p.pid, "RssAnon")
    row("memory after the burst", f"RSS {after / 1024:.1f} MB, steady {steady / 1024:.1f} MB before it "
        f"({100.0 * (after - steady) / steady:+.0f}%); anonymous {after_anon / 1024:.1f} MB vs "
        f"{steady_anon / 1024:.1f} ({100.0 * (after_anon - steady_anon) / steady_anon:+.0f}%; the rest is "
        f"code paged in); graph plans {plans:.0f} -> {metric(port, 'tessera_plans_built_total'):.0f}")
    slow = slow_connections(port)
    t0 = time.perf_counter()
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)
    row("SIGTERM with the 200 slow connections open", f"exit {p.returncode} in {time.perf_counter() - t0:.2f} s")
    for c in slow:
        c.close()


if __name__ == "__main__":
    main()
