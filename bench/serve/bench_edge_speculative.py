#!/usr/bin/env python3
"""Speculative decoding across a link (issue 24): an edge (`syslm serve --role edge --verify-at`)
drafts with its small model and a cloud (`syslm serve --role cloud`) verifies with the large one.
For each simulated round-trip time (the edge's `--link 0,RTTms`, plus `--rate` if given), the same
greedy prompts go through the edge and, as the reference, straight to the cloud. Reported:

- identical: answers equal to the cloud's own greedy answers (the check: all of them);
- cloud forward passes per generated token, speculative (one per session's prompt plus one per
  verify call) against cloud-only decoding (one per token: the prompt's pass gives the first),
  and their ratio (issue 24's bar: <= 0.6);
- the drafts' acceptance, tokens per round, bytes on the wire per token;
- tokens/s seen by one client of the edge, beside the cloud's own decoding rate with no link.

    bench/serve/bench_edge_speculative.py --cloud runs/kjv-demo/model.gguf --edge student.gguf \\
        --text runs/kjv-demo/heldout-books.txt [--prompts 16] [--prompt-tokens 32] [--gen 64] \\
        [--rtts 0,10,30] [--rate 0] [-t 2]

Prompts are windows of the text, tokenized by the cloud; every answer runs to --gen tokens
(ignore_eos), one request at a time.
"""
import argparse
import http.client
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_serve  # noqa: E402
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from machine import cpu_name  # noqa: E402

CLOUD_PORT, EDGE_PORT = 18191, 18192


def post(port, path, body, timeout=600):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = json.loads(r.read())
    c.close()
    if r.status != 200:
        raise RuntimeError(f"{path} on {port}: {r.status} {data}")
    return data


def prompts_from(text_file, n, length):
    words = Path(text_file).read_text().split()
    ids = post(CLOUD_PORT, "/tokenize", {"content": " ".join(words[:20000])})["tokens"]
    step = max(length, (len(ids) - length) // n)
    return [ids[i * step:i * step + length] for i in range(n)]


def complete(port, prompt, gen):
    body = {"prompt": prompt, "max_tokens": gen, "temperature": 0, "ignore_eos": True}
    t0 = time.perf_counter()
    r = post(port, "/v1/completions", body)
    choice = r["choices"][0]
    return choice["text"], r["usage"]["completion_tokens"], time.perf_counter() - t0, \
        choice.get("syslm")


def start(cmd, port):
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    bench_serve.wait_ready(port)
    return proc


def stop(proc):
    proc.terminate()
    proc.wait(timeout=60)


def edge_run(args, prompts, reference, rtt_ms):
    link = f"{args.rate},{rtt_ms}ms"
    edge = start([args.syslm, "serve", "-m", args.edge, "--role", "edge", "--verify-at",
                  f"http://127.0.0.1:{CLOUD_PORT}", "--port", str(EDGE_PORT), "--link", link,
                  "-t", str(args.threads), "--parallel", "1", "--draft-max", str(args.draft_max)],
                 EDGE_PORT)
    try:
        c0 = bench_serve.metrics(CLOUD_PORT)
        same, tokens, seconds, fallbacks = 0, 0, 0.0, 0
        for p, ref in zip(prompts, reference):
            text, n, dt, flag = complete(EDGE_PORT, p, args.gen)
            same += text == ref
            tokens += n
            seconds += dt
            fallbacks += flag is not None
        c1, e = bench_serve.metrics(CLOUD_PORT), bench_serve.metrics(EDGE_PORT)
    finally:
        stop(edge)
    d = {k: c1[k] - c0.get(k, 0) for k in c1 if k.startswith("cloud_")}
    passes = d["cloud_sessions_total"] + d["cloud_verify_calls_total"]
    return {"rtt_ms": rtt_ms, "link": link, "identical": same, "answers": len(prompts),
            "fallbacks": fallbacks, "tokens": tokens,
            "cloud_passes": passes, "passes_per_token": passes / tokens,
            "acceptance": d["cloud_accepted_tokens_total"] / max(d["cloud_drafted_tokens_total"], 1),
            "tokens_per_round": d["cloud_generated_tokens_total"] / d["cloud_verify_calls_total"],
            "bytes_per_token": (e["edge_link_bytes_up_total"] + e["edge_link_bytes_down_total"])
            / tokens,
            "tokens_per_s": tokens / seconds}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cloud", required=True, help="the large model (verifies)")
    ap.add_argument("--edge", required=True, help="the small model (drafts), same vocabulary")
    ap.add_argument("--text", required=True, help="held-out text the prompts are cut from")
    ap.add_argument("--syslm", default=str(bench_serve.ROOT / "build" / "syslm"))
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--rtts", default="0,10,30", help="round-trip times to simulate, in ms")
    ap.add_argument("--rate", default="0", help="the link's rate (e.g. 20mbit; 0: unlimited)")
    ap.add_argument("--draft-max", type=int, default=16)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args()
    cloud = start([args.syslm, "serve", "-m", args.cloud, "--role", "cloud", "--port",
                   str(CLOUD_PORT), "-t", str(args.threads), "--parallel", "4"], CLOUD_PORT)
    try:
        prompts = prompts_from(args.text, args.prompts, args.prompt_tokens)
        m0 = bench_serve.metrics(CLOUD_PORT)
        reference, ref_tokens, ref_seconds = [], 0, 0.0
        for p in prompts:
            text, n, dt, _ = complete(CLOUD_PORT, p, args.gen)
            reference.append(text)
            ref_tokens += n
            ref_seconds += dt
        m1 = bench_serve.metrics(CLOUD_PORT)
        # Cloud-only decoding: the engine's steps for these requests, one per generated token.
        ref_passes = m1["engine_steps_total"] - m0["engine_steps_total"]
        rows = [edge_run(args, prompts, reference, float(r)) for r in args.rtts.split(",")]
    finally:
        stop(cloud)
    cpu = cpu_name()
    print(f"cloud {args.cloud}, edge {args.edge}; {len(prompts)} greedy prompts of "
          f"{args.prompt_tokens} tokens, {args.gen} generated each; {args.threads} threads; {cpu}")
    print(f"cloud alone: {ref_passes / ref_tokens:.3f} forward passes per token, "
          f"{ref_tokens / ref_seconds:.0f} tokens/s (no link)")
    print("| RTT | identical | cloud passes / token | ratio to cloud-only | acceptance | "
          "tokens / round | bytes / token | tokens/s |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        r["ratio"] = r["passes_per_token"] / (ref_passes / ref_tokens)
        print(f"| {r['rtt_ms']:g} ms | {r['identical']}/{r['answers']} | "
              f"{r['passes_per_token']:.3f} | {r['ratio']:.2f} | {r['acceptance']:.1%} | "
              f"{r['tokens_per_round']:.2f} | {r['bytes_per_token']:.0f} | "
              f"{r['tokens_per_s']:.0f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"cpu": cpu, "cloud_alone": {"passes_per_token": ref_passes / ref_tokens,
                                         "tokens_per_s": ref_tokens / ref_seconds},
             "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
