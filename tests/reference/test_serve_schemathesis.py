"""`syslm serve` against its own OpenAPI description (/openapi.json), fuzzed by schemathesis:
generated requests to every operation (valid ones and schemathesis' negative cases) never get a
5xx answer, and the server stays up."""
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from test_serve_openai import init_model, start_server

pytest.importorskip("schemathesis")


def test_no_server_errors_on_generated_requests(syslm_bin, tmp_path, vocab_dir):
    model = tmp_path / "model.gguf"
    init_model(syslm_bin, vocab_dir, model, 1, 32, 2, 256)
    proc, port = start_server(syslm_bin, model, "--ctx-size", "256", "--max-tokens", "8",
                              "--max-n", "2")
    try:
        st = Path(sys.executable).with_name("schemathesis")
        run = subprocess.run([str(st if st.exists() else shutil.which("schemathesis")), "run",
                              f"http://127.0.0.1:{port}/openapi.json", "--checks",
                              "not_a_server_error", "-n", "25", "--request-timeout", "60"],
                             capture_output=True, text=True, timeout=900)
        print(run.stdout[-3000:])
        assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-2000:]
        assert proc.poll() is None, "the server died"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
