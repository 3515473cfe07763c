#!/usr/bin/env python3
"""llama.cpp loads the LoRA adapters syslm writes and computes the same model with them: a PEFT
adapter (r 8 on every projection, random A and B) on a small Hugging Face llama (from
tests/reference/tiny_hf_models.py) is converted by `syslm convert --lora-hf`, the base by
`syslm convert --hf`, and a second adapter is trained by `syslm train --lora 8` on Exodus (200
steps); then syslm's `perplexity` and llama.cpp's `llama-perplexity` score the same text (the
first 3,000 words of Genesis) with the base, with each adapter (`--lora`), and with
`--lora-scaled 0.5`.

    LLAMA_PERPLEXITY=/path/to/llama-perplexity bench/interop/lora_vs_llamacpp.py

llama.cpp is built beside the project, never by it. Needs the .venv of scripts/install_deps.sh
(torch, transformers, peft) and Debian's bible-kjv.
"""
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "reference"))
import tiny_hf_models  # noqa: E402
import peft  # noqa: E402

SYSLM = str(ROOT / "build" / "syslm")


def ppl(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"Final estimate: PPL = ([0-9.]+)", out.stdout + out.stderr)
    return m.group(1) if m else "failed: " + (out.stderr.strip().splitlines() or ["?"])[-1]


def main():
    llama = os.environ.get("LLAMA_PERPLEXITY")
    if not llama:
        sys.exit("set LLAMA_PERPLEXITY to a llama-perplexity binary")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        hf = tiny_hf_models.build("llama", tmp / "hf")
        model = tiny_hf_models.load(hf)
        cfg = peft.LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, init_lora_weights=False,
                              target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                              "gate_proj", "up_proj", "down_proj"])
        pm = peft.get_peft_model(model, cfg)
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for name, p in pm.named_parameters():
                if "lora_" in name:
                    p.copy_(0.1 * torch.randn(p.shape, generator=g))
        pm.save_pretrained(tmp / "adapter")
        base, adapter = tmp / "base.gguf", tmp / "adapter.gguf"
        subprocess.run([SYSLM, "convert", "--hf", hf, "-o", base], check=True, capture_output=True)
        base = str(base)
        subprocess.run([SYSLM, "convert", "--lora-hf", tmp / "adapter", "--hf", hf, "-o", adapter],
                       check=True, capture_output=True)
        text = subprocess.run(["bible", "-f", "Genesis1:1-Genesis50:26"], capture_output=True,
                              text=True, check=True).stdout
        words = re.sub(r"(?m)^\S+ ", "", text).split()[:3000]
        (tmp / "text.txt").write_text(" ".join(words))
        exodus = subprocess.run(["bible", "-f", "Exodus1:1-Exodus40:38"], capture_output=True,
                                text=True, check=True).stdout
        (tmp / "exodus.txt").write_text(re.sub(r"(?m)^\S+ ", "", exodus))
        subprocess.run([SYSLM, "data", "prepare", "-f", tmp / "exodus.txt", "--tokenizer", base,
                        "-o", tmp / "data", "--val", "0"], check=True, capture_output=True)
        trained = tmp / "trained.gguf"
        subprocess.run([str(a) for a in (SYSLM, "train", "--init", base, "--lora", 8,
                                         "--lora-alpha", 16, "--data", tmp / "data", "--steps",
                                         200, "--batch", 8, "--seq", 64, "--lr", "2e-3", "-t", 2,
                                         "-o", trained)], check=True, capture_output=True)
        common = ["-f", str(tmp / "text.txt"), "-c", "128", "-t", "2"]
        print("| model | syslm PPL | llama.cpp PPL |\n| --- | ---: | ---: |")
        for label, extra in (("base", []), ("--lora (converted)", ["--lora", str(adapter)]),
                             ("--lora-scaled 0.5", ["--lora-scaled", str(adapter), "0.5"]),
                             ("--lora (trained by syslm)", ["--lora", str(trained)])):
            s = ppl([SYSLM, "perplexity", "-m", str(base), *common, *extra])
            l = ppl([llama, "-m", str(base), *common, "-b", "128", *extra])
            print(f"| {label} | {s} | {l} |")


if __name__ == "__main__":
    main()
