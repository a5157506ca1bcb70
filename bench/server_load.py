#!/usr/bin/env python3
"""Load on `tessera serve`: total tokens/s and time to first token with 1, 4
and 8 concurrent streaming clients, against one server started here (every
ratio is against the single-stream figure of the same run).

  bench/server_load.py -m MODEL [--bin build/release/bin/tessera] [--clients 1,4,8]
                       [--tokens 128] [--reps 3] [-t THREADS]

Standard library only. Each client streams a completion of --tokens tokens
(ignore_eos, its own seed) from its own prompt; a row gives the median over
--reps of: total generated tokens / wall time, and the median time to the
first streamed token.
"""
import argparse, http.client, json, os, re, signal, statistics, subprocess, sys, threading, time

PROMPTS = ["Once upon a time", "One day", "Lily was", "The sun", "Tom and Sam",
           "A little dog", "The girl", "In the park", "The boy", "A big tree",
           "The cat", "Mom said", "It was", "The bird", "Ben had", "At night"]


def start(bin_, model, slots, threads=0, *extra):
    """`tessera serve` on a free port with `slots` slots of 512 cells; (process, port) once ready."""
    args = [bin_, "serve", "--port", "0", "-m", model, "-np", str(slots), "-c", str(512 * slots), *extra]
    if threads:
        args += ["-t", str(threads)]
    p = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    port = None
    for line in p.stderr:
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
        if line.startswith("ready"):
            break
    if port is None:
        sys.exit("tessera serve did not start")
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    return p, port


def stream(port, prompt, tokens, seed, out):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = json.dumps({"prompt": prompt, "max_tokens": tokens, "stream": True, "ignore_eos": True,
                       "seed": seed, "temperature": 0.8})
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    first, n = None, 0
    # Parsing every chunk would cost the client more CPU than the server
    # uses on a small machine: only the first (time to first token) and the
    # one with the timings are decoded.
    for raw in r:
        if not raw.startswith(b"data: {"):
            continue
        if first is None:
            first = time.perf_counter() - t0
        if b'"timings"' in raw:
            n = json.loads(raw[6:])["timings"]["predicted_n"]
    out.append((first or 0.0, n))


def run(port, clients, tokens):
    out, threads = [], []
    t0 = time.perf_counter()
    for i in range(clients):
        th = threading.Thread(target=stream, args=(port, PROMPTS[i % len(PROMPTS)], tokens, i, out))
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    return sum(n for _, n in out) / wall, statistics.median(f for f, _ in out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "../build/release/bin/tessera"))
    ap.add_argument("--clients", default="1,4,8")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=0)
    a = ap.parse_args()
    counts = [int(x) for x in a.clients.split(",")]
    p, port = start(a.bin, a.model, max(counts), a.threads)
    try:
        run(port, 1, 8)  # warm-up: plans built
        print(f"model {os.path.basename(a.model)}, {a.tokens} tokens per stream, median of {a.reps}")
        print(f"| {'streams':>7} | {'total tok/s':>11} | {'vs 1 stream':>11} | {'TTFT ms (median)':>16} |")
        print(f"| {'-'*6}: | {'-'*10}: | {'-'*10}: | {'-'*15}: |")
        base = None
        for c in counts:
            rates, ttfts = [], []
            for _ in range(a.reps):
                r, f = run(port, c, a.tokens)
                rates.append(r)
                ttfts.append(f)
            rate, ttft = statistics.median(rates), statistics.median(ttfts)
            base = base or rate
            print(f"| {c:>7} | {rate:>11.1f} | {rate / base:>10.2f}x | {1000 * ttft:>16.1f} |", flush=True)
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)


if __name__ == "__main__":
    main()
