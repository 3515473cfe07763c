"""GGUF interoperability with llama.cpp's own Python package (PyPI `gguf`).

1. Files written by gguf-py's GGUFWriter (every metadata value type, nested arrays, tensors of
   several types, quantized with gguf.quants) are read by `syslm info --json`; keys, types,
   values, shapes, tensor types, offsets and sizes must match what was written and what
   gguf-py's GGUFReader sees.
2. The same files copied through syslm's reader and writer (the GoogleTest helper
   GGUFInterop.CopyThroughReaderAndWriter) are read back with GGUFReader: every field and every
   tensor byte must be unchanged, and the bytes must equal gguf-py's own file.
3. Malformed files give exit code 1 and one error line naming the file.
4. Huge metadata arrays (100 MB of u8, 20 MB of strings) cost `syslm info` less than 2x the file
   size in peak RSS, in text and JSON (issue 17).
"""
import json
import math
import os
import pathlib
import struct
import subprocess
import sys

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT

REPO = pathlib.Path(__file__).resolve().parents[2]

# key -> (gguf-py value, value type, array element type or None)
SCALARS = {
    "test.u8": (250, VT.UINT8),
    "test.i8": (-100, VT.INT8),
    "test.u16": (65000, VT.UINT16),
    "test.i16": (-32000, VT.INT16),
    "test.u32": (4_000_000_000, VT.UINT32),
    "test.i32": (-2_000_000_000, VT.INT32),
    "test.u64": (18_000_000_000_000_000_000, VT.UINT64),
    "test.i64": (-9_000_000_000_000_000_000, VT.INT64),
    "test.f32": (0.1, VT.FLOAT32),
    "test.f32.tiny": (1.5e-42, VT.FLOAT32),
    "test.f64": (-1.0e300, VT.FLOAT64),
    "test.bool.t": (True, VT.BOOL),
    "test.bool.f": (False, VT.BOOL),
    "test.str": ("Grüße, 世界 🌍 \"quoted\"\n", VT.STRING),
}


def arrays(rng):
    return {
        "arr.u8": ([int(x) for x in rng.integers(0, 256, 37)], VT.UINT8),
        "arr.i8": ([int(x) for x in rng.integers(-128, 128, 5)], VT.INT8),
        "arr.u16": ([int(x) for x in rng.integers(0, 65536, 7)], VT.UINT16),
        "arr.i16": ([int(x) for x in rng.integers(-32768, 32768, 3)], VT.INT16),
        "arr.u32": ([int(x) for x in rng.integers(0, 2**32, 11, dtype=np.uint64)], VT.UINT32),
        "arr.i32": ([int(x) for x in rng.integers(-2**31, 2**31, 13)], VT.INT32),
        "arr.u64": ([int(x) for x in rng.integers(0, 2**63, 3, dtype=np.uint64)] + [2**64 - 1], VT.UINT64),
        "arr.i64": ([int(x) for x in rng.integers(-2**63, 2**63 - 1, 4, dtype=np.int64)], VT.INT64),
        "arr.f32": ([float(x) for x in rng.standard_normal(17).astype(np.float32)], VT.FLOAT32),
        "arr.f64": ([float(x) for x in rng.standard_normal(9) * 1e100], VT.FLOAT64),
        "arr.bool": ([bool(x) for x in rng.integers(0, 2, 6)], VT.BOOL),
        "arr.str": (["<s>", "▁the", "a b", "\u00ff\u0100", "x" * 300], VT.STRING),
        # Arrays of arrays: gguf-py infers the inner element type (str, int -> i32, float -> f32).
        "arr.nested.str": ([["a", "bc"], ["", "d", "e"]], VT.ARRAY),
        "arr.nested.i32": ([[1, -2, 3], [4]], VT.ARRAY),
        "arr.nested.deep": ([[[1.5, 2.5]], [[-1.0]]], VT.ARRAY),
    }


def tensors(rng):
    """name -> (numpy data as gguf-py takes it, GGML type, ne in GGML order)."""
    out = {}
    f32 = rng.standard_normal((3, 7)).astype(np.float32)
    out["token_embd.weight"] = (f32, QT.F32, [7, 3])
    f16 = rng.standard_normal((2, 5, 3)).astype(np.float16)
    out["blk.0.attn_q.weight"] = (f16, QT.F16, [3, 5, 2])
    w = rng.standard_normal((5, 96)).astype(np.float32)
    out["blk.0.ffn_up.weight"] = (gguf.quants.quantize(w, QT.Q8_0), QT.Q8_0, [96, 5])
    w = rng.standard_normal((3, 64)).astype(np.float32)
    out["blk.0.ffn_down.weight"] = (gguf.quants.quantize(w, QT.Q4_0), QT.Q4_0, [64, 3])
    w = rng.standard_normal((2, 32)).astype(np.float32)
    out["blk.0.attn_k.weight"] = (gguf.quants.quantize(w, QT.Q5_1), QT.Q5_1, [32, 2])
    w = rng.standard_normal((1, 9)).astype(np.float32)
    out["blk.0.attn_norm.weight"] = (gguf.quants.quantize(w, QT.BF16), QT.BF16, [9, 1])
    out["positions"] = (rng.integers(-1000, 1000, (2, 1, 3)).astype(np.int32), QT.I32, [3, 1, 2])
    return out


