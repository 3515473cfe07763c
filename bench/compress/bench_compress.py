#!/usr/bin/env python3
"""The compression suite's trade-offs, measured: every table of the README's "Compression"
section comes from this script.

On a model syslm trains on the King James Bible with two books held out (Job, Romans), it runs

  1. quantization: Q4_K_M, Q3_K_M, Q2_K and Q4_0, each plain, with an importance matrix from
     calibration text (the Gospels, part of the training text) and with AWQ scaling on top; and
     W8A8 (per-channel int8 weights, SmoothQuant, static activation scales);
  2. pruning: magnitude (per matrix, the classic form, and per row) and Wanda at 50%, Wanda 2:4,
     structured (25% of heads and FFN channels; one whole layer), and recovery fine-tuning of
     the pruned models (zeros kept), on the data alone and with the unpruned model as teacher;
  3. distillation: a small student trained with the model as teacher (logits only, and logits +
     hidden-state matching) against the same student trained for the same steps without it;
  4. quantization-aware training at Q4_0 against post-training Q4_0 of the same model (and of the
     same model fine-tuned for the same steps without QAT), on the data alone and with the float
     model as teacher (LLM-QAT's recipe);
  5. speculative decoding with the distilled student as draft, on this model and on a wider one
     (8 x 384, too big for the L3 cache): greedy output identical to the model alone, and the
     speed-up;

and measures every file with `syslm eval` on the held-out books and on a text from another
Debian package (fortune cookies, `fortunes`): perplexity, KL divergence from the float model,
top-1 agreement, size and speed. Results are cached in --work, so a rerun only redoes what is
missing. About 130 minutes on 2 cores (most of it training the two models and the fine-tunes).

    apt-get install bible-kjv fortunes
    bench/compress/bench_compress.py [--work bench/compress/work] [--threads 2]
"""
import argparse
import json
import pathlib
import re
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]


def sh(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], check=True, text=True, capture_output=True, **kw)


