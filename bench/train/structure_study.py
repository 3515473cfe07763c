#!/usr/bin/env python3
"""The model-structure study (issue 21): every structure syslm trains, on the README's data, at
equal steps, equal data and (where the structure allows) equal parameters, with held-out loss
and training tokens/s for each arm; a markdown table and an SVG plot, both written here.

    bench/train/structure_study.py --syslm build/syslm --tokenizer tok.gguf --data data/ \
        [--steps 600] [--out runs/structure-study]

--tokenizer and --data are what scripts/quickstart.sh prepares (a BPE tokenizer trained on the
KJV Bible, token shards with a held-out split). Every arm is `syslm train` from scratch with the
same seed, batch, sequence length, learning-rate schedule and evaluation batches; the arms
differ only in the options listed in ARMS. Where an arm changes the block itself (MPT's ALiBi
comes with LayerNorm and GELU), the table says so. Arms of structures syslm does not train yet
are listed as not built, not left out.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

BASE = ["--arch", "llama", "--layers", "6", "--dim", "128", "--heads", "4"]
# (name, what differs, extra options); None: not built yet.
ARMS = [
    ("llama", "baseline: global attention, RoPE, SwiGLU", []),
    ("local/global 5:1", "w = 64 on 5 of 6 layers", ["--window", "64", "--attn-pattern", "5:1"]),
    ("auto window", "5:1, w drawn per step from 16..128 (evaluated at 64)",
     ["--window", "64", "--attn-pattern", "5:1", "--window-range", "16:128"]),
    ("global tokens", "5:1, w = 64, first 16 positions seen by every local layer",
     ["--window", "64", "--attn-pattern", "5:1", "--global-tokens", "16"]),
    ("ALiBi (MPT)", "MPT blocks: ALiBi, LayerNorm, GELU, no biases (same parameter count)",
     ["--arch", "mpt"]),
    # The dense FFN (352 wide) split into 8 experts of 44: the same parameters, a quarter of
    # them active at top-2.
    ("MoE top-2", "8 experts of FFN 44, top-2", ["--experts", "8", "--experts-used", "2",
                                                 "--ffn", "44"]),
    ("MoE top-p", "8 experts of FFN 44, top-p 0.2 between 1 and 2",
     ["--experts", "8", "--experts-used", "2", "--ffn", "44", "--expert-top-p", "0.2",
      "--experts-used-min", "1"]),
    ("MoE top-2, capacity 1.25", "as top-2, each expert at most 1.25 R k / X rows",
     ["--experts", "8", "--experts-used", "2", "--ffn", "44", "--expert-capacity", "1.25"]),
    ("BigBird", "5:1, w = 64, 16 global tokens, 3 random key blocks of 16 per query block",
     ["--window", "64", "--attn-pattern", "5:1", "--global-tokens", "16",
      "--random-blocks", "3:16"]),
    ("linear attention", "every layer linear: elu + 1 feature map, prefix sums",
     ["--linear-attn", "1:0"]),
    ("linear attention 5:1", "5 linear layers, then 1 softmax layer",
     ["--linear-attn", "5:1"]),
    # Sharing at the baseline's parameters: 12 layers cycling over 6 blocks (twice the compute).
    ("shared layers (ALBERT)", "12 layers over 6 shared blocks (cycle): the same parameters",
     ["--layers", "12", "--share-blocks", "6"]),
    ("shared layers, half", "6 layers over 3 shared blocks (cycle): half the block parameters",
     ["--share-blocks", "3"]),
    ("conv hybrid", "a causal depthwise conv of 4 taps before every attention", ["--conv", "4"]),
    ("Swish-beta", "SwiGLU's gate x sigmoid(beta x) with a learned beta per channel",
     ["--swish-beta"]),
]


def run_arm(args, name, extra, out_dir):
    tag = "".join(c if c.isalnum() else "_" for c in name).strip("_")
    opts = BASE + extra
    # A later --arch or --layers replaces the base one.
    for flag in ("--arch", "--layers"):
        if flag in extra:
            i = opts.index(flag)
            del opts[i:i + 2]
    cmd = [args.syslm, "train", *opts, "--tokenizer", args.tokenizer, "--data", args.data,
           "--steps", args.steps, "--batch", args.batch, "--seq", args.seq, "--ctx", args.seq,
           "--lr", "1e-3", "--warmup", max(1, int(args.steps) // 10), "--seed", args.seed,
           "--eval-every", args.steps, "--eval-batches", "40", "-t", args.threads, "--json",
           "-o", out_dir / f"{tag}.gguf"]
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{name}: syslm train failed:\n{proc.stderr}")
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    (out_dir / f"{tag}.log").write_text(proc.stderr)
    return summary


def svg(rows, path):
    """Two bar charts side by side: held-out loss and training tokens/s per arm."""
    built = [r for r in rows if r.get("val_loss") is not None]
    W, bar, gap, left, top = 900, 18, 8, 190, 40
    H = top + len(built) * (bar + gap) + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           'font-family="sans-serif" font-size="12">',
           f'<text x="10" y="20" font-size="14">syslm structure study: held-out loss (left, '
           f'lower is better; bars from 0.98 x the lowest) and training tokens/s (right, from '
           f'0)</text>']
    panels = [("val_loss", "held-out loss", left, 300, "#4472c4"),
              ("tokens_per_s", "tokens/s", left + 360, 300, "#ed7d31")]
    for key, label, x0, width, colour in panels:
        vals = [r[key] for r in built]
        lo = min(vals) * 0.98 if key == "val_loss" else 0
        hi = max(vals)
        out.append(f'<text x="{x0}" y="{top - 6}">{label}</text>')
        for i, r in enumerate(built):
            y = top + i * (bar + gap)
            w = max(2, (r[key] - lo) / (hi - lo) * width) if hi > lo else width
            out.append(f'<rect x="{x0}" y="{y}" width="{w:.1f}" height="{bar}" fill="{colour}"/>')
            fmt = f"{r[key]:.4f}" if key == "val_loss" else f"{r[key]:.0f}"
            out.append(f'<text x="{x0 + w + 4:.1f}" y="{y + 13}">{fmt}</text>')
    for i, r in enumerate(built):
        out.append(f'<text x="10" y="{top + i * (bar + gap) + 13}">{r["arm"]}</text>')
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--syslm", default="build/syslm")
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--steps", default="600")
    p.add_argument("--batch", default="8")
    p.add_argument("--seq", default="256")
    p.add_argument("--seed", default="3")
    p.add_argument("--threads", default="2")
    p.add_argument("--out", default="runs/structure-study")
    args = p.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, what, extra in ARMS:
        if extra is None:
            rows.append({"arm": name, "what": "not built yet"})
            continue
        s = run_arm(args, name, extra, out_dir)
        tag = "".join(c if c.isalnum() else "_" for c in name).strip("_")
        row = {"arm": name, "what": what, "val_loss": s.get("best_val_loss"),
               "tokens_per_s": s["tokens_per_s"], "params": s.get("params"),
               "peak_rss_mib": s.get("peak_rss_mib"),
               "file_mb": (out_dir / f"{tag}.gguf").stat().st_size / 1e6}
        if "experts_per_token" in s:
            row["experts_per_token"] = s["experts_per_token"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    (out_dir / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    lines = ["| arm | what differs | parameters | file MB | peak RSS MiB | held-out loss | "
             "train tokens/s |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if r.get("val_loss") is None:
            lines.append(f"| {r['arm']} | {r['what']} | | | | | |")
            continue
        what = r["what"] + (f"; {r['experts_per_token']:.2f} experts per token"
                            if "experts_per_token" in r else "")
        params = f"{r['params'] / 1e6:.2f}M" if r.get("params") else ""
        rss = f"{r['peak_rss_mib']:.0f}" if r.get("peak_rss_mib") else ""
        lines.append(f"| {r['arm']} | {what} | {params} | {r['file_mb']:.1f} | {rss} | "
                     f"{r['val_loss']:.4f} | {r['tokens_per_s']:.0f} |")
    (out_dir / "table.md").write_text("\n".join(lines) + "\n")
    svg(rows, out_dir / "study.svg")
    print("\n".join(lines))
    print(f"wrote {out_dir}/table.md, results.json and study.svg")


if __name__ == "__main__":
    main()