def write_with_gguf_py(path, alignment=None, seed=0):
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment:
        w.add_custom_alignment(alignment)
    expected = {"general.architecture": ("llama", VT.STRING, None)}
    if alignment:
        expected["general.alignment"] = (alignment, VT.UINT32, None)
    for key, (val, vt) in SCALARS.items():
        w.add_key_value(key, val, vt)
        expected[key] = (val, vt, None)
    for key, (val, sub) in arrays(rng).items():
        w.add_key_value(key, val, VT.ARRAY, sub_type=sub)
        expected[key] = (val, VT.ARRAY, sub)
    ts = tensors(rng)
    for name, (data, qt, _) in ts.items():
        if qt in (QT.F32, QT.F16):
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, data, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return expected, ts


VT_NAMES = {VT.UINT8: "u8", VT.INT8: "i8", VT.UINT16: "u16", VT.INT16: "i16", VT.UINT32: "u32",
            VT.INT32: "i32", VT.FLOAT32: "f32", VT.BOOL: "bool", VT.STRING: "string",
            VT.ARRAY: "array", VT.UINT64: "u64", VT.INT64: "i64", VT.FLOAT64: "f64"}


def same_value(got, want, vt):
    """Compares a JSON value from syslm with what was written (f32 compared at f32 precision)."""
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(
            same_value(g, x, vt) for g, x in zip(got, want))
    if isinstance(want, float):
        if vt == VT.FLOAT32 or (vt == VT.ARRAY):
            return np.float32(got) == np.float32(want)
        return got == want
    if isinstance(want, bool):
        return got is want
    return got == want


@pytest.fixture
def info_json(run_syslm):
    def run(path):
        return json.loads(run_syslm("info", "--json", "-m", path).stdout)
    return run


@pytest.mark.parametrize("alignment", [None, 64])
def test_syslm_reads_gguf_py_files(tmp_path, info_json, alignment):
    path = tmp_path / "gguf_py.gguf"
    expected, ts = write_with_gguf_py(path, alignment, seed=1 + (alignment or 0))
    info = info_json(path)
    reader = gguf.GGUFReader(str(path))

    assert info["version"] == 3
    assert info["alignment"] == (alignment or 32)
    assert info["file_size"] == path.stat().st_size
    assert info["data_offset"] == reader.data_offset

    # Metadata: same keys in the same order as gguf-py's reader, with the written types/values.
    reader_keys = [k for k in reader.fields if not k.startswith("GGUF.")]
    assert [m["key"] for m in info["metadata"]] == reader_keys
    assert set(reader_keys) == set(expected)
    for m in info["metadata"]:
        val, vt, sub = expected[m["key"]]
        assert m["type"] == VT_NAMES[vt], m["key"]
        if vt == VT.ARRAY:
            assert m["array_type"] == VT_NAMES[sub], m["key"]
            assert m["count"] == len(val)
            if sub == VT.FLOAT64:
                assert m["value"] == val, m["key"]
            else:
                assert same_value(m["value"], val, VT.ARRAY), (m["key"], m["value"], val)
        else:
            assert same_value(m["value"], val, vt), (m["key"], m["value"], val)
            if vt != VT.STRING:
                assert same_value(m["value"], reader.fields[m["key"]].contents(), vt)

    # Tensors: names, types, shapes (GGML order), absolute offsets, sizes.
    assert [t["name"] for t in info["tensors"]] == list(ts)
    by_name = {t.name: t for t in reader.tensors}
    for t in info["tensors"]:
        _, qt, ne = ts[t["name"]]
        rt = by_name[t["name"]]
        assert t["type"] == qt.name
        assert t["shape"] == ne == [int(d) for d in rt.shape]
        assert t["elements"] == int(rt.n_elements)
        assert t["bytes"] == int(rt.n_bytes)
        assert t["file_offset"] == int(rt.data_offset)
        assert t["file_offset"] % (alignment or 32) == 0
    assert info["totals"]["tensors"] == len(ts)
    assert info["totals"]["parameters"] == sum(int(t.n_elements) for t in reader.tensors)
    assert info["totals"]["bytes"] == sum(int(t.n_bytes) for t in reader.tensors)


