#!/usr/bin/env python3
"""Edge and cloud on this machine (issue 24), each mode against the cloud alone, over simulated
links (the edge's `--link RATE,RTT`). Prompts are windows of a held-out text, tokenized by the
cloud; answers are greedy, one request at a time.

--mode speculative: the edge (`serve --role edge --verify-at`) drafts with its small model, the
  cloud (`serve --role cloud`) verifies. Per RTT: answers identical to the cloud's own (the check:
  all), cloud forward passes per generated token (one per session's prompt plus one per verify
  call) against cloud-only decoding (one per token) and their ratio (issue 24's bar: <= 0.6), the
  acceptance, tokens per round, bytes on the wire per token, tokens/s at the edge.
--mode split: the edge runs layers [0, L) of the same model, the cloud the rest (`--split-at L
  --cloud`). Per wire format and RTT: answers identical to the cloud's own, bytes per token, the
  latency the link adds per token (the calls' time minus the cloud's own compute), tokens/s.
--mode cascade: the edge answers with its small model and defers tokens it is unsure of
  (`--cascade --defer-below P`). Per threshold: the share of tokens the cloud decided, and the
  latency and tokens/s at each RTT (quality against the share: `syslm eval --cascade`).

    bench/serve/bench_edge_cloud.py --mode speculative --cloud runs/kjv-demo/model.gguf \
        --edge student.gguf --text runs/kjv-demo/heldout-books.txt [--rtts 0,10,30] [--rate 0]
    bench/serve/bench_edge_cloud.py --mode split --cloud runs/kjv-demo/model.gguf --split-at 2 \
        --text runs/kjv-demo/heldout-books.txt [--wires f16,int8] [--rate 20mbit]
    bench/serve/bench_edge_cloud.py --mode cascade --cloud runs/kjv-demo/model.gguf \
        --edge student.gguf --text runs/kjv-demo/heldout-books.txt --thresholds 0.1,0.2,0.4
"""
import argparse
import concurrent.futures
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


def run_edge(args, mode_flags, prompts, reference, rtt_ms):
    """One edge server with these mode flags over a link of this RTT: every prompt once; the
    answers compared with the cloud's own, and the counters of both sides over the run."""
    link = f"{args.rate},{rtt_ms:g}ms"
    edge = start([args.syslm, "serve", "-m", args.edge or args.cloud, "--role", "edge",
                  "--port", str(EDGE_PORT), "--link", link, "-t", str(args.threads),
                  "--parallel", str(args.clients), *mode_flags], EDGE_PORT)
    try:
        c0 = bench_serve.metrics(CLOUD_PORT)
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(args.clients) as pool:
            answers = list(pool.map(lambda p: complete(EDGE_PORT, p, args.gen), prompts))
        wall = time.perf_counter() - t0
        same = sum(a[0] == ref for a, ref in zip(answers, reference))
        tokens = sum(a[1] for a in answers)
        fallbacks = sum(a[3] is not None for a in answers)
        # one client: the requests' own times; several: the wall time of all of them
        seconds = sum(a[2] for a in answers) if args.clients == 1 else wall
        c1, e = bench_serve.metrics(CLOUD_PORT), bench_serve.metrics(EDGE_PORT)
    finally:
        stop(edge)
    d = {k: c1[k] - c0.get(k, 0) for k in c1 if k.startswith("cloud_")}
    return {"rtt_ms": rtt_ms, "link": link, "identical": same, "answers": len(prompts),
            "fallbacks": fallbacks, "tokens": tokens, "tokens_per_s": tokens / seconds,
            "bytes_per_token": (e["edge_link_bytes_up_total"] + e["edge_link_bytes_down_total"])
            / tokens, "cloud": d, "edge": e}


