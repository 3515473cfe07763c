"""`syslm serve` under abuse: 1,000 requests from 32 concurrent clients mixing valid completions
and chats (streamed or not), clients that disconnect mid-stream, malformed JSON, wrong types,
oversized bodies and unknown routes. The server never crashes, answers every valid request 200
and every invalid one 4xx (never 5xx), frees every KV page, and its resident memory after the
load is back to where it was after a warm-up round of the same load.
"""
import concurrent.futures
import http.client
import json
import random
import re
import signal

import pytest

from test_serve_openai import init_model, start_server


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024


def request(port, rng):
    kind = rng.choice(["completion", "chat", "stream", "disconnect", "bad_json", "bad_type",
                       "too_big", "no_route", "bad_messages"])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    body, path, valid = None, "/v1/completions", True
    if kind == "completion":
        body = {"prompt": "In the beginning " * rng.randint(1, 20), "max_tokens": rng.randint(1, 8)}
    elif kind == "chat":
        path = "/v1/chat/completions"
        body = {"messages": [{"role": "user", "content": "hello " * rng.randint(1, 30)}],
                "max_tokens": rng.randint(1, 8)}
    elif kind in ("stream", "disconnect"):
        body = {"prompt": "And God said " * rng.randint(1, 10), "max_tokens": 32, "stream": True}
    elif kind == "bad_json":
        body, valid = '{"prompt": "x", "max_tokens": ', False
    elif kind == "bad_type":
        body, valid = {"prompt": 12.5, "max_tokens": 4}, False
    elif kind == "too_big":
        body, valid = {"prompt": "x" * 200_000, "max_tokens": 1}, False
    elif kind == "no_route":
        path, body, valid = "/v1/nothing/here", {"a": 1}, False
    else:
        path, body, valid = "/v1/chat/completions", {"messages": "hi"}, False
    data = body if isinstance(body, str) else json.dumps(body)
    conn.request("POST", path, data, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    status = resp.status
    if kind == "disconnect" and status == 200:
        resp.fp.readline()
        conn.sock.close()
        conn.close()
        return kind, valid, status
    resp.read()
    conn.close()
    return kind, valid, status


def test_thousand_requests_from_32_clients(syslm_bin, tmp_path_factory, vocab_dir):
    model = tmp_path_factory.mktemp("robust") / "model.gguf"
    init_model(syslm_bin, vocab_dir, model, 2, 64, 4, 512)
    proc, port = start_server(syslm_bin, model, "--ctx-size", "512", "--max-body", "65536",
                              "--kv-pages", "96")
    try:
        def load(n, seed):
            rng = random.Random(seed)
            seeds = [rng.randrange(1 << 30) for _ in range(n)]
            with concurrent.futures.ThreadPoolExecutor(32) as pool:
                return list(pool.map(lambda s: request(port, random.Random(s)), seeds))

        load(200, 1)  # warm-up: allocator pools, thread stacks, the prefix cache
        baseline = rss_mib(proc.pid)
        results = load(1000, 2)
        assert proc.poll() is None, "the server died"
        for kind, valid, status in results:
            if valid:
                assert status == 200, (kind, status)
            else:
                assert 400 <= status < 500, (kind, status)
        assert {k for k, _, _ in results} >= {"completion", "chat", "disconnect", "bad_json"}
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for _ in range(100):  # disconnected streams are cancelled at the next step
            conn.request("GET", "/metrics")
            text = conn.getresponse().read().decode()
            used = float(re.search(r"^syslm_kv_pages_used (\S+)", text, re.M).group(1))
            running = float(re.search(r"^syslm_requests_running (\S+)", text, re.M).group(1))
            if used == 0 and running == 0:
                break
            import time
            time.sleep(0.1)
        assert used == 0 and running == 0
        after = rss_mib(proc.pid)
        print(f"RSS after warm-up {baseline:.1f} MiB, after 1000 requests {after:.1f} MiB")
        assert after < baseline + 16, (baseline, after)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
