"""tools/fault_pass.py itself: what makes its figures mean what they say."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

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


def _tool():
    import importlib.util

    spec = importlib.util.spec_from_file_location("fault_pass_tool", TOOL)
    assert spec is not None and spec.loader is not None
    tool = sys.modules["fault_pass_tool"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def test_a_refusal_that_does_not_name_the_field_or_gives_a_verdict_is_not_counted_ok(tmp_path: Path) -> None:
    """The hostile-calibration cases pass only when the output names the field and holds no verdict:
    an exit 2 for another reason would otherwise count as the hole closed."""
    tool = _tool()
    say = [sys.executable, "-c", "import sys; print('field runs is -3; also 2 slower'); sys.exit(2)"]
    assert tool.run_case("named", "bad input", say, bound=60, must_say="field runs").ok
    assert not tool.run_case("unnamed", "bad input", say, bound=60, must_say="field sigma").ok
    assert not tool.run_case("verdict", "bad input", say, bound=60, never_say=tool.VERDICT).ok


def test_each_hostile_calibration_is_refused_naming_its_field_and_the_control_is_used(tmp_path: Path) -> None:
    """What the pass plants: the control loads; every hostile file fails its check with the field the
    case expects compare to name (else the case would test nothing)."""
    import re

    from pytest_ipcbench.comparison.calibration import Calibration
    from pytest_ipcbench.comparison.calibration_check import CalibrationError

    tool = _tool()
    cases = tool.hostile_calibrations(tmp_path / "cal", tool.good_results(tmp_path / "good.json"))
    explicit = [(n, c, o) for n, c, o in cases if "--calibration" in c]
    assert len(explicit) >= 20
    for name, argv, opts in explicit:
        with pytest.raises(CalibrationError) as err:
            Calibration.load(argv[argv.index("--calibration") + 1])
        assert re.search(opts["must_say"], str(err.value)), (name, str(err.value))
    control = next(o for n, c, o in cases if "control" in n)
    (stored,) = (Path(control["env"]["XDG_CACHE_HOME"]) / "pytest-ipcbench").iterdir()
    Calibration.load(stored)


def test_the_plugin_case_keeps_the_path_the_pass_itself_was_given(tmp_path: Path, monkeypatch) -> None:
    """As uid 65534 the pass finds the package through PYTHONPATH (the venv's python is under /root):
    the plugin case replaced it with its own folder, and its command died importing pytest_ipcbench."""
    monkeypatch.setenv("PYTHONPATH", "/checkout:/venv/site-packages")
    tool = _tool()
    (name, _, opts), = [c for c in tool.round_three_faults(tmp_path) if "plugin whose close()" in c[0]]
    parts = opts["env"]["PYTHONPATH"].split(os.pathsep)
    assert parts[0] == str(tmp_path / "leaky-site") and parts[1:] == ["/checkout", "/venv/site-packages"], name


def test_the_calibrate_kill_comes_while_its_run_child_runs_however_quick_the_calibration(tmp_path: Path) -> None:
    """The kill came at a fixed 15 s: on a quieter machine calibrate had ended (exit 0, "ended before
    the SIGKILL"), and what the case is for, its child dying with it, went untested."""
    tool = _tool()
    (_, _, opts), = [c for c in tool.round_three_faults(tmp_path) if c[0].startswith("calibrate SIGKILL")]
    quick = [sys.executable, "-c", "import subprocess, time; time.sleep(0.5); subprocess.run(['sleep', '4'])"]
    out = tool.run_case("quick parent", "fault", quick, bound=60, expected="-9", fault=opts["fault"])
    assert out.rc == -9 and out.ok and out.took < 4, (out.rc, out.note, out.left)


def test_the_commands_of_the_pass_keep_their_per_user_folders_in_its_temp_folder(tmp_path: Path) -> None:
    """As uid 65534 (HOME=/tmp) a case's plot left /tmp/.config/matplotlib behind the pass."""
    script = (f"import importlib.util, os, sys; spec = importlib.util.spec_from_file_location('t', {str(TOOL)!r}); "
              "t = sys.modules['t'] = importlib.util.module_from_spec(spec); spec.loader.exec_module(t); "
              f"t.private_homes(__import__('pathlib').Path({str(tmp_path)!r})); import subprocess; "
              "subprocess.run([sys.executable, '-c', 'import matplotlib; print(matplotlib.get_configdir()); "
              "from pytest_ipcbench.comparison.calibration_store import cache_root; print(cache_root())'], check=True)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "HOME": str(tmp_path / "home")})
    dirs = out.stdout.split()
    assert len(dirs) == 2 and all(d.startswith(str(tmp_path) + "/") and "/home/" not in d for d in dirs), out
    assert not (tmp_path / "home").exists()