def speculative(args, prompts, reference, cloud_alone):
    print("| draft length | RTT | identical | cloud passes / token | ratio to cloud-only | "
          "acceptance | tokens / round | bytes / token | tokens/s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    rows = []
    policies = [("adaptive", ["--draft-max", str(args.draft_max)])]
    if args.fixed_k:
        policies.append((f"k = {args.fixed_k}", ["--draft-fixed", "--draft-k", str(args.fixed_k)]))
    for (policy, flags), rtt in ((p, r) for p in policies for r in args.rtts):
        r = run_edge(args, ["--verify-at", f"http://127.0.0.1:{CLOUD_PORT}", *flags], prompts,
                     reference, rtt)
        r["draft_length"] = policy
        d = r.pop("cloud")
        r.pop("edge")
        passes = d["cloud_sessions_total"] + d["cloud_verify_calls_total"]
        r.update(passes_per_token=passes / r["tokens"],
                 acceptance=d["cloud_accepted_tokens_total"] / max(d["cloud_drafted_tokens_total"],
                                                                   1),
                 tokens_per_round=d["cloud_generated_tokens_total"] / d["cloud_verify_calls_total"])
        r["ratio"] = r["passes_per_token"] / cloud_alone["passes_per_token"]
        print(f"| {policy} | {rtt:g} ms | {r['identical']}/{r['answers']} | "
              f"{r['passes_per_token']:.3f} | "
              f"{r['ratio']:.2f} | {r['acceptance']:.1%} | {r['tokens_per_round']:.2f} | "
              f"{r['bytes_per_token']:.0f} | {r['tokens_per_s']:.0f} |")
        rows.append(r)
    return rows


def split(args, prompts, reference, cloud_alone):
    print(f"split at layer {args.split_at}, {args.clients} client(s)")
    print("| wire | RTT | identical | bytes / token | added latency / token | tokens/s | "
          "calls per pass, edge / cloud |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    rows = []
    for wire in args.wires.split(","):
        for rtt in args.rtts:
            r = run_edge(args, ["--split-at", str(args.split_at), "--cloud",
                                f"http://127.0.0.1:{CLOUD_PORT}", "--wire", wire],
                         prompts, reference, rtt)
            c = r.pop("cloud")
            e = r.pop("edge")
            r["edge_calls_per_pass"] = e["edge_batched_calls_total"] / e["edge_batches_total"]
            r["cloud_calls_per_pass"] = c["cloud_batched_calls_total"] / max(
                c["cloud_batches_total"], 1)
            # per generated token: the link's time over the whole answer (prompt rows included)
            added = (e["edge_link_seconds_total"] - e["edge_split_cloud_seconds_total"]) / \
                r["tokens"]
            r.update(wire=wire, added_ms_per_token=1e3 * added)
            print(f"| {wire} | {rtt:g} ms | {r['identical']}/{r['answers']} | "
                  f"{r['bytes_per_token']:.0f} | {r['added_ms_per_token']:.2f} ms | "
                  f"{r['tokens_per_s']:.0f} | {r['edge_calls_per_pass']:.2f} / "
                  f"{r['cloud_calls_per_pass']:.2f} |")
            rows.append(r)
    return rows


def cascade(args, prompts, reference, cloud_alone):
    print("| defer below | RTT | cloud share of tokens | answers equal to the cloud's | "
          "tokens/s |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    rows = []
    for below in args.thresholds.split(","):
        for rtt in args.rtts:
            r = run_edge(args, ["--cascade", f"http://127.0.0.1:{CLOUD_PORT}", "--defer-below",
                                below], prompts, reference, rtt)
            r.pop("cloud")
            e = r.pop("edge")
            cloud = e["edge_cascade_cloud_tokens_total"]
            r.update(defer_below=float(below),
                     cloud_share=cloud / (cloud + e["edge_cascade_edge_tokens_total"]))
            print(f"| {below} | {rtt:g} ms | {r['cloud_share']:.1%} | "
                  f"{r['identical']}/{r['answers']} | {r['tokens_per_s']:.0f} |")
            rows.append(r)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--mode", required=True, choices=["speculative", "split", "cascade"])
    ap.add_argument("--cloud", required=True, help="the large model")
    ap.add_argument("--edge", help="the small model (speculative, cascade), same vocabulary")
    ap.add_argument("--text", required=True, help="held-out text the prompts are cut from")
    ap.add_argument("--syslm", default=str(bench_serve.ROOT / "build" / "syslm"))
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--rtts", default="0,10,30", help="round-trip times to simulate, in ms")
    ap.add_argument("--rate", default="0", help="the link's rate (e.g. 20mbit; 0: unlimited)")
    ap.add_argument("--draft-max", type=int, default=16)
    ap.add_argument("--fixed-k", type=int, default=0,
                    help="speculative: also a fixed draft length (--draft-fixed --draft-k K)")
    ap.add_argument("--split-at", type=int, default=2)
    ap.add_argument("--wires", default="f16,int8")
    ap.add_argument("--thresholds", default="0.05,0.1,0.15,0.25,0.45")
    ap.add_argument("--clients", type=int, default=1,
                    help="concurrent requests (the edge's --parallel); tokens/s is then over "
                         "the wall time of all of them")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args()
    if args.mode != "split" and not args.edge:
        ap.error(f"--mode {args.mode} needs --edge")
    args.rtts = [float(r) for r in args.rtts.split(",")]
    cloud = start([args.syslm, "serve", "-m", args.cloud, "--role", "cloud", "--port",
                   str(CLOUD_PORT), "-t", str(args.threads), "--parallel", "4",
                   "--cloud-sessions", str(max(16, args.clients))], CLOUD_PORT)
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
        alone = {"passes_per_token": (m1["engine_steps_total"] - m0["engine_steps_total"])
                 / ref_tokens, "tokens_per_s": ref_tokens / ref_seconds}
        cpu = cpu_name()
        print(f"--mode {args.mode}: cloud {args.cloud}, edge {args.edge or args.cloud}; "
              f"{len(prompts)} greedy prompts of {args.prompt_tokens} tokens, {args.gen} "
              f"generated each; link rate {args.rate}; {args.threads} threads; {cpu}")
        print(f"cloud alone: {alone['passes_per_token']:.3f} forward passes per token, "
              f"{alone['tokens_per_s']:.0f} tokens/s (no link)")
        rows = {"speculative": speculative, "split": split, "cascade": cascade}[args.mode](
            args, prompts, reference, alone)
    finally:
        stop(cloud)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"cpu": cpu, "mode": args.mode, "cloud_alone": alone, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
