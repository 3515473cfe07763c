#!/usr/bin/env python3
"""Multi-turn serving with a KV pool too small for every conversation: how much prompt work the
prefix cache saves, in the pool alone and with its RAM and disk tiers (`syslm serve
--prefix-cache-ram / --prefix-cache-dir`).

The trace: --conversations conversations (default 64) share a system prompt (--system-words
words of Psalms) and take --turns turns each. A turn appends a user message (--user-words words of
Genesis-Exodus, different in every turn) to the conversation so far and asks for --gen tokens
(greedy, ignore_eos); the answer joins the history. Turn t of every conversation runs (by
--clients concurrent clients) before any turn t + 1, so between two turns of one conversation
every other conversation takes one: the pool (--kv-memory) must hold every history to hit, and it
is sized not to.

The same trace runs on `syslm serve` three times: --no-prefix-cache (every prompt token
computed), the pool's prefix cache alone, and the pool with the tiers. Reported for each: prompt
tokens computed (accepted minus served from cached pages, from /metrics), the share of whole
prompt pages found in the pool, the RAM tier and the disk tier, time to first token p50 / p99,
and whether every answer equals the first run's (a hit must give the tokens of a cold run).

    bench/serve/bench_multiturn.py --model m.gguf [--kv-memory 24MiB] [--prefix-cache-ram 64MiB]
"""
import argparse
import concurrent.futures
import http.client
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_serve import metrics, wait_ready  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def words_of(books):
    text = subprocess.run(["bible", "-f", books], capture_output=True, text=True,
                          check=True).stdout
    return re.sub(r"(?m)^\S+ ", "", text).split()


def ask(port, prompt, gen):
    """Streams one completion; returns (time to first token in s, the answer's text)."""
    body = json.dumps({"prompt": prompt, "max_tokens": gen, "stream": True, "temperature": 0,
                       "ignore_eos": True})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]}")
    ttft, text = None, []
    for raw in r:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        piece = json.loads(line[6:])["choices"][0].get("text") or ""
        if piece and ttft is None:
            ttft = time.perf_counter() - t0
        text.append(piece)
    c.close()
    return ttft if ttft is not None else time.perf_counter() - t0, "".join(text)


def run_trace(port, args, system, user):
    """Every conversation's turns, turn by turn; returns the TTFTs and the answers."""
    history = [system for _ in range(args.conversations)]
    ttfts, answers = [], {}

    def turn(c, t):
        start = ((c * args.turns + t) * 211) % (len(user) - args.user_words)
        prompt = history[c] + "\n\nUser: " + " ".join(user[start:start + args.user_words]) + \
            "\nAssistant:"
        ttft, answer = ask(port, prompt, args.gen)
        history[c] = prompt + answer
        return c, t, ttft, answer

    with concurrent.futures.ThreadPoolExecutor(args.clients) as pool:
        for t in range(args.turns):
            for c, t_, ttft, answer in pool.map(lambda c: turn(c, t), range(args.conversations)):
                ttfts.append(ttft)
                answers[(c, t_)] = answer
    return ttfts, answers


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--syslm", default=str(ROOT / "build" / "syslm"))
    ap.add_argument("--conversations", type=int, default=64)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--clients", type=int, default=8, help="concurrent requests")
    ap.add_argument("--system-words", type=int, default=150)
    ap.add_argument("--user-words", type=int, default=40)
    ap.add_argument("--gen", type=int, default=24)
    ap.add_argument("--ctx", type=int, default=2048, help="positions per sequence")
    ap.add_argument("--kv-memory", default="24MiB", help="the KV pool: too small for the trace")
    ap.add_argument("--prefix-cache-ram", default="64MiB")
    ap.add_argument("--prefix-cache-disk", default="1GiB")
    ap.add_argument("-t", "--threads", type=int, default=2)
    args = ap.parse_args()
    system = " ".join(words_of("Psalms1:1-150:6")[:args.system_words])
    user = words_of("Genesis1:1-Exodus40:38")

    rows, first = [], None
    with tempfile.TemporaryDirectory() as disk:
        runs = [("no prefix cache", ["--no-prefix-cache"]), ("pool", []),
                ("pool + RAM + disk", ["--prefix-cache-ram", args.prefix_cache_ram,
                                       "--prefix-cache-dir", disk, "--prefix-cache-disk",
                                       args.prefix_cache_disk])]
        for name, extra in runs:
            cmd = [args.syslm, "serve", "-m", args.model, "--port", "18183", "--parallel",
                   str(args.clients), "--ctx-size", str(args.ctx), "-t", str(args.threads),
                   "--kv-memory", args.kv_memory, "--max-queue", "1024", *extra]
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                wait_ready(18183)
                before = metrics(18183)
                t0 = time.perf_counter()
                ttfts, answers = run_trace(18183, args, system, user)
                wall = time.perf_counter() - t0
                after = metrics(18183)
            finally:
                proc.terminate()
                proc.wait(timeout=120)
            d = {k: after[k] - before[k] for k in
                 ("prompt_tokens_total", "prefix_cache_hit_tokens_total", "preemptions_total")}
            looked = after["prefix_cache_pages_looked_up_total"]
            ttfts.sort()
            row = {"run": name, "wall_s": wall,
                   "prompt_tokens": d["prompt_tokens_total"],
                   "computed": d["prompt_tokens_total"] - d["prefix_cache_hit_tokens_total"],
                   "pool_hits": after["prefix_cache_pool_hit_rate"] if looked else 0.0,
                   "ram_hits": after["prefix_cache_ram_hit_rate"] if looked else 0.0,
                   "disk_hits": after["prefix_cache_disk_hit_rate"] if looked else 0.0,
                   "ttft_p50": ttfts[len(ttfts) // 2] * 1e3,
                   "ttft_p99": ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))] * 1e3,
                   "preemptions": d["preemptions_total"], "kv_mib": after["kv_bytes_total"] / 2**20}
            if first is None:
                first = answers
            row["answers_equal"] = answers == first
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)

    base = rows[0]
    print(f"{args.conversations} conversations x {args.turns} turns, {args.clients} clients, "
          f"KV pool {rows[0]['kv_mib']:.1f} MiB; {base['prompt_tokens']:.0f} prompt tokens")
    print("| run | prompt tokens computed | vs none | pages from pool / RAM / disk | "
          "TTFT p50 / p99 ms | TTFT p50 vs none | wall s | answers as the first run |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        print(f"| {r['run']} | {r['computed']:.0f} | {r['computed'] / base['computed']:.2f}x | "
              f"{100 * r['pool_hits']:.1f}% / {100 * r['ram_hits']:.1f}% / "
              f"{100 * r['disk_hits']:.1f}% | {r['ttft_p50']:.0f} / {r['ttft_p99']:.0f} | "
              f"{r['ttft_p50'] / base['ttft_p50']:.2f}x | {r['wall_s']:.1f} | "
              f"{'yes' if r['answers_equal'] else 'NO'} |")


if __name__ == "__main__":
    main()