class Bench:
    def __init__(self, args):
        self.a = args
        self.w = pathlib.Path(args.work)
        self.w.mkdir(parents=True, exist_ok=True)
        self.syslm = pathlib.Path(args.syslm)
        self.t = str(args.threads)
        self.d = self.w  # the current corpus' directory (see suite)

    def p(self, name):
        return self.d / name

    def shared(self, name):
        return self.w / name

    def run(self, *args, out=None):
        """Runs syslm unless `out` exists already; returns stdout + stderr."""
        if out is not None and pathlib.Path(out).exists():
            return ""
        print("+ syslm", " ".join(map(str, args)), file=sys.stderr, flush=True)
        r = subprocess.run([str(self.syslm), *map(str, args)], text=True, capture_output=True)
        if r.returncode != 0:
            raise SystemExit(f"syslm {' '.join(map(str, args))} failed:\n{r.stderr[-3000:]}")
        return r.stdout + r.stderr

    # ---- data -------------------------------------------------------------------------------
    def texts(self):
        def bible(ranges):
            out = []
            for rng in ranges:
                text = sh(["bible", "-f", rng]).stdout
                out.append(re.sub(r"(?m)^\S+ ", "", text))
            return "".join(out)
        w = self.shared
        if not w("train.txt").exists():
            w("train.txt").write_text(bible(["Genesis1:1-Esther10:3", "Psalms1:1-Acts28:31",
                                             "1Corinthians1:1-Revelation22:21"]))
            w("heldout-kjv.txt").write_text(bible(["Job1:1-Job42:17", "Romans1:1-Romans16:27"]))
            w("calib.txt").write_text(bible(["Matthew1:1-John21:25"]))
        if not w("fortunes-train.txt").exists():
            d = pathlib.Path("/usr/share/games/fortunes")
            if not d.exists():
                raise SystemExit("install Debian's `fortunes` package for the second text")
            parts = []
            for f in sorted(d.iterdir()):
                if f.suffix or f.is_dir() or f.name.startswith("off"):
                    continue
                parts.append(f.read_text(errors="replace").replace("\n%\n", "\n\n"))
            text = "".join(parts)
            # The first 160 KB are the held-out text; the second model trains on the rest
            # (2.4 MB), calibrating on its first 150 KB.
            w("fortunes.txt").write_text(text[:160_000])
            w("fortunes-train.txt").write_text(text[160_000:])
            w("fortunes-calib.txt").write_text(text[160_000:310_000])

    def data(self, train_text):
        self.run("tokenizer", "train", "-f", train_text, "--vocab", 4096, "-o",
                 self.p("tok.gguf"), out=self.p("tok.gguf"))
        self.run("data", "prepare", "-f", train_text, "--tokenizer", self.p("tok.gguf"),
                 "-o", self.p("data"), "--val", 0.01, out=self.p("data"))

    def train(self, out, *flags, steps, lr="2e-3", min_lr="2e-4", warmup=60, init=None,
              extra_log=None):
        src = ["--init", init] if init else [
            "--arch", "llama", "--tokenizer", self.p("tok.gguf")]
        log = self.run("train", *src, *flags, "--data", self.p("data"), "--batch", 8, "--seq", 128,
                       "--steps", steps, "--lr", lr, "--min-lr", min_lr, "--warmup", warmup,
                       "--schedule", "cosine", "--weight-decay", 0.1, "--clip", 1.0,
                       "--threads", self.t, "--out", out, out=out)
        if extra_log and log:
            pathlib.Path(extra_log).write_text(log)

    # ---- measurements -----------------------------------------------------------------------
    def eval(self, name, models, speed=True):
        out = self.p(f"eval-{name}.json")
        self.run("eval", *sum((["-m", m] for m in models), []),
                 *sum((["--text", t] for t in self.heldout), []), "-c", 256, "-t", self.t,
                 "-p", 128 if speed else 0, "-n", 64 if speed else 0, "-r", 3,
                 "--json", out, "--report", self.p(f"eval-{name}.html"), out=out)
        return json.loads(out.read_text())

    @staticmethod
    def row(m, ref=None):
        t0, t1 = m["texts"]
        cells = [pathlib.Path(m["path"]).name, f"{m['file_bytes'] / 2**20:.2f}",
                 f"{m['bits_per_weight']:.2f}", f"{t0['ppl']:.3f}", f"{t0['kl']:.4f}",
                 f"{100 * t0['top1_agreement']:.1f}%", f"{t1['ppl']:.2f}", f"{t1['kl']:.4f}"]
        if m.get("decode_tokens_per_s"):
            cells += [f"{m['prefill_tokens_per_s']:.0f}", f"{m['decode_tokens_per_s']:.0f}"]
        return "| " + " | ".join(cells) + " |"

    def table(self, title, report):
        print(f"\n#### {title}\n")
        speed = bool(report["models"][0].get("decode_tokens_per_s"))
        print(f"| model | MiB | bits/w | PPL {self.names[0]} | KL | top-1 | PPL {self.names[1]} | KL |" +
              (" pp tok/s | tg tok/s |" if speed else ""))
        print("| --- |" + " ---: |" * (9 if speed else 7))
        for m in report["models"]:
            print(self.row(m))

    # ---- the suite --------------------------------------------------------------------------
    def suite(self):
        self.texts()
        kjv, fortunes = self.shared("heldout-kjv.txt"), self.shared("fortunes.txt")
        print("\n### The KJV model")
        self.corpus(self.w, self.shared("train.txt"), self.shared("calib.txt"),
                    heldout=[kjv, fortunes], names=["KJV held-out", "fortunes"],
                    steps=self.a.steps, full=True)
        # The same checks on a second model trained on the second text, so that its held-out
        # perplexity is in-domain (the KJV model's, in the thousands, says little).
        print("\n### The fortunes model")
        self.corpus(self.w / "fortunes", self.shared("fortunes-train.txt"),
                    self.shared("fortunes-calib.txt"), heldout=[fortunes, kjv],
                    names=["fortunes held-out", "KJV"], steps=self.a.fortunes_steps, full=False)

    def corpus(self, directory, train_text, calib, heldout, names, steps, full):
        """Every check on one model: trained on `train_text`, measured on `heldout` (its own
        held-out text first). `full` adds the hidden-state variants and speculative decoding."""
        self.d = pathlib.Path(directory)
        self.d.mkdir(parents=True, exist_ok=True)
        self.heldout, self.names = heldout, names
        self.data(train_text)
        f32 = self.p("model.gguf")
        self.train(f32, "--layers", 6, "--dim", 256, "--heads", 8, "--ffn", 768, "--ctx", 256,
                   steps=steps, extra_log=self.p("model-train.log"))
        im = self.p("imatrix.gguf")
        self.run("imatrix", "-m", f32, "-f", calib, "-o", im, "-c", 256, "-t", self.t, out=im)

        # 1. quantization
        quant = [f32]
        for q in ["Q4_K_M", "Q3_K_M", "Q2_K", "Q4_0"]:
            for kind, flags in [("plain", []), ("imatrix", ["--imatrix", im]),
                                ("awq", ["--imatrix", im, "--awq"])]:
                out = self.p(f"{q}-{kind}.gguf")
                self.run("quantize", f32, out, q, *flags, "-t", self.t, out=out)
                quant.append(out)
        w8a8 = self.p("W8A8.gguf")
        self.run("quantize", f32, w8a8, "W8A8", "--calib", calib, "-c", 256, "-t",
                 self.t, out=w8a8)
        quant.append(w8a8)
        rq = self.eval("quant", quant)
        self.table("Quantization: plain, importance matrix, importance matrix + AWQ", rq)

        # 2. pruning and recovery
        pr = [f32]
        for name, flags in [("magnitude50-matrix", ["--method", "magnitude", "--sparsity", 0.5,
                                                    "--group", "matrix"]),
                            ("magnitude50", ["--method", "magnitude", "--sparsity", 0.5]),
                            ("wanda50", ["--method", "wanda", "--sparsity", 0.5, "--calib", im]),
                            ("wanda2of4", ["--method", "wanda", "--pattern", "2:4", "--calib", im]),
                            ("structured25", ["--structured", "heads=0.25,ffn=0.25", "--calib", im]),
                            ("layers1", ["--structured", "layers=1", "--calib", calib,
                                         "-c", 256])]:
            out = self.p(f"prune-{name}.gguf")
            self.run("prune", f32, out, *flags, "-t", self.t, out=out)
            pr.append(out)
            ft = self.p(f"prune-{name}-ft.gguf")
            # Below the 2e-4 the model's own schedule ended at: at 3e-4 the fine-tunes regained
            # less (Wanda 38% and per-matrix magnitude 15% of the perplexity lost, vs 69%, 23%).
            self.train(ft, "--keep-zeros", init=out, steps=self.a.ft_steps, lr="1e-4",
                       min_lr="1e-5", warmup=20)
            pr.append(ft)
            # The same fine-tune with the unpruned model as teacher (soft labels, as in
            # distillation): the pruned model learns the function it lost, not just the data.
            kd = self.p(f"prune-{name}-kd.gguf")
            self.train(kd, "--keep-zeros", "--teacher", f32, "--distill-alpha", 0.7,
                       "--distill-temperature", 2.0, init=out, steps=self.a.ft_steps, lr="1e-4",
                       min_lr="1e-5", warmup=20)
            pr.append(kd)
            if name == "magnitude50-matrix":
                # The method that loses most: the same two fine-tunes for twice the steps
                long = 2 * self.a.ft_steps
                ft2, kd2 = self.p(f"prune-{name}-ft{long}.gguf"), self.p(f"prune-{name}-kd{long}.gguf")
                self.train(ft2, "--keep-zeros", init=out, steps=long, lr="1e-4", min_lr="1e-5",
                           warmup=20)
                self.train(kd2, "--keep-zeros", "--teacher", f32, "--distill-alpha", 0.7,
                           "--distill-temperature", 2.0, init=out, steps=long, lr="1e-4",
                           min_lr="1e-5", warmup=20)
                pr += [ft2, kd2]
        rp = self.eval("prune", pr)
        self.table("Pruning, then recovery fine-tuning (-ft: "
                   f"{self.a.ft_steps} steps, zeros kept; -kd: the same with the unpruned model "
                   "as teacher)", rp)
        self.recovery(rp)
        self.sparsity_curve(f32, im)

        # 3. distillation: same student, same steps, with and without the teacher
        student = ["--layers", 3, "--dim", 128, "--heads", 4, "--ffn", 384, "--ctx", 256]
        alone, distilled = self.p("student-alone.gguf"), self.p("student-distilled.gguf")
        self.train(alone, *student, steps=self.a.student_steps)
        self.train(distilled, *student, "--teacher", f32, "--distill-alpha", 0.7,
                   "--distill-temperature", 2.0, steps=self.a.student_steps)
        students = [f32, alone, distilled]
        if full:  # + hidden-state matching: each student block against the teacher's
            hidden = self.p("student-hidden.gguf")
            self.train(hidden, *student, "--teacher", f32, "--distill-alpha", 0.7,
                       "--distill-temperature", 2.0, "--distill-hidden", 1.0,
                       "--distill-hidden-layers", 3, steps=self.a.student_steps)
            students.append(hidden)
        rd = self.eval("distill", students)
        self.table(f"Distillation: a 3-layer, 128-wide student, {self.a.student_steps} steps "
                   "with and without the teacher", rd)

        # 4. QAT
        ptq = self.p("Q4_0-plain.gguf")
        qat = self.p("qat-Q4_0.gguf")
        # A small learning rate: the model is trained; QAT only has to adapt it to the grid.
        self.train(qat, "--qat", "Q4_0", init=f32, steps=self.a.ft_steps, lr="5e-5",
                   min_lr="5e-6", warmup=20)
        ft = self.p("ft.gguf")
        self.train(ft, init=f32, steps=self.a.ft_steps, lr="5e-5", min_lr="5e-6", warmup=20)
        ft_ptq = self.p("ft-Q4_0.gguf")
        self.run("quantize", ft, ft_ptq, "Q4_0", "-t", self.t, out=ft_ptq)
        # LLM-QAT's recipe: the float model as teacher of its fake-quantized self (soft labels
        # mixed with the data's), against its control, the same fine-tune without QAT and then
        # post-training Q4_0.
        kd = ["--teacher", f32, "--distill-alpha", 0.7, "--distill-temperature", 2.0]
        qat_kd, ft_kd = self.p("qat-kd-Q4_0.gguf"), self.p("ft-kd.gguf")
        self.train(qat_kd, "--qat", "Q4_0", *kd, init=f32, steps=self.a.ft_steps, lr="5e-5",
                   min_lr="5e-6", warmup=20)
        self.train(ft_kd, *kd, init=f32, steps=self.a.ft_steps, lr="5e-5", min_lr="5e-6",
                   warmup=20)
        ft_kd_ptq = self.p("ft-kd-Q4_0.gguf")
        self.run("quantize", ft_kd, ft_kd_ptq, "Q4_0", "-t", self.t, out=ft_kd_ptq)
        rqat = self.eval("qat", [f32, ptq, ft, ft_ptq, qat, ft_kd, ft_kd_ptq, qat_kd])
        self.table(f"QAT at Q4_0 ({self.a.ft_steps} steps) against post-training Q4_0", rqat)

        if not full:
            return
        # 5. speculative decoding: on this model, which fits the 32 MB L3 cache (compute-bound
        # decode), and on a wider one trained the same way that does not (bandwidth-bound)
        large = self.p("model-large.gguf")
        self.train(large, "--layers", 8, "--dim", 384, "--heads", 8, "--ffn", 1024, "--ctx", 256,
                   steps=self.a.large_steps, extra_log=self.p("model-large-train.log"))
        # Its own draft: the same student distilled from it (the 6 x 256 model's student agrees
        # with it less often)
        large_draft = self.p("student-distilled-large.gguf")
        self.train(large_draft, *student, "--teacher", large, "--distill-alpha", 0.7,
                   "--distill-temperature", 2.0, steps=self.a.student_steps)
        self.speculative(f32, distilled, "6 x 256, 27.6 MB")
        self.speculative(large, large_draft, "8 x 384, 70 MB")

    def recovery(self, report):
        """The share of the perplexity lost to pruning that each fine-tune regained."""
        ppl = {pathlib.Path(m["path"]).stem: m["texts"][0]["ppl"] for m in report["models"]}
        base = ppl["model"]
        print(f"\n#### Perplexity lost to pruning that the fine-tunes regained ({self.names[0]})\n")
        print("| pruned | lost | fine-tune | regained |")
        print("| --- | ---: | --- | ---: |")
        for tuned in ppl:
            m = re.fullmatch(r"(prune-.+?)-((?:ft|kd)\d*)", tuned)
            if not m:
                continue
            name, how = m.groups()
            lost = ppl[name] - base
            print(f"| {name[6:]} | {lost:.3f} | {how} | {100 * (ppl[name] - ppl[tuned]) / lost:.0f}% |")

    def sparsity_curve(self, f32, im):
        """Held-out perplexity against sparsity, magnitude (per row and per matrix) and Wanda."""
        levels = [0.3, 0.4, 0.5, 0.6, 0.7]
        methods = [("magnitude per row", ["--method", "magnitude"]),
                   ("magnitude per matrix", ["--method", "magnitude", "--group", "matrix"]),
                   ("Wanda", ["--method", "wanda", "--calib", im])]
        files = [f32]
        for i, (_, flags) in enumerate(methods):
            for sp in levels:
                out = self.p(f"curve-{i}-{int(sp * 100)}.gguf")
                self.run("prune", f32, out, *flags, "--sparsity", sp, "-t", self.t, out=out)
                files.append(out)
        r = self.eval("curve", files, speed=False)
        ppl = {pathlib.Path(m["path"]).name: (m["texts"][0]["ppl"], m["texts"][0]["kl"])
               for m in r["models"]}
        print(f"\n#### Perplexity ({self.names[0]}) and KL against sparsity\n")
        print("| method | " + " | ".join(f"{int(sp * 100)}%" for sp in levels) + " |")
        print("| --- |" + " ---: |" * len(levels))
        for i, (name, _) in enumerate(methods):
            cells = [ppl[f"curve-{i}-{int(sp * 100)}.gguf"] for sp in levels]
            print(f"| {name} | " + " | ".join(f"{p:.2f} ({k:.3f})" for p, k in cells) + " |")

    def speculative(self, target, draft, label):
        prompts = ["In the beginning", "And the LORD spake unto Moses, saying",
                   "Blessed are the", "Now when Jesus"]
        rows = []
        for p in prompts:
            res = {}
            for name, extra in [("alone", []), ("draft", ["--draft", draft])]:
                best = None
                for _ in range(3):
                    cmd = [self.syslm, "generate", "-m", target, "-p", p, "-n", 200, "--temp", 0,
                           "--ignore-eos", "-t", self.t, "-s", 1, *extra]
                    r = subprocess.run([str(c) for c in cmd], text=True, capture_output=True,
                                       check=True)
                    tps = float(re.search(r"generated: \d+ tokens in [\d.]+ s \(([\d.]+) tok/s",
                                          r.stderr).group(1))
                    acc = re.search(r"accepted \(([\d.]+)%\), ([\d.]+) tokens per target call",
                                    r.stderr)
                    if best is None or tps > best[0]:
                        best = (tps, r.stdout, acc.groups() if acc else None)
                res[name] = best
            same = res["alone"][1] == res["draft"][1]
            rows.append((p, res["alone"][0], res["draft"][0], res["draft"][2], same))
        print(f"\n#### Speculative decoding on the {label} model (greedy, 200 tokens, "
              "a student distilled from it as draft)\n")
        print("| prompt | alone tok/s | with draft tok/s | speed-up | draft accepted | "
              "tokens per target call | identical output |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
        for p, a, d, acc, same in rows:
            print(f"| {p} | {a:.0f} | {d:.0f} | {d / a:.2f}x | {acc[0]}% | {acc[1]} | "
                  f"{'yes' if same else 'NO'} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--work", default=str(ROOT / "bench" / "compress" / "work"))
    ap.add_argument("--syslm", default=str(ROOT / "build" / "syslm"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=2500, help="training steps of the model")
    ap.add_argument("--fortunes-steps", type=int, default=1500,
                    help="training steps of the second model (2.4 MB of fortunes)")
    ap.add_argument("--ft-steps", type=int, default=300, help="recovery / QAT fine-tuning steps")
    ap.add_argument("--student-steps", type=int, default=800)
    ap.add_argument("--large-steps", type=int, default=1200,
                    help="training steps of the wider model (speculative decoding)")
    args = ap.parse_args()
    t0 = time.time()
    Bench(args).suite()
    print(f"\n(measured in {time.time() - t0:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
