#!/usr/bin/env python3
"""Serving speed: `syslm serve` against llama.cpp's `llama-server`, same GGUF, same threads and
parallel slots, driven by the same load generator.

For each engine and each number of concurrent streams N (default 1, 4, 16, 64), the server is
started with N parallel slots of --ctx positions each (llama-server: -np N -c N x ctx), and N
client threads
send streaming /v1/completions requests back to back (prompts of mixed lengths cut from the KJV
Bible, 128 generated tokens each, ignore_eos) for --rounds requests per client. Reported:
aggregate generated tokens/s (all tokens / wall time of the phase), time to first token p50/p99,
inter-token latency p50/p99 (gaps between streamed chunks), and for syslm the KV memory waste
(allocated but unused KV positions / allocated, both summed over /metrics samples taken every
0.5 s during the phase).

    bench/serve/bench_serve.py --model bench/models/L110M-Q8_0.gguf \\
        [--syslm build/syslm] [--llama-server /path/to/llama-server] [--streams 1,4,16,64]

--json-mode sends every request with response_format {"type": "json_object"} (constrained
decoding; the second table gives the token masks' share of the wall time). --prefix-words N
starts every prompt with the same N words (a shared system prompt, for the
prefix cache); --syslm-arg passes an argument on to `syslm serve` (e.g. --syslm-arg=--no-kv-ring
to keep every page of a sliding-window model's local layers, for comparison). A second table
gives syslm's KV pool and its peak held bytes, the prefix cache's hit rate (prompt tokens served
from cached pages) and the preemptions.

Peers are not built here: give the path of a `llama-server` you built (llama.cpp's CMake target
`llama-server`).
"""
import argparse
import http.client
import json
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def kjv_prompts(n, seed=1, prefix_words=0):
    """n prompts of mixed lengths; each starts with the same prefix_words words (a shared
    system prompt, from Psalms) when prefix_words > 0."""
    text = subprocess.run(["bible", "-f", "Genesis1:1-Exodus40:38"], capture_output=True,
                          text=True, check=True).stdout
    words = re.sub(r"(?m)^\S+ ", "", text).split()
    prefix = ""
    if prefix_words:
        psalms = subprocess.run(["bible", "-f", "Psalms1:1-150:6"], capture_output=True,
                                text=True, check=True).stdout
        prefix = " ".join(re.sub(r"(?m)^\S+ ", "", psalms).split()[:prefix_words]) + "\n\n"
    out, pos = [], seed * 97
    for i in range(n):
        length = [24, 60, 120, 200][i % 4]  # mixed prompt lengths (words)
        out.append(prefix + " ".join(words[pos:pos + length]))
        pos = (pos + 1009) % (len(words) - 300)
    return out


def wait_ready(port, timeout=180):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"server on {port} not ready")


RESPONSE_FORMAT = None  # --json-mode: {"type": "json_object"} on every request


def one_request(port, prompt, gen, extra=None):
    req = {"prompt": prompt, "max_tokens": gen, "stream": True, "temperature": 0,
           "ignore_eos": True, "stream_options": {"include_usage": True}, **(extra or {})}
    if RESPONSE_FORMAT:
        req["response_format"] = RESPONSE_FORMAT
    body = json.dumps(req)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]}")
    times, usage = [], None
    for raw in r:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        j = json.loads(line[6:])
        if j.get("usage"):
            usage = j["usage"]["completion_tokens"]
        if j.get("choices") and (j["choices"][0].get("text") or "") != "":
            times.append(time.perf_counter())
    c.close()
    n = usage if usage is not None else len(times)
    return t0, times, n


