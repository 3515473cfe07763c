"""Checkpoints that a kill cannot strand, and checkpoint files that are checked.

A checkpoint save writes every file into `<ck>.tmp`, then renames `<ck>` to `<ck>.old`, `<ck>.tmp`
to `<ck>`, and removes `<ck>.old` (src/train/checkpoint_files.hpp). The run is killed with SIGKILL
(strace's syscall injection) at every rename, fsync, mkdir and removal of that sequence and at the
first, a middle and the last write of every file, in both saves of a 4-step run (the second save
has a previous checkpoint to move aside). After each kill:
- `train --resume ck` continues from the newest complete checkpoint and ends with the weights of
  an uninterrupted run, bit for bit; before the first save completed it may instead say clearly
  that there is no checkpoint;
- a new run with `--checkpoint ck` works.
Then: state.bin carries a checksum (a changed byte is refused, naming the file), NaN moments are
refused even with a valid checksum, and a model.gguf that is not the one written with the state
is refused.
"""
import os
import re
import shutil
import struct
import subprocess

import numpy as np
import pytest

from test_train_grads import read_gguf

STRACE = shutil.which("strace")
MODEL = ["--arch", "llama", "--vocab", "300", "--layers", "2", "--dim", "32", "--heads", "4",
         "--ctx", "32"]
RUN = ["--synthetic-data", "--batch", "2", "--seq", "16", "--steps", "4", "--lr", "3e-3",
       "--warmup", "1", "--seed", "5", "-t", "1"]
TRACED = "write,rename,fsync,mkdir,unlink,unlinkat,rmdir"


def syslm_cmd(syslm_bin, *args):
    return [str(syslm_bin), *map(str, args)]


def checkpointed(syslm_bin, ck):
    return syslm_cmd(syslm_bin, "train", *MODEL, *RUN, "--checkpoint", ck, "--checkpoint-every", 2)


def resume_cmd(syslm_bin, ck, out):
    return syslm_cmd(syslm_bin, "train", "--resume", ck, *RUN, "-o", out)


