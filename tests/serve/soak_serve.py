#!/usr/bin/env python3
"""A soak of `strata serve`: 8 clients, at least 200 requests and at least --seconds, random
prompts, lengths, streamed or not, and random disconnects (a stream dropped after a few chunks,
a request whose client hangs up at once). No crash; every completed reply equals the reply its
request gets served alone (the other tests tie that to `strata infer`); the server's resident
memory after the soak is within 32 MiB of before it; it drains and exits 0.

Usage: soak_serve.py STRATA QWEN2_TOKENIZER_JSON WORKDIR [--requests N] [--seconds S] [--seed K]
"""
import argparse
import json
import os
import random
import shutil
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Server, serving, make_model_folder, streamed_text  # noqa: E402

PROMPTS = ["Tell me a story.", "The weather today", "1, 2, 3, 4,", "Le chat est", "def main():",
           "Ein kurzer Satz über das Meer, die Wellen und den Wind."]
LENGTHS = [4, 16, 40]


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def drop_stream(server, body, after_chunks):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    data = json.dumps(dict(body, stream=True))
    s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(data)}\r\n\r\n{data}").encode())
    seen = b""
    while seen.count(b"data: ") < after_chunks:
        chunk = s.recv(4096)
        if not chunk:
            break
        seen += chunk
    s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("strata")
    ap.add_argument("tokenizer")
    ap.add_argument("work")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--seed", type=int, default=11)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    model = make_model_folder(os.path.join(a.work, "tiny-llama"), a.tokenizer)
    server = Server(a.strata, ["--model", model, "--max-batch", "4", "--max-queue", "256", "--ctx", "256",
                               "--prefill-chunk", "8"], a.work)
    with serving(server):
        # References: each (prompt, length, sampling) served alone.
        combos = [(p, n, t) for p in PROMPTS for n in LENGTHS for t in (0.0, 0.7)]
        ref = {}
        for p, n, t in combos:
            code, _, r = server.json("POST", "/v1/completions",
                                     {"prompt": p, "max_tokens": n, "temperature": t, "seed": 5})
            assert code == 200, r
            ref[(p, n, t)] = (r["choices"][0]["text"], r["choices"][0]["finish_reason"])
        time.sleep(0.5)
        before = rss_bytes(server.proc.pid)

        lock = threading.Lock()
        counts = {"done": 0, "dropped": 0, "checked": 0, "issued": 0}
        failures = []
        start = time.time()

        def client(k):
            rng = random.Random(a.seed * 100 + k)
            while True:
                with lock:
                    if counts["issued"] >= a.requests and time.time() - start >= a.seconds:
                        return
                    counts["issued"] += 1
                p, n, t = rng.choice(combos)
                body = {"prompt": p, "max_tokens": n, "temperature": t, "seed": 5}
                mode = rng.random()
                try:
                    if mode < 0.2:
                        drop_stream(server, body, rng.randint(1, 3))
                        with lock:
                            counts["dropped"] += 1
                        continue
                    if mode < 0.6:
                        text, reason, usage = streamed_text(server.stream("/v1/completions", body))
                    else:
                        code, _, r = server.json("POST", "/v1/completions", body)
                        if code != 200:
                            raise AssertionError(f"status {code}: {r}")
                        text, reason = r["choices"][0]["text"], r["choices"][0]["finish_reason"]
                    if (text, reason) != ref[(p, n, t)]:
                        raise AssertionError(f"{body}: {(text, reason)} != served alone {ref[(p, n, t)]}")
                    with lock:
                        counts["checked"] += 1
                except Exception as e:  # noqa: BLE001 (collected and reported below)
                    with lock:
                        failures.append(repr(e))
                    return

        threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not failures, failures[:5]
        assert server.proc.poll() is None, "the server died"
        # Dropped streams end at the next step; wait for the rows to empty.
        deadline = time.time() + 30
        while server.metric("strata_requests_running") > 0 and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        after = rss_bytes(server.proc.pid)
        elapsed = time.time() - start
        assert after - before < 32 * 2**20, f"resident memory grew from {before / 2**20:.1f} to {after / 2**20:.1f} MiB"
        print(f"soak: {counts['issued']} requests in {elapsed:.0f} s from 8 clients: {counts['checked']} replies "
              f"checked, {counts['dropped']} dropped mid-way; RSS {before / 2**20:.1f} -> {after / 2**20:.1f} MiB")
    print("ok")


if __name__ == "__main__":
    main()