def metrics(port):
    """syslm's /metrics gauges and counters by name (without the syslm_ prefix)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"^syslm_(\w+) (\S+)$", text, re.M)}


def run_phase(port, streams, rounds, gen, prompts, sample_metrics, extra_for=None):
    """extra_for(k): fields client k adds to its requests (bench_lora.py: its model)."""
    results, lock = [], threading.Lock()
    waste = []

    def client(k):
        for r in range(rounds):
            res = one_request(port, prompts[(k * rounds + r) % len(prompts)], gen,
                              extra_for(k) if extra_for else None)
            with lock:
                results.append(res)

    stop = threading.Event()
    peak_bytes = [0.0]

    def sampler():
        while not stop.wait(0.5):
            try:
                m = metrics(port)
                used, pos = m["kv_pages_used"], m["kv_positions_used"]
                peak_bytes[0] = max(peak_bytes[0], m["kv_bytes_used"])
                if used > 0:
                    waste.append((used, pos))
            except Exception:
                pass

    threads = [threading.Thread(target=client, args=(k,)) for k in range(streams)]
    before = metrics(port) if sample_metrics else None
    t0 = time.perf_counter()
    mt = threading.Thread(target=sampler) if sample_metrics else None
    if mt:
        mt.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    stop.set()
    if mt:
        mt.join()
    tokens = sum(n for _, _, n in results)
    ttft = sorted(ts[0] - t0r for t0r, ts, _ in results if ts)
    itl = sorted(b - a for _, ts, _ in results for a, b in zip(ts, ts[1:]))

    def pct(v, p):
        return v[min(len(v) - 1, int(p / 100 * len(v)))] * 1e3 if v else float("nan")
    row = {"streams": streams, "tok_s": tokens / wall, "ttft_p50": pct(ttft, 50),
           "ttft_p99": pct(ttft, 99), "itl_p50": pct(itl, 50), "itl_p99": pct(itl, 99)}
    if before:  # syslm's own counters over the phase
        after = metrics(port)
        d = {k: after[k] - before[k] for k in ("prompt_tokens_total",
                                                "prefix_cache_hit_tokens_total",
                                                "preemptions_total", "grammar_mask_seconds_total",
                                                "grammar_masks_total",
                                                "grammar_mask_cache_hits_total")}
        row["mask_share"] = d["grammar_mask_seconds_total"] / wall
        row["mask_cache_hit_rate"] = d["grammar_mask_cache_hits_total"] / max(1, d["grammar_masks_total"])
        row["prefix_hit_rate"] = d["prefix_cache_hit_tokens_total"] / max(1, d["prompt_tokens_total"])
        row["preemptions"] = d["preemptions_total"]
        row["kv_mib_total"] = after["kv_bytes_total"] / 2**20
        row["kv_mib_peak"] = peak_bytes[0] / 2**20
    if waste:
        return row, waste
    return row, None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--syslm", default=str(ROOT / "build" / "syslm"))
    ap.add_argument("--llama-server")
    ap.add_argument("--streams", default="1,4,16,64")
    ap.add_argument("--rounds", type=int, default=2, help="requests per client")
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--ctx", type=int, default=512, help="positions per slot")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--prefix-words", type=int, default=0,
                    help="a shared system prompt of this many words before every prompt")
    ap.add_argument("--json-mode", action="store_true",
                    help='every request with response_format {"type": "json_object"} (syslm '
                         'only): the second table gives the token masks\' share of the wall time')
    ap.add_argument("--syslm-arg", action="append", default=[],
                    help="an extra argument for syslm serve (repeat), e.g. --syslm-arg=--no-kv-ring")
    args = ap.parse_args()
    global RESPONSE_FORMAT
    if args.json_mode:
        RESPONSE_FORMAT = {"type": "json_object"}
    streams = [int(s) for s in args.streams.split(",")]
    prompts = kjv_prompts(256, prefix_words=args.prefix_words)
    page = 16

    def command(name, n):
        if name == "syslm":
            return [args.syslm, "serve", "-m", args.model, "--port", "18181", "--parallel", str(n),
                    "--ctx-size", str(args.ctx), "-t", str(args.threads), "--page-size", str(page),
                    "--max-queue", "1024"] + args.syslm_arg
        return [args.llama_server, "-m", args.model, "--port", "18182", "-np", str(n), "-c",
                str(args.ctx * n), "-t", str(args.threads), "-tb", str(args.threads), "--no-webui"]

    names = ["syslm"] + (["llama.cpp"] if args.llama_server else [])
    table = {}
    for n in streams:
        for name in names:
            cmd = command(name, n)
            port = int(cmd[cmd.index("--port") + 1])
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                wait_ready(port)
                one_request(port, prompts[0], 8)  # warm-up
                row, waste = run_phase(port, n, args.rounds, args.gen, prompts, name == "syslm")
                if waste and not args.prefix_words:  # shared pages count once, positions per
                    # sequence: with a shared prefix "unused" positions go negative
                    # Unused over allocated KV bytes, both summed over the phase's samples (a
                    # mean of per-sample ratios would weight a ramp-down sample holding one
                    # sequence's two pages like one holding 200 pages).
                    held = sum(used * page for used, _ in waste)
                    row["kv_waste"] = sum(used * page - pos for used, pos in waste) / held
                    row["kv_waste_mean_of_samples"] = statistics.mean(
                        1 - pos / (used * page) for used, pos in waste)
                table[(name, n)] = row
                print(name, json.dumps(row), file=sys.stderr)
            finally:
                proc.terminate()
                proc.wait(timeout=60)

    print("| streams | syslm tok/s | llama.cpp tok/s | ratio | syslm TTFT p50 / p99 ms | "
          "llama.cpp TTFT p50 / p99 ms | syslm ITL p50 / p99 ms | llama.cpp ITL p50 / p99 ms | "
          "syslm KV waste |")
    print("| ---: |" + " ---: |" * 8)
    for n in streams:
        s, l = table.get(("syslm", n)), table.get(("llama.cpp", n))
        ratio = f"{s['tok_s'] / l['tok_s']:.2f}x" if l else "-"

        def lat(r, k):
            return f"{r[k + '_p50']:.0f} / {r[k + '_p99']:.0f}" if r else "-"
        waste = f"{100 * s['kv_waste']:.1f}%" if "kv_waste" in s else "-"
        print(f"| {n} | {s['tok_s']:.1f} | {l['tok_s']:.1f} | {ratio} | {lat(s, 'ttft')} | "
              f"{lat(l, 'ttft')} | {lat(s, 'itl')} | {lat(l, 'itl')} | {waste} |" if l else
              f"| {n} | {s['tok_s']:.1f} | - | - | {lat(s, 'ttft')} | - | {lat(s, 'itl')} | - | {waste} |")
    print()
    print("| streams | syslm KV pool MiB | peak held MiB | prefix hit rate | preemptions | "
          "token masks' share of wall time | mask cache hits |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n in streams:
        s = table[("syslm", n)]
        print(f"| {n} | {s['kv_mib_total']:.1f} | {s['kv_mib_peak']:.1f} | "
              f"{100 * s['prefix_hit_rate']:.1f}% | {s['preemptions']:.0f} | "
              f"{100 * s['mask_share']:.2f}% | {100 * s['mask_cache_hit_rate']:.1f}% |")


if __name__ == "__main__":
    main()
