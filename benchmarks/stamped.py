"""Run a command and print each line of its output with the seconds since it
started, then its exit status: where a whole command's time goes, read off its
own progress lines (docs/benchmarks.md, "A fresh machine's very first run").

    python benchmarks/stamped.py .venv/bin/fedpipe run
"""

from __future__ import annotations

import subprocess
import sys
import time


def main(argv: list[str]) -> int:
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        print(f"{time.perf_counter() - start:7.2f} {line}", end="", flush=True)
    status = proc.wait()
    print(f"{time.perf_counter() - start:7.2f} exit {status}")
    return status


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(f"usage: {sys.argv[0]} COMMAND [ARG...]")
    sys.exit(main(sys.argv[1:]))
