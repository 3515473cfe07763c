# Shared fixtures for the Python reference checks (PyTorch / transformers / gguf-py).
# The syslm binary comes from $SYSLM_BUILD_DIR (default: <repo>/build).
import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
VOCAB = REPO / "tests" / "fixtures" / "vocab"  # llama.cpp's vocabularies, see NOTICE.md


@pytest.fixture(scope="session", autouse=True)
def kernel_choices(tmp_path_factory):
    """One memory of kernel choices for the whole session (src/kernels/kernel_choices.hpp): every
    syslm process runs the same kernels, as two runs on one machine do, so results that tests
    compare across processes match bit for bit."""
    os.environ.setdefault("SYSLM_KERNEL_CACHE", str(tmp_path_factory.mktemp("kernel-choices")))


@pytest.fixture(scope="session")
def syslm_bin() -> pathlib.Path:
    build = pathlib.Path(os.environ.get("SYSLM_BUILD_DIR", REPO / "build"))
    path = build / "syslm"
    if not path.exists():
        pytest.fail(f"{path} not found: build syslm first (cmake --build build)")
    return path


@pytest.fixture(scope="session")
def vocab_dir() -> pathlib.Path:
    return VOCAB


@pytest.fixture
def run_syslm(syslm_bin):
    """Runs `syslm ARGS...`, fails the test with its stderr on a non-zero exit, returns stdout."""

    def run(*args, check=True, input=None):
        proc = subprocess.run([str(syslm_bin), *map(str, args)], capture_output=True, text=True,
                              input=input, timeout=600)
        if check and proc.returncode != 0:
            pytest.fail(f"syslm {' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stderr}")
        return proc

    return run
