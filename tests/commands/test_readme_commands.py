"""Every command the README shows (each line of its ```sh blocks) is run by a test.

:data:`EXERCISED` maps each command, as written, to the test that runs it: one in this module
(run here as a user runs it, in a fresh folder, with the installed scripts), or another test of
the suite that runs it (``tests/...::test_name``). :func:`test_every_readme_command_is_exercised`
fails when the README shows a command that is not in the map, or the map names one the README no
longer shows. ``make test`` and ``make bench`` run the whole suite and the whole matrix: here
``make -n`` checks what they would run; the lead's ``make test`` runs them for real.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_ipcbench.core.group import in_mpi_job
from pytest_ipcbench.core.procs import find_mpiexec

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.skipif(in_mpi_job(), reason="runs commands in subprocesses: not inside an MPI job")

SMALL = "--quick --backends shm,zmq --sizes 1KB --no-extras"
HERE = "tests/commands/test_readme_commands.py::"
#: README command -> the test that runs it
EXERCISED: dict[str, str] = {
    "make bench": HERE + "test_make_targets_run_what_the_readme_says",
    "make test": HERE + "test_make_targets_run_what_the_readme_says",
    "make dist": HERE + "test_make_targets_run_what_the_readme_says",
    "pip install './pytest-ipcbench[mpi]'": HERE + "test_install_from_a_checkout_resolves",
    "pip install 'pytest-ipcbench[mpi] @ git+https://github.com/OWNER/pytest-ipcbench'":
        HERE + "test_install_from_git_is_a_valid_requirement",
    "pytest test_first.py": "tests/test_doc_snippets.py::test_a_documented_snippet_runs",
    "mpiexec -n 4 python -m pytest --with-mpi test_first.py": HERE + "test_the_first_test_under_mpiexec",
    f"ipcbench run {SMALL} --out first-run": HERE + "test_run_report_compare_calibrate_as_written",
    "ipcbench report first-run/results.json --out first-run/report": HERE + "test_run_report_compare_calibrate_as_written",
    "pytest test_latency.py --ipc-report report": HERE + "test_a_test_run_writes_a_report",
    "ipcbench selfcheck": "tests/commands/test_readme_selfcheck.py::test_ipcbench_selfcheck_as_the_readme_writes_it_passes",
    f"ipcbench run --quick --results-only {SMALL.removeprefix('--quick ')} --out base":
        HERE + "test_run_report_compare_calibrate_as_written",
    f"ipcbench run --quick --results-only {SMALL.removeprefix('--quick ')} --out head":
        HERE + "test_run_report_compare_calibrate_as_written",
    "ipcbench compare base/results.json head/results.json --json verdicts.json":
        HERE + "test_run_report_compare_calibrate_as_written",
    f'ipcbench calibrate --runs 3 --run-args "{SMALL}"': HERE + "test_run_report_compare_calibrate_as_written",
    "ipcbench comment --json verdicts.json": HERE + "test_run_report_compare_calibrate_as_written",
    "ipcbench export base/results.json --format bmf --out bmf.json": HERE + "test_run_report_compare_calibrate_as_written",
    'ipcbench advise --describe "dict of 50 float64 arrays of 4 KiB"': HERE + "test_advise_describe_as_written",
    # installs base and head into venvs of their own and runs them interleaved: minutes
    "ipcbench gate --base origin/main":
        "tests/gate/test_gate_project.py::test_gate_in_the_example_history_catches_an_injected_slowdown",
    "ipcbench init-ci --asv": "tests/gate/test_init_ci.py::test_the_written_files_run_in_a_fresh_consumer",
}


def readme_commands(text: str | None = None) -> list[str]:
    """Every command line of the README's ```sh blocks, its trailing comment removed."""
    text = README.read_text() if text is None else text
    lines: list[str] = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M):
        for line in block.splitlines():
            command = re.sub(r"\s+#.*$", "", line).strip()
            if command and not command.startswith("#"):
                lines.append(command)
    return lines


def readme_snippet(name: str) -> str:
    found = re.search(rf"<!-- snippet: {re.escape(name)}[^>]*-->\s*\n```python\n(.*?)```", README.read_text(), re.S)
    assert found, f"README.md has no snippet {name}"
    return found.group(1)


