"""tools/fault_pass.py itself: what makes its figures mean what they say."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "tools" / "fault_pass.py"


def test_its_commands_get_ctrl_c_even_when_the_pass_was_started_with_sigint_ignored() -> None:
    """Started from a background job (SIGINT ignored, inherited), its Ctrl-C cases ran to the end
    with exit 0: the commands never saw the signal."""
    script = textwrap.dedent(f"""
        import importlib.util, signal, subprocess, sys
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a background job starts it
        spec = importlib.util.spec_from_file_location("fault_pass", {str(TOOL)!r})
        tool = sys.modules["fault_pass"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tool)
        tool.terminal_signals()
        child = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
        print(subprocess.run([sys.executable, "-c", child], capture_output=True, text=True).stdout.strip())
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "True", out.stdout + out.stderr
