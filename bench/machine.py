"""What the bench scripts print beside every figure: the CPU it was measured on."""
import platform
from pathlib import Path


def cpu_name():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()
