"""Kernel choices are timed once per machine and remembered (src/kernels/kernel_choices.hpp).

Two processes of one command then run the same kernels: the second reads the first's choices
instead of timing its own, and where two GEMM engines time alike (blas and syslm's f32 panels on
Zen 4) the two runs still end with the same weights bit for bit.
"""
import os
import subprocess

import numpy as np

from test_train_grads import read_gguf

TRAIN = ["train", "--arch", "llama", "--vocab", "300", "--layers", "2", "--dim", "32", "--heads",
         "4", "--ctx", "32", "--synthetic-data", "--batch", "2", "--seq", "16", "--steps", "3",
         "--lr", "3e-3", "--seed", "9", "-t", "1"]


def test_a_second_run_reads_the_first_runs_choices_and_repeats_it(syslm_bin, tmp_path):
    env = dict(os.environ, SYSLM_KERNEL_CACHE=str(tmp_path / "store"))
    outs = []
    for run in range(2):
        out = tmp_path / f"run{run}.gguf"
        subprocess.run([str(syslm_bin), *TRAIN, "-o", str(out)], check=True, capture_output=True,
                       env=env)
        outs.append(read_gguf(out)[0])
        stored = sorted(p.name for p in (tmp_path / "store").glob("*/*"))
        if run == 0:
            first = stored
    assert "cpu.txt" in first
    assert stored == first, "the second run timed nothing new"
    for t in outs[0]:
        assert np.array_equal(outs[0][t], outs[1][t]), t

    probe = subprocess.run([str(syslm_bin), "probe"], capture_output=True, text=True, env=env,
                           check=True).stdout
    assert "remembered in " + str(tmp_path / "store") in probe, probe
    if "train-gemm-f32" in first:  # two f32 engines exist on this CPU: the choice was stored
        line = next(l for l in probe.splitlines() if "training GEMMs" in l)
        assert "; remembered]" in line, line
