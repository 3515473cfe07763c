"""Importance matrices against llama.cpp's file formats (gguf-py from PyPI) and their effect.

* `syslm imatrix` writes llama.cpp's GGUF imatrix layout, read here with gguf-py;
* an imatrix written by gguf-py in that layout, and the same values in llama.cpp's legacy .dat
  layout, give byte-identical `syslm quantize --imatrix` outputs;
* calibration text given straight to `quantize --imatrix` equals `imatrix` then `quantize`;
* the weighted quantization lowers the importance-weighted error of every weight matrix
  (dequantized by gguf-py, not by syslm) compared with the plain quantizer, and most where the
  importance is concentrated.
"""
import struct
import subprocess

import gguf
import numpy as np
import pytest

TEXT = ("In the beginning God created the heaven and the earth. And the earth was without form, "
        "and void; and darkness was upon the face of the deep. ") * 40


@pytest.fixture(scope="module")
def model(tmp_path_factory, syslm_bin, vocab_dir):
    d = tmp_path_factory.mktemp("imatrix")
    path = d / "model.gguf"
    subprocess.run([str(syslm_bin), "init", "--vocab",
                    str(vocab_dir / "ggml-vocab-llama-spm.gguf"),
                    "--layers", "2", "--dim", "256", "--heads", "4", "--ff", "512", "--ctx", "256",
                    "--seed", "7", "-o", str(path)], check=True, capture_output=True)
    calib = d / "calib.txt"
    calib.write_text(TEXT)
    return d, path, calib