def injection_points(trace, ck):
    """(syscall, n): the n-th call of that syscall by the main thread that is part of a checkpoint
    save: every call of the directory-level syscalls, and the first, a middle and the last write of
    each checkpoint file."""
    lines = trace.read_text().splitlines()
    main_pid = lines[0].split()[0]
    counts, points, writes = {}, [], {}
    for line in lines:
        parts = line.split(None, 1)
        if len(parts) < 2 or parts[0] != main_pid:
            continue
        m = re.match(r"(\w+)\((.*)", parts[1])
        if not m:
            continue
        name, rest = m.groups()
        counts[name] = counts.get(name, 0) + 1
        if name == "write":  # the file written, from -y: write(5</path/of/the/file>, ...)
            fd = re.match(r"\d+<([^>]*)>", rest)
            if fd and str(ck) in fd.group(1):
                writes.setdefault(fd.group(1), []).append(counts[name])
        elif str(ck) in rest:
            points.append((name, counts[name]))
    for calls in writes.values():
        for n in sorted({calls[0], calls[len(calls) // 2], calls[-1]}):
            points.append(("write", n))
    return points


@pytest.mark.skipif(STRACE is None, reason="strace is not installed (scripts/install_deps.sh)")
def test_a_kill_at_any_step_of_a_save_strands_nothing(syslm_bin, tmp_path):
    straight = tmp_path / "straight.gguf"
    subprocess.run(syslm_cmd(syslm_bin, "train", *MODEL, *RUN, "-o", straight), check=True,
                   capture_output=True)
    want, _ = read_gguf(straight)

    ck = tmp_path / "ck"
    trace = tmp_path / "trace.txt"
    subprocess.run([STRACE, "-f", "-qq", "-y", "-e", f"trace={TRACED}", "-o", str(trace),
                    *checkpointed(syslm_bin, ck)], check=True, capture_output=True)
    points = injection_points(trace, ck)
    names = {n for n, _ in points}
    assert {"rename", "fsync", "mkdir", "write"} <= names, points
    assert sum(n == "rename" for n, _ in points) >= 7, points  # 2 files + the swap, twice
    print(f"{len(points)} injection points")

    for name, n in points:
        what = f"SIGKILL at {name} #{n}"
        for p in tmp_path.glob("ck*"):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        killed = subprocess.run([STRACE, "-f", "-qq", "-o", os.devnull, "-e", f"trace={name}",
                                 "-e", f"inject={name}:signal=KILL:when={n}",
                                 *checkpointed(syslm_bin, ck)], capture_output=True)
        assert killed.returncode != 0, what + ": the run was not killed"
        out = tmp_path / "resumed.gguf"
        if out.exists():
            out.unlink()
        resumed = subprocess.run(resume_cmd(syslm_bin, ck, out), capture_output=True, text=True)
        if resumed.returncode == 0:
            got, _ = read_gguf(out)
            assert got.keys() == want.keys(), what
            for t in want:
                assert np.array_equal(got[t], want[t]), f"{what}: {t} differs after the resume"
        else:
            assert "no checkpoint there" in resumed.stderr, f"{what}:\n{resumed.stderr}"
            assert not any((tmp_path / f"ck{s}" / "state.bin").exists() for s in ("", ".old")), \
                f"{what}: a complete checkpoint was left but not resumed:\n{resumed.stderr}"
        fresh = subprocess.run(checkpointed(syslm_bin, ck), capture_output=True, text=True)
        assert fresh.returncode == 0, f"{what}: a new run with --checkpoint failed:\n{fresh.stderr}"
        assert sorted(p.name for p in tmp_path.glob("ck*")) == ["ck"], what


@pytest.fixture
def checkpoint(syslm_bin, tmp_path):
    ck = tmp_path / "ck"
    subprocess.run(checkpointed(syslm_bin, ck), check=True, capture_output=True)
    return ck


def resume_fails(syslm_bin, ck, tmp_path, *patterns):
    proc = subprocess.run(resume_cmd(syslm_bin, ck, tmp_path / "r.gguf"), capture_output=True,
                          text=True)
    assert proc.returncode == 1, proc.stderr
    for p in patterns:
        assert p in proc.stderr, proc.stderr
    return proc


def test_a_changed_byte_of_the_state_is_refused(syslm_bin, tmp_path, checkpoint):
    state = checkpoint / "state.bin"
    data = bytearray(state.read_bytes())
    data[len(data) // 2] ^= 0x40
    state.write_bytes(bytes(data))
    resume_fails(syslm_bin, checkpoint, tmp_path, str(state), "checksum mismatch")


def rewrite_with_checksum(path, data):
    """The file with its trailing checksum recomputed (FNV-1a over 64-bit words, then bytes)."""
    h, prime, mask = 0xcbf29ce484222325, 0x100000001b3, (1 << 64) - 1
    words = len(data) // 8
    for (w,) in struct.iter_unpack("<Q", data[: 8 * words]):
        h = ((h ^ w) * prime) & mask
    for b in data[8 * words:]:
        h = ((h ^ b) * prime) & mask
    path.write_bytes(bytes(data) + struct.pack("<Q", h))


def test_nan_moments_are_refused_even_with_a_valid_checksum(syslm_bin, tmp_path, checkpoint):
    state = checkpoint / "state.bin"
    data = bytearray(state.read_bytes()[:-8])
    # magic, version, step, optimizer step, then the first moment: a u64 count and its floats.
    (count,) = struct.unpack_from("<Q", data, 24)
    assert count > 100
    for i in range(64):
        struct.pack_into("<f", data, 32 + 4 * (7 * i + 3), float("nan"))
    rewrite_with_checksum(state, data)
    resume_fails(syslm_bin, checkpoint, tmp_path, str(state), "first moment holds nan")


def test_a_model_that_is_not_the_states_is_refused(syslm_bin, tmp_path, checkpoint):
    other = tmp_path / "other"
    subprocess.run(syslm_cmd(syslm_bin, "train", *MODEL, *RUN[:-4], "--seed", "6", "-t", "1",
                             "--checkpoint", other, "--checkpoint-every", 2),
                   check=True, capture_output=True)
    shutil.copy(other / "model.gguf", checkpoint / "model.gguf")
    resume_fails(syslm_bin, checkpoint, tmp_path, "not the model written with")


def test_resume_of_nothing_says_so(syslm_bin, tmp_path):
    resume_fails(syslm_bin, tmp_path / "absent", tmp_path, "no checkpoint there")
