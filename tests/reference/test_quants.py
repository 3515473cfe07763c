"""`syslm quantize` against llama.cpp's gguf-py (PyPI `gguf`).

A small llama-style GGUF of F32 weight-like tensors (written by gguf-py's own GGUFWriter) is
quantized to every target type, read back with gguf-py, and checked:
  * tensor types follow llama-quantize's default rules (1-D tensors and the MoE router stay F32,
    output.weight -> Q6_K, fallbacks for rows that do not fit a block);
  * blocks of the types gguf-py can quantize (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, BF16, F16) are
    bit-identical to gguf.quants.quantize;
  * gguf-py has no K-quant quantizer, so for Q2_K..Q6_K: gguf.quants.dequantize of syslm's blocks
    equals syslm's own dequantization (`syslm quantize OUT back.gguf F32`) exactly, and the
    quantization RMSE is no worse than a straightforward round-to-nearest K-quantizer written
    here in numpy under the same format constraints.
"""
import pathlib
import subprocess

import gguf
import numpy as np
import pytest

Q = gguf.GGMLQuantizationType
RNG_SEED = 20240611

# name -> numpy shape (rows, cols); GGUF stores ne = (cols, rows). Row counts are awkward on
# purpose; "odd" (96 columns) fits 32-blocks but not 256-blocks, "odder" (100) fits neither.
SHAPES = {
    "token_embd.weight": (37, 512),
    "blk.0.attn_norm.weight": (512,),
    "blk.0.attn_q.weight": (29, 768),
    "blk.0.attn_q.bias": (29,),
    "blk.0.attn_v.weight": (1, 256),  # [256, 1]: one row, so 1-D for the rules
    "blk.0.ffn_gate_inp.weight": (8, 512),
    "blk.0.ffn_down.weight": (45, 1024),
    "blk.1.attn_k.weight": (19, 256),
    "blk.1.odd.weight": (13, 96),
    "blk.1.odder.weight": (7, 100),
    "output_norm.weight": (512,),
    "output.weight": (41, 512),
}

LEGACY = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"}
K_QUANTS = ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
TARGETS = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", *K_QUANTS, "F16", "BF16"]
LLAMA_FTYPE = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9,
               "Q2_K": 10, "Q3_K": 11, "Q4_K": 14, "Q5_K": 16, "Q6_K": 18, "BF16": 32}