def _run(command: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """``command`` as a user types it, with this environment's scripts first on PATH."""
    env = {**__import__("os").environ, "PATH": f"{BIN}:{__import__('os').environ.get('PATH', '')}"}
    return subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_every_readme_command_is_exercised() -> None:
    shown = readme_commands()
    assert shown, "no ```sh block found in README.md"
    missing = [c for c in shown if c not in EXERCISED]
    assert not missing, f"README commands that no test runs (add them to EXERCISED): {missing}"
    stale = [c for c in EXERCISED if c not in shown]
    assert not stale, f"EXERCISED names commands the README no longer shows: {stale}"
    for command, where in EXERCISED.items():
        path, name = where.split("::")
        assert f"def {name}(" in (ROOT / path).read_text(), f"{command!r}: {where} does not exist"


def test_comments_and_blank_lines_are_not_commands() -> None:
    text = "```sh\n# a note\nmake bench   # with # inside\n\nipcbench run --out x\n```\n```python\nmake no\n```\n"
    assert readme_commands(text) == ["make bench", "ipcbench run --out x"]


@pytest.mark.timeout(120)
def test_make_targets_run_what_the_readme_says() -> None:
    if shutil.which("make") is None:
        pytest.skip("no make")
    wanted = {"bench": ["ipcbench run"], "test": ["-m pytest", "-m 'not alone'", "-m alone", "mpiexec -n 4", "mpiexec -n 2",
                                                  "test-example"],
              "dist": ["-m build", "twine check"]}
    for target, words in wanted.items():
        proc = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert all(w in proc.stdout for w in words), (target, proc.stdout)


@pytest.mark.timeout(300)
def test_install_from_a_checkout_resolves(tmp_path: Path) -> None:
    """From the folder that holds a checkout named pytest-ipcbench: pip builds the project's
    metadata as it would to install it (a dry run; its build requirements come from the index)."""
    (tmp_path / "pytest-ipcbench").symlink_to(ROOT, target_is_directory=True)
    proc = _run(f"{sys.executable} -m " + "pip install './pytest-ipcbench[mpi]'" + " --dry-run --no-deps",
                tmp_path, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Would install pytest-ipcbench" in proc.stdout or "Would install pytest_ipcbench" in proc.stdout, proc.stdout


def test_install_from_git_is_a_valid_requirement() -> None:
    """GitHub is not reachable from the test machine, and OWNER is the README's placeholder: the
    string must be a requirement pip reads (name, extra, URL), the README says what OWNER is."""
    from packaging.requirements import Requirement

    command = next(c for c in readme_commands() if "git+https://" in c)
    requirement = Requirement(command.split("pip install ", 1)[1].strip("'"))
    assert requirement.name == "pytest-ipcbench" and requirement.extras == {"mpi"}
    assert requirement.url == "git+https://github.com/OWNER/pytest-ipcbench"
    assert "`OWNER` is a placeholder" in README.read_text()


@pytest.mark.timeout(600)
def test_a_test_run_writes_a_report(tmp_path: Path) -> None:
    (tmp_path / "test_latency.py").write_text(readme_snippet("test_latency.py"))
    proc = _run("pytest test_latency.py --ipc-report report", tmp_path, timeout=580)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert (tmp_path / "report" / "results.json").is_file() and (tmp_path / "report" / "summary.md").is_file()
    assert "pingpong" in (tmp_path / "report" / "results.json").read_text()


@pytest.mark.skipif(find_mpiexec() is None, reason="no mpiexec (install pytest-ipcbench[mpi])")
@pytest.mark.timeout(900)
def test_the_first_test_under_mpiexec(tmp_path: Path) -> None:
    (tmp_path / "test_first.py").write_text(readme_snippet("test_first.py"))
    proc = _run("mpiexec -n 4 python -m pytest --with-mpi test_first.py", tmp_path, timeout=880)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert re.search(r"\b[1-9]\d* passed", proc.stdout) and " failed" not in proc.stdout, proc.stdout[-3000:]


@pytest.mark.skipif(find_mpiexec() is None, reason="no mpiexec (install pytest-ipcbench[mpi])")
@pytest.mark.timeout(2400)
def test_run_report_compare_calibrate_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's run, report, compare and calibrate commands, in its order, in a new folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # where calibrate stores, compare finds
    shown = readme_commands()
    flow = [c for c in shown if c.startswith(("ipcbench run", "ipcbench report", "ipcbench compare",
                                              "ipcbench calibrate"))]
    assert [c.split()[1] for c in flow] == ["run", "report", "run", "run", "compare", "calibrate"], flow
    has_json = "--json" in _run("ipcbench compare --help", tmp_path, 120).stdout
    for command in flow:
        if command.startswith("ipcbench compare") and not has_json:
            command = command.replace(" --json verdicts.json", "")  # until compare writes its JSON file
        proc = _run(command, tmp_path, timeout=1200)
        out = proc.stdout + proc.stderr
        assert "Traceback" not in out, f"{command}\n{out[-4000:]}"
        if command.startswith("ipcbench compare"):
            # identical code on both sides, no calibration: never a regression
            assert proc.returncode in (0, 3), f"{command}\n{out[-4000:]}"
            assert "REGRESSION" not in proc.stdout.strip().splitlines()[-1], out[-3000:]
        else:
            assert proc.returncode == 0, f"{command}\n{out[-4000:]}"
    assert (tmp_path / "first-run" / "summary.md").is_file()
    assert (tmp_path / "first-run" / "report" / "summary.md").is_file()
    assert (tmp_path / "base" / "results.json").is_file() and not (tmp_path / "base" / "summary.md").exists()
    assert list((tmp_path / "cache" / "pytest-ipcbench").glob("calibration-*.json"))
    if not has_json:
        pytest.skip("ipcbench compare has no --json yet: ran the README's compare without it")
    assert '"pytest-ipcbench-verdicts"' in (tmp_path / "verdicts.json").read_text()
    # what a pull request's comment and other tools get from those two runs
    for command in [c for c in shown if c.startswith(("ipcbench comment", "ipcbench export"))]:
        proc = _run(command, tmp_path, timeout=300)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, f"{command}\n{proc.stdout}{proc.stderr}"
    assert "<!-- pytest-ipcbench -->" in _run("ipcbench comment --json verdicts.json", tmp_path, 300).stdout
    assert json.loads((tmp_path / "bmf.json").read_text())


def test_advise_describe_as_written(tmp_path: Path) -> None:
    """The README's advise line: the prior's pick for a described object, at once, no traceback."""
    command = next(c for c in readme_commands() if c.startswith("ipcbench advise"))
    proc = _run(command, tmp_path, timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith("use "), proc.stdout
