"""`syslm bench --json`: llama-bench's fields, and decode's roofline against the read bandwidth
measured around the test (a shared machine's bandwidth drifts, so the probe's cached figure from
another hour is shown beside it, not used)."""
import json
import re

import pytest


@pytest.fixture(scope="module")
def small_model(syslm_bin, tmp_path_factory):
    import subprocess
    path = tmp_path_factory.mktemp("bench") / "m.gguf"
    proc = subprocess.run([str(syslm_bin), "init", "--vocab-size", "333", "--layers", "2", "--dim",
                           "96", "--heads", "3", "--ctx", "64", "-o", str(path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return path


def test_json_tests_and_rooflines(run_syslm, small_model):
    out = json.loads(run_syslm("bench", "-m", small_model, "-p", 13, "-n", 7, "-r", 2, "-t", 1,
                               "--json").stdout)
    assert [(t["n_prompt"], t["n_gen"]) for t in out] == [(13, 0), (0, 7)]
    for t in out:
        assert len(t["samples_ts"]) == 2
        assert t["avg_ts"] == pytest.approx(sum(t["samples_ts"]) / 2, rel=1e-9)
        assert t["roofline_fraction"] == pytest.approx(t["avg_ts"] / t["roofline_ts"], rel=1e-9)
    prefill, decode = out
    assert "matrix peaks" in prefill["roofline_basis"]
    # The decode roof's bandwidth is the one measured now, and the basis says which it is.
    assert decode["read_gbs"] > 0 and decode["read_gbs_probe"] > 0
    m = re.fullmatch(r"read bandwidth ([\d.]+) GB/s \(measured around the test\)",
                     decode["roofline_basis"])
    assert m and float(m.group(1)) == pytest.approx(decode["read_gbs"], abs=0.051)


def test_table_names_both_bandwidths(run_syslm, small_model):
    out = run_syslm("bench", "-m", small_model, "-p", 0, "-n", 5, "-r", 1, "-t", 1).stdout
    m = re.search(r"decode at ([\d.]+) GB/s read bandwidth \(measured just before and after the "
                  r"test; the probe's: ([\d.]+)\)", out)
    assert m, out
    assert float(m.group(1)) > 0 and float(m.group(2)) > 0