def io_test_binary():
    build = pathlib.Path(os.environ.get("SYSLM_BUILD_DIR", REPO / "build"))
    path = build / "tests" / "syslm_io_tests"
    if not path.exists():
        pytest.fail(f"{path} not found: build the tests first (cmake --build build)")
    return path


def field_value(field):
    """A ReaderField's value with its element type: comparable across two files."""
    return [int(t) for t in field.types], [np.asarray(field.parts[i]).tobytes() for i in field.data]


@pytest.mark.parametrize("alignment", [None, 64])
def test_gguf_py_reads_syslm_files(tmp_path, alignment):
    src = tmp_path / "gguf_py.gguf"
    dst = tmp_path / "syslm.gguf"
    write_with_gguf_py(src, alignment, seed=7)
    env = dict(os.environ, SYSLM_GGUF_COPY_IN=str(src), SYSLM_GGUF_COPY_OUT=str(dst))
    proc = subprocess.run([str(io_test_binary()), "--gtest_filter=GGUFInterop.CopyThroughReaderAndWriter"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert dst.exists()

    a = gguf.GGUFReader(str(src))
    b = gguf.GGUFReader(str(dst))
    assert list(a.fields) == list(b.fields)
    for key in a.fields:
        if key.startswith("GGUF."):
            continue
        assert field_value(a.fields[key]) == field_value(b.fields[key]), key
    assert b.alignment == (alignment or 32)
    assert [t.name for t in a.tensors] == [t.name for t in b.tensors]
    for ta, tb in zip(a.tensors, b.tensors):
        assert ta.tensor_type == tb.tensor_type, ta.name
        assert list(ta.shape) == list(tb.shape), ta.name
        assert tb.data_offset % (alignment or 32) == 0
        assert np.asarray(ta.data).tobytes() == np.asarray(tb.data).tobytes(), ta.name
    # syslm lays the file out exactly as llama.cpp's writer does.
    assert src.read_bytes() == dst.read_bytes()


def test_bad_files_exit_1_with_one_error(tmp_path, run_syslm):
    good = tmp_path / "good.gguf"
    write_with_gguf_py(good)
    data = good.read_bytes()
    cases = {
        "truncated.gguf": (data[: len(data) // 3], "truncated"),
        "magic.gguf": (b"GGML" + data[4:], "bad magic"),
        "version.gguf": (data[:4] + (7).to_bytes(4, "little") + data[8:], "unsupported GGUF version 7"),
        "short_data.gguf": (data[:-200], "beyond the end of the file"),
    }
    for name, (blob, msg) in cases.items():
        path = tmp_path / name
        path.write_bytes(blob)
        proc = run_syslm("info", "-m", path, check=False)
        assert proc.returncode == 1, name
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr
        assert str(path) in lines[0] and msg in lines[0], lines[0]


def test_info_on_vocab_file(run_syslm, vocab_dir):
    path = vocab_dir / "ggml-vocab-gpt-2.gguf"
    text = run_syslm("info", "-m", path).stdout
    assert "tokenizer.ggml.tokens" in text and "string[50257]" in text and "50249 more" in text
    info = json.loads(run_syslm("info", "--json", "--max-items", "3", "-m", path).stdout)
    tokens = next(m for m in info["metadata"] if m["key"] == "tokenizer.ggml.tokens")
    assert tokens["count"] == 50257 and tokens["value"] == ["!", '"', "#"]
    assert info["tensors"] == [] and info["totals"]["parameters"] == 0
    reader = gguf.GGUFReader(str(path))
    assert [m["key"] for m in info["metadata"]] == [k for k in reader.fields if not k.startswith("GGUF.")]


# --- Issue 17: metadata must not cost many times the file size -------------------------------
# A GGUF holding one huge metadata array used to take 72 bytes of memory per element (7.1 GB of
# RSS for a 100 MB u8 array). Arrays are now views of the mapped file: `syslm info` must stay
# below 2x the file size in peak RSS (mapped pages that are read count too), in text and JSON.

BIG_U8 = 100_000_000
BIG_STRINGS_BYTES = 20_000_000


def write_big_array_gguf(path, key, elem_type, count, chunks):
    """A GGUF v3 file with no tensors and one array key; `chunks` yields the encoded elements."""
    with open(path, "wb") as f:
        f.write(struct.pack("<4sIQQ", b"GGUF", 3, 0, 2))
        k = b"general.architecture"
        f.write(struct.pack("<Q", len(k)) + k + struct.pack("<IQ", int(VT.STRING), 5) + b"llama")
        k = key.encode()
        f.write(struct.pack("<Q", len(k)) + k + struct.pack("<IIQ", int(VT.ARRAY), int(elem_type), count))
        for chunk in chunks:
            f.write(chunk)


def u8_chunks(n):
    block = bytes(range(256)) * 4096  # 1 MiB
    while n > 0:
        f = block[: min(n, len(block))]
        yield f
        n -= len(f)


def token(i):
    return b"tok" + str(i).encode() + b"x" * (i % 9)


def string_chunks(count):
    for start in range(0, count, 100_000):
        yield b"".join(struct.pack("<Q", len(t)) + t
                       for t in map(token, range(start, min(count, start + 100_000))))


@pytest.fixture(scope="module")
def big_u8_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("big") / "u8_array.gguf"
    write_big_array_gguf(path, "test.big_u8", VT.UINT8, BIG_U8, u8_chunks(BIG_U8))
    yield path
    path.unlink()


@pytest.fixture(scope="module")
def big_strings_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("big") / "strings_array.gguf"
    # Each string takes 8 bytes of length + 4..19 bytes: about 1.3 M strings for 20 MB.
    count, size = 0, 0
    while size < BIG_STRINGS_BYTES:
        size += 8 + len(token(count))
        count += 1
    write_big_array_gguf(path, "test.big_strings", VT.STRING, count, string_chunks(count))
    yield path, count
    path.unlink()


# The child's address space is capped so that a regression fails with an allocation error
# instead of taking the machine's memory (the old code needed ~72x the file size).
ADDRESS_SPACE_LIMIT = 4 << 30

PEAK_RSS_RUNNER = """
import resource, subprocess, sys
def cap():
    resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]), int(sys.argv[1])))
with open(sys.argv[2], "wb") as out:
    rc = subprocess.run(sys.argv[3:], stdout=out, preexec_fn=cap).returncode
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, rc)
"""


def peak_rss(cmd, stdout_path):
    """Runs cmd in a fresh process (stdout to stdout_path) and returns (peak RSS in bytes, exit
    code, stderr): RUSAGE_CHILDREN of a wrapper process that has no other children."""
    proc = subprocess.run([sys.executable, "-c", PEAK_RSS_RUNNER, str(ADDRESS_SPACE_LIMIT),
                           str(stdout_path), *map(str, cmd)],
                          capture_output=True, text=True, timeout=600)
    rss, rc = proc.stdout.split()
    return int(rss), int(rc), proc.stderr


@pytest.mark.parametrize("args", [["--no-tensors"], ["--json"]], ids=["text", "json"])
def test_info_on_100mb_u8_array_stays_below_2x_file_size(syslm_bin, big_u8_file, tmp_path, args):
    size = big_u8_file.stat().st_size
    out = tmp_path / "out.txt"
    # --json prints every element by default: 10^8 of them are streamed, never built in memory.
    rss, rc, err = peak_rss([syslm_bin, "info", "-m", big_u8_file, *args], os.devnull)
    assert rc == 0, f"syslm info {' '.join(args)} exited {rc}: {err}"
    assert rss < 2 * size, f"peak RSS {rss / 2**20:.1f} MiB for a {size / 2**20:.1f} MiB file"
    # What it shows is right.
    rss, rc, err = peak_rss([syslm_bin, "info", "-m", big_u8_file, "--max-items", "5", *args], out)
    assert rc == 0 and rss < 2 * size, (rc, rss, err)
    if "--json" in args:
        info = json.loads(out.read_text())
        (m,) = [m for m in info["metadata"] if m["key"] == "test.big_u8"]
        assert m["type"] == "array" and m["array_type"] == "u8" and m["count"] == BIG_U8
        assert m["value"] == [0, 1, 2, 3, 4]
    else:
        text = out.read_text()
        assert f"u8[{BIG_U8}]" in text
        assert f"[0, 1, 2, 3, 4, ... {BIG_U8 - 5} more]" in text


@pytest.mark.parametrize("args", [["--no-tensors"], ["--json"]], ids=["text", "json"])
def test_info_on_20mb_strings_array_stays_below_2x_file_size(syslm_bin, big_strings_file, tmp_path,
                                                              args):
    path, count = big_strings_file
    size = path.stat().st_size
    out = tmp_path / "out.txt"
    rss, rc, err = peak_rss([syslm_bin, "info", "-m", path, *args], out)
    assert rc == 0, f"syslm info {' '.join(args)} exited {rc}: {err}"
    assert rss < 2 * size, f"peak RSS {rss / 2**20:.1f} MiB for a {size / 2**20:.1f} MiB file"
    if "--json" in args:
        # Every string, in order (the default for --json is all elements).
        info = json.loads(out.read_text())
        (m,) = [m for m in info["metadata"] if m["key"] == "test.big_strings"]
        assert m["array_type"] == "string" and m["count"] == count and len(m["value"]) == count
        assert m["value"][0] == "tok0" and m["value"][-1] == token(count - 1).decode()
    else:
        text = out.read_text()
        assert f"string[{count}]" in text and f'["tok0", "tok1x", "tok2xx", ' in text
        assert f"... {count - 8} more]" in text