def run(syslm_bin, *args):
    p = subprocess.run([str(syslm_bin), *map(str, args)], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    return p.stdout


def tensors(path):
    return {t.name: t for t in gguf.GGUFReader(str(path)).tensors}


def test_imatrix_file_is_llama_cpp_layout(model, syslm_bin):
    d, path, calib = model
    out = d / "im.gguf"
    run(syslm_bin, "imatrix", "-m", path, "-f", calib, "-o", out, "-c", "64", "-t", "2")
    r = gguf.GGUFReader(str(out))
    assert r.get_field("general.type").contents() == "imatrix"
    assert r.get_field("imatrix.chunk_size").contents() == 64
    chunks = r.get_field("imatrix.chunk_count").contents()
    assert chunks >= 2
    assert r.get_field("imatrix.datasets").contents() == [str(calib)]
    t = tensors(out)
    sums = t["blk.0.ffn_down.weight.in_sum2"]
    counts = t["blk.0.ffn_down.weight.counts"]
    assert [int(v) for v in sums.shape] == [512, 1]  # ne = [n_in, n_mat]
    assert [int(v) for v in counts.shape] == [1, 1]
    assert float(np.asarray(counts.data).reshape(-1)[0]) == chunks * 64
    assert (np.asarray(sums.data) >= 0).all() and np.asarray(sums.data).sum() > 0
    for name in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up"):
        assert f"blk.1.{name}.weight.in_sum2" in t


def write_gguf_imatrix(path, values):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_string("general.type", "imatrix")
    w.add_array("imatrix.datasets", ["synthetic"])
    w.add_uint32("imatrix.chunk_count", 1)
    w.add_uint32("imatrix.chunk_size", 64)
    for name, v in values.items():
        w.add_tensor(name + ".in_sum2", (v * 4.0).astype(np.float32).reshape(1, -1))
        w.add_tensor(name + ".counts", np.array([[4.0]], dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_legacy_imatrix(path, values):
    """llama.cpp's .dat: entries of (name, ncall, nval, mean square * ncall), then the last
    chunk and the dataset name."""
    b = struct.pack("<i", len(values))
    for name, v in values.items():
        raw = name.encode()
        b += struct.pack("<i", len(raw)) + raw + struct.pack("<ii", 4, v.size)
        b += (v * 4.0).astype("<f4").tobytes()
    b += struct.pack("<i", 1) + struct.pack("<i", 9) + b"synthetic"
    path.write_bytes(b)


def concentrated_importance(rng, n):
    v = rng.uniform(0.01, 0.1, size=n).astype(np.float32)
    v[rng.choice(n, size=n // 32, replace=False)] = 50.0  # a few salient channels
    return v


@pytest.mark.parametrize("target", ["Q4_K", "Q2_K", "Q4_0", "Q6_K"])
def test_formats_agree_and_weighting_lowers_error(model, syslm_bin, target):
    d, path, _ = model
    src = tensors(path)
    rng = np.random.default_rng(11)
    names = [n for n in src if n.startswith("blk.") and n.endswith(".weight") and "norm" not in n]
    values = {n: concentrated_importance(rng, int(src[n].shape[0])) for n in names}
    g, dat = d / f"syn-{target}.gguf", d / f"syn-{target}.dat"
    write_gguf_imatrix(g, values)
    write_legacy_imatrix(dat, values)
    plain, via_gguf, via_dat = (d / f"{k}-{target}.gguf" for k in ("plain", "gguf", "dat"))
    run(syslm_bin, "quantize", path, plain, target, "-t", "2")
    log = run(syslm_bin, "quantize", path, via_gguf, target, "--imatrix", g, "-t", "2")
    run(syslm_bin, "quantize", path, via_dat, target, "--imatrix", dat, "-t", "2")
    assert "(imatrix)" in log or ", imatrix)" in log
    assert via_gguf.read_bytes() == via_dat.read_bytes()
    p, w = tensors(plain), tensors(via_gguf)
    gains = []
    for n in names:
        x = np.asarray(src[n].data, dtype=np.float32).reshape(-1, int(src[n].shape[0]))
        ep = gguf.quants.dequantize(p[n].data, p[n].tensor_type).reshape(x.shape) - x
        ew = gguf.quants.dequantize(w[n].data, w[n].tensor_type).reshape(x.shape) - x
        imp = values[n]
        err_p = float((ep.astype(np.float64) ** 2 * imp).sum())
        err_w = float((ew.astype(np.float64) ** 2 * imp).sum())
        assert err_w < err_p, f"{target} {n}: weighted error {err_w} >= plain {err_p}"
        gains.append(err_p / err_w)
    assert np.median(gains) > 1.5, gains


def test_calibration_text_equals_imatrix_then_quantize(model, syslm_bin):
    d, path, calib = model
    im = d / "im2.gguf"
    run(syslm_bin, "imatrix", "-m", path, "-f", calib, "-o", im, "-c", "64", "-t", "2")
    a, b, saved = d / "a.gguf", d / "b.gguf", d / "saved.gguf"
    run(syslm_bin, "quantize", path, a, "Q3_K_M", "--imatrix", im, "-t", "2")
    run(syslm_bin, "quantize", path, b, "Q3_K_M", "--imatrix", calib, "-c", "64",
        "--imatrix-out", saved, "-t", "2")
    assert a.read_bytes() == b.read_bytes()
    assert saved.exists()


def test_bad_imatrix_is_refused(model, syslm_bin, tmp_path):
    _, path, _ = model
    bad = tmp_path / "bad.gguf"
    w = gguf.GGUFWriter(str(bad), "llama")
    w.add_string("general.type", "imatrix")
    w.add_tensor("blk.0.attn_q.weight.in_sum2", np.ones((1, 100), dtype=np.float32))
    w.add_tensor("blk.0.attn_q.weight.counts", np.ones((1, 1), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    out = tmp_path / "out.gguf"
    p = subprocess.run([str(syslm_bin), "quantize", str(path), str(out), "Q4_K", "--imatrix",
                        str(bad)], capture_output=True, text=True)
    assert p.returncode != 0
    assert "blk.0.attn_q.weight" in p.stderr and "another model" in p.stderr
    assert not out.exists()
