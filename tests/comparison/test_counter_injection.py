"""End to end: one extra system call per message in a plugin backend is flagged by ``ipcbench compare``.

The consumer project tests/data/counter_consumer (tools/counter_injection.py runs all its variants,
with the gate, at 4 ranks) made visible without pip: its source and a dist-info folder holding its
entry points on PYTHONPATH, once clean and once with the ``syscall`` variant; one case each
(``inj``, local phase, broadcast of 1 KB to one reader), counted, then compared.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from pytest_ipcbench.core.syscalls import syscall_unavailable

CONSUMER = Path(__file__).resolve().parents[1] / "data" / "counter_consumer"
IPCBENCH = Path(sys.executable).parent / "ipcbench"


def _variant(where: Path, variant: str) -> dict[str, str]:
    """The consumer's source at ``where`` with ``variant``, and an environment that finds it."""
    shutil.copytree(CONSUMER / "src", where / "src")
    v = where / "src" / "inj_channel" / "variant.py"
    v.write_text(v.read_text().replace('VARIANT = "clean"', f'VARIANT = "{variant}"'))
    info = where / "src" / "ipcbench_counter_injection-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ipcbench-counter-injection\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[pytest_ipcbench.backends]\ninj = inj_channel:InjLocal\n")
    return {**os.environ, "PYTHONPATH": str(where / "src")}


def test_an_extra_write_per_message_fails_compare_with_its_explanation(tmp_path: Path) -> None:
    files = {}
    for variant in ("clean", "syscall"):
        env = _variant(tmp_path / variant, variant)
        out = tmp_path / variant / "out"
        proc = subprocess.run(
            [str(IPCBENCH), "run", "--count", "--no-config", "--backends", "inj", "--modes", "bytes", "--kinds",
             "ndarray", "--sizes", "1KB", "--scenarios", "broadcast", "--ranks", "2", "--quick", "--no-extras",
             "--results-only", "--progress", "none", "--out", str(out)],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        files[variant] = out / "results.json"
    proc = subprocess.run([str(IPCBENCH), "compare", str(files["clean"]), str(files["syscall"]), "--calibration", "none"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "REGRESSION: 1 case(s) cost more" in proc.stdout, proc.stdout
    if syscall_unavailable() is None:
        assert "writer: +1 write system call per message" in proc.stdout, proc.stdout
    else:  # /proc/self/io still counts the call
        assert "writer: +1 write-family call per message" in proc.stdout, proc.stdout
    # the reverse (the call removed) is cheaper: no regression from counters
    back = subprocess.run([str(IPCBENCH), "compare", str(files["syscall"]), str(files["clean"]), "--calibration", "none"],
                          capture_output=True, text=True, timeout=120)
    assert "cost more per message" not in back.stdout and "-1 write system call" in back.stdout.replace(
        "-1 write-family call per message", "-1 write system call"), back.stdout
