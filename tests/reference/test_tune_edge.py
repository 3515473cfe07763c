"""`syslm tune edge`: a model split between a device and its cloud, packaged for a device profile.

- Every (split point, edge type, wire) point is reported with its memory, KL and times; the
  weights in the edge's memory are the embedding's and its layers' tensors in the edge's file
  (read with gguf-py).
- Under a memory limit between the points', the chosen point is within every limit and no point
  with more layers at the edge is; with a loose limit every layer goes to the edge.
- The plan serves: `serve --role edge --plan` with a cloud split at the plan's layer answers.
- A device too small for any point is a clear failure, a malformed profile a usage error.
"""
import json
import subprocess

import gguf
import pytest

from test_serve_openai import http, start_server
from test_tune import text


def tune_edge(syslm_bin, d, out, device, *extra):
    return subprocess.run(
        [str(syslm_bin), "tune", "edge", "-m", str(d / "model.gguf"), "--eval",
         str(d / "heldout.txt"), "--device", device, "--link", "20mbit,30ms", "--max-kl", "0.05",
         "--types", "F16,Q8_0,Q4_0", "-c", "256", "--eval-ctx", "64", "--eval-chunks", "3",
         "-t", "2", "-o", str(d / out), *map(str, extra)],
        capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def edge_dir(syslm_bin, tmp_path_factory):
    d = tmp_path_factory.mktemp("tune_edge")
    subprocess.run([str(syslm_bin), "init", "--vocab-size", "300", "--layers", "3", "--dim", "64",
                    "--heads", "4", "--ctx", "256", "--seed", "4", "-o", str(d / "model.gguf")],
                   check=True, capture_output=True)
    (d / "heldout.txt").write_text(text(7, 900))
    proc = tune_edge(syslm_bin, d, "loose", "1GB,2cores")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return d, json.loads((d / "loose" / "edge.json").read_text()), proc.stdout


def edge_tensor_bytes(path, split_at):
    """The embedding's and layers [0, split_at)'s tensors in a file, read with gguf-py."""
    reader = gguf.GGUFReader(str(path))
    return sum(int(t.n_bytes) for t in reader.tensors
               if t.name.startswith("token_embd")
               or any(t.name.startswith(f"blk.{i}.") for i in range(split_at)))


def test_every_point_is_measured_and_a_loose_device_takes_every_layer(edge_dir):
    d, report, stdout = edge_dir
    points = report["points"]
    assert len(points) == 3 * 3 * 2  # split points x types x wires
    assert {(p["split_at"], p["type"], p["wire"]) for p in points} == {
        (l, t, w) for l in (1, 2, 3) for t in ("F16", "Q8_0", "Q4_0") for w in ("f16", "int8")}
    for p in points:
        assert p["kl"] >= 0 and 0 < p["top1"] <= 1 and p["edge_ms_per_token"] > 0
        assert p["link_ms_per_token"] > 30  # the round trip and the bytes at 20 Mbit/s
        assert p["within_kl"] == (p["kl"] <= 0.05)
    # int8 rows are smaller than f16 ones; more layers at the edge leave the cloud less to read
    by = {(p["split_at"], p["type"], p["wire"]): p for p in points}
    assert by[(1, "F16", "int8")]["wire_bytes_per_token"] < by[(1, "F16", "f16")][
        "wire_bytes_per_token"]
    assert by[(1, "F16", "f16")]["cloud_share"] > by[(3, "F16", "f16")]["cloud_share"]
    # the weights in the edge's memory are its tensors in the edge's file; the rest (KV cache,
    # buffers) does not depend on the type or the split
    cand = d / "loose" / "candidates"
    rest = {p["memory_bytes"] - p["weight_bytes"] for p in points}
    assert len(rest) == 1
    for (l, t, w), p in by.items():
        assert p["weight_bytes"] == edge_tensor_bytes(cand / f"edge-{t}.gguf", l)
    chosen = [p for p in points if p["chosen"]]
    assert len(chosen) == 1 and chosen[0]["split_at"] == 3
    plan = json.loads((d / "loose" / "plan.json").read_text())
    assert plan["edge"] == {"split_at": 3, "wire": chosen[0]["wire"]}
    assert "--split-at 3" in stdout


def test_a_memory_limit_rules_points_out(syslm_bin, edge_dir):
    """Just below the loose choice's memory: that point no longer fits, and the choice is the
    fitting point with the most layers at the edge (then the fewest wire bytes, the least KL)."""
    d, report, _ = edge_dir
    loose = [p for p in report["points"] if p["chosen"]][0]
    limit = loose["memory_bytes"] - 1
    proc = tune_edge(syslm_bin, d, "tight", f"{limit}B,1core")
    assert proc.returncode == 0, proc.stderr[-3000:]
    points = json.loads((d / "tight" / "edge.json").read_text())["points"]
    chosen = [p for p in points if p["chosen"]][0]
    assert chosen["memory_bytes"] <= limit and chosen["kl"] <= 0.05
    assert (chosen["split_at"], chosen["type"], chosen["wire"]) != (
        loose["split_at"], loose["type"], loose["wire"])
    ok = [p for p in points if p["fits"] and p["within_kl"]]
    for p in points:
        assert p["fits"] == (p["memory_bytes"] <= limit)
    best = min(ok, key=lambda p: (-p["split_at"], p["wire_bytes_per_token"], p["kl"],
                                  p["memory_bytes"]))
    assert best == chosen


def test_the_plan_serves(syslm_bin, edge_dir):
    d, report, _ = edge_dir
    cloud, cport = start_server(syslm_bin, d / "model.gguf", "--role", "cloud", "--split-at", 3,
                                "--parallel", "2")
    try:
        edge, eport = start_server(syslm_bin, d / "loose" / "model.gguf", "--role", "edge",
                                   "--plan", d / "loose" / "plan.json", "--cloud",
                                   f"http://127.0.0.1:{cport}", "--parallel", "1")
        try:
            status, body = http(eport, "POST", "/v1/completions",
                                {"prompt": "And the LORD", "max_tokens": 8, "temperature": 0,
                                 "ignore_eos": True})
            assert status == 200, body
            assert json.loads(body)["usage"]["completion_tokens"] == 8
        finally:
            edge.terminate()
            edge.wait(timeout=30)
    finally:
        cloud.terminate()
        cloud.wait(timeout=30)


def test_a_device_too_small_or_malformed(syslm_bin, edge_dir):
    d, _, _ = edge_dir
    proc = tune_edge(syslm_bin, d, "tiny", "1MB,1core")
    assert proc.returncode == 1 and "no point is within the limits" in proc.stdout
    for bad in ("2GB", "2XB,2cores", "2GB,0cores", "2GB,two"):
        proc = tune_edge(syslm_bin, d, "bad", bad)
        assert proc.returncode == 2 and "--device" in proc.stderr, (bad, proc.stderr)