K_FALLBACK = {"Q2_K": "Q4_0", "Q3_K": "Q4_0", "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}


def weight_like(rng: np.random.Generator, shape) -> np.ndarray:
    """Normal weights with per-row scales, rare large outliers, an all-negative row and a row
    with one huge value."""
    x = rng.normal(0.0, 1.0, size=shape).astype(np.float32)
    if len(shape) == 1:
        return (1.0 + 0.1 * x).astype(np.float32)  # norm-like
    x *= rng.uniform(0.01, 0.04, size=(shape[0], 1)).astype(np.float32)
    outliers = rng.random(size=shape) < 0.002
    x[outliers] *= 15.0
    if shape[0] > 3:
        x[1] = -np.abs(x[1]) - 0.003
        x[2, shape[1] // 3] = 0.9
    return x.astype(np.float32)


def expected_type(name: str, shape, target: str) -> str:
    """llama-quantize's default type choice for our test tensors (see quantize_model.hpp)."""
    if len(shape) == 1 or shape[0] == 1 or "ffn_gate_inp" in name:
        return "F32"
    cols = shape[1]
    t = target
    if target not in ("F16", "BF16", "F32") and name == "output.weight":
        t = "Q8_0" if target == "Q8_0" else "Q6_K"
    if target == "Q2_K" and "ffn_down" in name:  # llama.cpp's Q2_K mix
        t = "Q3_K"
    block = gguf.GGML_QUANT_SIZES[Q[t]][0]
    if cols % block:
        t = K_FALLBACK.get(t, "F16")
        if cols % gguf.GGML_QUANT_SIZES[Q[t]][0]:
            t = "F16"
    return t


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> tuple[pathlib.Path, dict]:
    rng = np.random.default_rng(RNG_SEED)
    tensors = {name: weight_like(rng, shape) for name, shape in SHAPES.items()}
    path = tmp_path_factory.mktemp("quants") / "model-f32.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_string("test.marker", "kept by quantize")
    w.add_array("test.array", [3, 1, 4, 1, 5])
    for name, data in tensors.items():
        w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, tensors


def read(path: pathlib.Path) -> tuple[dict, gguf.GGUFReader]:
    r = gguf.GGUFReader(str(path))
    return {t.name: t for t in r.tensors}, r


def field(reader: gguf.GGUFReader, key: str):
    f = reader.get_field(key)
    assert f is not None, f"missing key {key}"
    return f.contents()


def raw_blocks(t) -> np.ndarray:
    """The stored bytes of a tensor as (rows, row_bytes) uint8."""
    data = np.asarray(t.data)
    rows = int(np.prod(t.shape[1:])) if len(t.shape) > 1 else 1
    return data.view(np.uint8).reshape(rows, -1)


@pytest.fixture(scope="module")
def quantized(model, tmp_path_factory, syslm_bin):
    """Runs syslm quantize for every target once; returns {target: (path, stdout)}."""
    src, _ = model
    out = {}
    d = tmp_path_factory.mktemp("quantized")
    for target in TARGETS:
        dst = d / f"model-{target.lower()}.gguf"
        proc = subprocess.run([str(syslm_bin), "quantize", str(src), str(dst), target,
                               "--threads", "3"], capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"syslm quantize {target} failed:\n{proc.stderr}"
        out[target] = (dst, proc.stdout)
    return out


@pytest.mark.parametrize("target", TARGETS)
def test_types_metadata_and_bit_identity(target, model, quantized):
    _, tensors = model
    path, stdout = quantized[target]
    out, reader = read(path)
    assert field(reader, "general.file_type") == LLAMA_FTYPE[target]
    assert field(reader, "general.quantization_version") == 2
    assert field(reader, "test.marker") == "kept by quantize"
    assert list(field(reader, "test.array")) == [3, 1, 4, 1, 5]
    assert field(reader, "general.architecture") == "llama"
    assert set(out) == set(tensors)
    for name, x in tensors.items():
        t = out[name]
        want = expected_type(name, x.shape, target)
        assert t.tensor_type.name == want, f"{target}: {name} is {t.tensor_type.name}, want {want}"
        assert [int(v) for v in t.shape] == list(reversed(x.shape))
        if want == "F32":
            np.testing.assert_array_equal(np.asarray(t.data).reshape(x.shape), x)
        elif want in LEGACY or want in ("F16", "BF16"):
            ref = gguf.quants.quantize(x, Q[want])
            got = raw_blocks(t)
            ref_bytes = np.ascontiguousarray(ref).view(np.uint8).reshape(got.shape)
            mismatch = np.flatnonzero((got != ref_bytes).any(axis=1))
            assert mismatch.size == 0, (f"{target}: {name} ({want}) rows {mismatch[:8]} differ "
                                        "from gguf.quants.quantize")
    assert "quantized" in stdout and "MiB" in stdout


# ---- K-quants: dequantization identity and RMSE against a numpy reference quantizer -----------

def f16(v: np.ndarray) -> np.ndarray:
    return np.asarray(v, dtype=np.float32).astype(np.float16).astype(np.float32)


def ref_asymmetric(x: np.ndarray, sub: int, nmax: int, smax: int) -> np.ndarray:
    """Round-to-nearest K-quant with a min (Q2_K: sub 16, levels 0..3, 4-bit scales/mins;
    Q4_K/Q5_K: sub 32, levels 0..15/0..31, 6-bit scales/mins): x ~ d*sc*l - dmin*m."""
    sb = x.reshape(-1, 256 // sub, sub)
    lo = np.minimum(sb.min(axis=2), 0.0)          # the format subtracts a non-negative min
    hi = sb.max(axis=2)
    scale = (hi - lo) / nmax
    off = -lo
    d = f16(scale.max(axis=1, keepdims=True) / smax)
    dmin = f16(off.max(axis=1, keepdims=True) / smax)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.clip(np.where(d > 0, np.rint(scale / d), 0), 0, smax)
        m = np.clip(np.where(dmin > 0, np.rint(off / dmin), 0), 0, smax)
        step = (d * sc)[..., None]
        mn = (dmin * m)[..., None]
        lev = np.clip(np.where(step > 0, np.rint((sb + mn) / step), 0), 0, nmax)
    return (step * lev - mn).astype(np.float32).reshape(x.shape)


def ref_symmetric(x: np.ndarray, sub: int, nmax: int, smax: int) -> np.ndarray:
    """Round-to-nearest symmetric K-quant (Q3_K: sub 16, levels -4..3, 6-bit signed scales;
    Q6_K: sub 16, levels -32..31, 8-bit signed scales): x ~ d*sc*l."""
    sb = x.reshape(-1, 256 // sub, sub)
    idx = np.abs(sb).argmax(axis=2)[..., None]
    extreme = np.take_along_axis(sb, idx, axis=2)[..., 0]
    scale = extreme / -nmax                          # the extreme maps to level -nmax
    d = f16(np.abs(scale).max(axis=1, keepdims=True) / smax)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.clip(np.where(d > 0, np.rint(scale / d), 0), -smax - 1, smax)
        step = (d * sc)[..., None]
        lev = np.clip(np.where(step != 0, np.rint(sb / step), 0), -nmax, nmax - 1)
    return (step * lev).astype(np.float32).reshape(x.shape)


REFERENCE = {
    "Q2_K": lambda x: ref_asymmetric(x, 16, 3, 15),
    "Q3_K": lambda x: ref_symmetric(x, 16, 4, 31),
    "Q4_K": lambda x: ref_asymmetric(x, 32, 15, 63),
    "Q5_K": lambda x: ref_asymmetric(x, 32, 31, 63),
    "Q6_K": lambda x: ref_symmetric(x, 16, 32, 127),
}


def rmse(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sqrt(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)))


@pytest.fixture(scope="module")
def expanded(quantized, tmp_path_factory, syslm_bin):
    """syslm's own dequantization of each K-quant file: quantize it again to F32."""
    d = tmp_path_factory.mktemp("expanded")
    out = {}
    for target in K_QUANTS:
        back = d / f"back-{target.lower()}.gguf"
        proc = subprocess.run([str(syslm_bin), "quantize", str(quantized[target][0]), str(back),
                               "F32"], capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"syslm quantize back to F32 failed:\n{proc.stderr}"
        out[target] = read(back)[0]
    return out


@pytest.mark.parametrize("target", K_QUANTS)
def test_k_quants_dequantize_like_gguf_py_and_beat_reference(target, model, quantized, expanded):
    _, tensors = model
    out, _ = read(quantized[target][0])
    back = expanded[target]
    checked = 0
    for name, x in tensors.items():
        t = out[name]
        if t.tensor_type.name not in K_QUANTS:
            continue
        kind = t.tensor_type.name
        theirs = gguf.quants.dequantize(raw_blocks(t), t.tensor_type).reshape(x.shape)
        ours = np.asarray(back[name].data).reshape(x.shape)
        assert back[name].tensor_type == Q.F32
        np.testing.assert_array_equal(ours, theirs, err_msg=f"{target}: {name} ({kind})")
        checked += 1
    assert checked >= 4  # every K-quant matrix plus output.weight (Q6_K)

    # RMSE over all matrices of the target type, against the round-to-nearest reference.
    xs = [x for n, x in tensors.items() if out[n].tensor_type.name == target]
    ours = np.concatenate([np.asarray(back[n].data).ravel() for n, x in tensors.items()
                           if out[n].tensor_type.name == target])
    ref = np.concatenate([REFERENCE[target](x).ravel() for x in xs])
    orig = np.concatenate([x.ravel() for x in xs])
    e_ours, e_ref = rmse(orig, ours), rmse(orig, ref)
    print(f"\n{target}: RMSE syslm {e_ours:.6e}  numpy round-to-nearest {e_ref:.6e}  "
          f"ratio {e_ours / e_ref:.4f}")
    assert e_ours <= e_ref, f"{target}: syslm RMSE {e_ours} worse than reference {e_ref}"


def test_threads_do_not_change_output(model, tmp_path, run_syslm):
    src, _ = model
    one, four = tmp_path / "one.gguf", tmp_path / "four.gguf"
    run_syslm("quantize", src, one, "q4_k", "--threads", "1")
    run_syslm("quantize", src, four, "Q4_K", "-t", "4")
    assert one.read_bytes() == four.read_bytes()


def test_requantize_quantized_input(model, quantized, tmp_path, run_syslm):
    """A Q8_0 model requantized to Q4_0 equals quantizing its dequantized weights (gguf-py)."""
    _, tensors = model
    dst = tmp_path / "q4_0-from-q8_0.gguf"
    run_syslm("quantize", quantized["Q8_0"][0], dst, "Q4_0")
    src_out, _ = read(quantized["Q8_0"][0])
    out, _ = read(dst)
    t = out["blk.0.ffn_down.weight"]
    assert t.tensor_type == Q.Q4_0
    deq = gguf.quants.dequantize(raw_blocks(src_out["blk.0.ffn_down.weight"]), Q.Q8_0)
    ref = gguf.quants.quantize(deq.reshape(SHAPES["blk.0.ffn_down.weight"]), Q.Q4_0)
    assert np.array_equal(raw_blocks(t), np.asarray(ref).reshape(raw_blocks(t).shape))
    # output.weight was Q8_0 (target Q8_0 keeps it); for Q4_0 it becomes Q6_K.
    assert out["output.weight"].tensor_type == Q.Q6_K


def test_bad_inputs_give_clear_errors(model, tmp_path, run_syslm):
    src, _ = model
    proc = run_syslm("quantize", src, tmp_path / "x.gguf", "Q7_K", check=False)
    assert proc.returncode != 0 and "Q7_K" in proc.stderr and "Q4_0" in proc.stderr
    proc = run_syslm("quantize", src, tmp_path / "x.gguf", "Q8_K", check=False)
    assert proc.returncode != 0 and "Q8_K" in proc.stderr

    missing = tmp_path / "missing.gguf"
    proc = run_syslm("quantize", missing, tmp_path / "x.gguf", "Q4_0", check=False)
    assert proc.returncode != 0 and "missing.gguf" in proc.stderr

    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(src.read_bytes()[:1000])
    proc = run_syslm("quantize", truncated, tmp_path / "x.gguf", "Q4_0", check=False)
    assert proc.returncode != 0 and "truncated.gguf" in proc.stderr
    assert not (tmp_path / "x.gguf").exists()

    # A NaN in a weight matrix is reported with the tensor's name, and no output is written.
    w = gguf.GGUFWriter(str(tmp_path / "nan.gguf"), "llama")
    bad = np.ones((4, 64), dtype=np.float32)
    bad[2, 7] = np.nan
    w.add_tensor("blk.0.attn_q.weight", bad)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    proc = run_syslm("quantize", tmp_path / "nan.gguf", tmp_path / "y.gguf", "Q8_0", check=False)
    assert proc.returncode != 0 and "blk.0.attn_q.weight" in proc.stderr and "row 2" in proc.stderr
    assert not (tmp_path / "y.gguf").exists()


def write_gguf(path: pathlib.Path, arch: str, tensors: dict, expert_count: int = 0) -> None:
    w = gguf.GGUFWriter(str(path), arch)
    if expert_count:
        w.add_expert_count(expert_count)
    for name, data in tensors.items():
        w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("arch,expert_count,expect", [
    # Tied embeddings (no output.weight): token_embd gets the output rule. 8 experts: attn_v and
    # attn_k become Q8_0; 3-D expert tensors are quantized; the router stays F32.
    ("llama", 8, {"token_embd.weight": "Q6_K", "blk.0.attn_v.weight": "Q8_0",
                  "blk.0.attn_k.weight": "Q8_0", "blk.0.attn_q.weight": "Q4_K",
                  "blk.0.ffn_up_exps.weight": "Q4_K", "blk.0.ffn_gate_inp.weight": "F32",
                  "position_embd.weight": "F32"}),
    # Without experts attn_v/attn_k follow the target.
    ("llama", 0, {"token_embd.weight": "Q6_K", "blk.0.attn_v.weight": "Q4_K",
                  "blk.0.attn_k.weight": "Q4_K", "blk.0.ffn_up_exps.weight": "Q4_K"}),
    # Falcon keeps its output matrix at Q8_0; the embeddings are not tied there.
    ("falcon", 0, {"output.weight": "Q8_0", "token_embd.weight": "Q4_K",
                   "blk.0.attn_qkv.weight": "Q4_K"}),
])
def test_model_level_rules(arch, expert_count, expect, tmp_path, run_syslm):
    rng = np.random.default_rng(7)
    shapes = {"token_embd.weight": (33, 256), "blk.0.attn_v.weight": (16, 256),
              "blk.0.attn_k.weight": (16, 256), "blk.0.attn_q.weight": (16, 256),
              "blk.0.ffn_up_exps.weight": (8, 16, 256), "blk.0.ffn_gate_inp.weight": (8, 256),
              "position_embd.weight": (24, 256), "blk.0.attn_qkv.weight": (48, 256)}
    if arch == "falcon":
        shapes["output.weight"] = (33, 256)
    tensors = {n: weight_like(rng, s[-2:]) if len(s) == 2 else
               np.stack([weight_like(rng, s[1:]) for _ in range(s[0])]) for n, s in shapes.items()}
    src, dst, back = tmp_path / "in.gguf", tmp_path / "out.gguf", tmp_path / "back.gguf"
    write_gguf(src, arch, tensors, expert_count)
    run_syslm("quantize", src, dst, "Q4_K")
    out, _ = read(dst)
    for name, want in expect.items():
        assert out[name].tensor_type.name == want, f"{arch}/{expert_count}: {name}"
    for name, t in out.items():
        if t.tensor_type.name == "Q8_0":
            ref = np.asarray(gguf.quants.quantize(tensors[name], Q.Q8_0))
            assert np.array_equal(raw_blocks(t), ref.reshape(raw_blocks(t).shape)), name
    # The 3-D expert tensor decodes (gguf-py) to what syslm decodes, expert by expert.
    run_syslm("quantize", dst, back, "F32")
    exps = out["blk.0.ffn_up_exps.weight"]
    theirs = gguf.quants.dequantize(raw_blocks(exps), exps.tensor_type)
    ours = np.asarray(read(back)[0]["blk.0.ffn_up_exps.weight"].data)
    np.testing.assert_array_equal(ours.reshape(8, 16, 256), theirs.reshape(8, 16, 256))
