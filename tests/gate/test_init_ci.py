"""``ipcbench init-ci`` in a fresh consumer project, its files run as CI runs them: the workflow
through actionlint, the asv suite through ``asv check``, the gate command through its dry run; the
install spec comes from where pytest-ipcbench was installed (never a placeholder), and what the
gate and asv leave behind is ignored by git."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_ipcbench.core.group import in_mpi_job
from pytest_ipcbench.runner import asv_suite

pytestmark = pytest.mark.skipif(in_mpi_job(), reason="runs commands in subprocesses: not inside an MPI job")
IPCBENCH = Path(sys.executable).with_name("ipcbench")
GIT_URL = "https://example.invalid/acct/pytest-ipcbench"
COMMIT = "0123456789abcdef0123456789abcdef01234567"

PYPROJECT = """\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "fresh-consumer"
version = "0.1.0"
dependencies = ["pytest-ipcbench", "numpy"]

[tool.setuptools.packages.find]
where = ["src"]

[tool.ipcbench]
backends = ["shm"]
modes = ["bytes"]
scenarios = ["pingpong"]
sizes = ["1KB"]
ranks = 2
level = "quick"
"""


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def fresh(tmp_path: Path) -> Path:
    repo = tmp_path / "fresh"
    (repo / "src" / "fresh").mkdir(parents=True)
    (repo / "src" / "fresh" / "__init__.py").write_text("")
    (repo / "pyproject.toml").write_text(PYPROJECT)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "t@example.invalid")
    _git(repo, "config", "user.name", "t")
    return repo


def _installed_from_git(tmp_path: Path) -> dict[str, str]:
    """An environment where pytest-ipcbench's install record (PEP 610) says: from git, at COMMIT."""
    site = tmp_path / "record"
    dist = site / "pytest_ipcbench-0.1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: pytest-ipcbench\nVersion: 0.1.0\n")
    (dist / "direct_url.json").write_text(json.dumps({"url": GIT_URL, "vcs_info": {"vcs": "git", "commit_id": COMMIT}}))
    return {**os.environ, "PYTHONPATH": str(site)}


def _ipcbench(cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(IPCBENCH), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_without_a_reachable_install_it_says_what_to_pass_and_writes_nothing(fresh: Path) -> None:
    # this checkout is installed from a local folder outside the fresh repository: CI cannot reach it
    proc = _ipcbench(fresh, "init-ci", "--asv")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "CI cannot install pytest-ipcbench from" in proc.stderr and "--install" in proc.stderr
    assert "--no-workflow" in proc.stderr and "Traceback" not in proc.stderr
    assert not (fresh / ".github").exists() and not (fresh / "asv.conf.json").exists()
    proc = _ipcbench(fresh, "init-ci", "--install", "pytest-ipcbench @ git+https://github.com/OWNER/pytest-ipcbench")
    assert proc.returncode == 2 and "placeholder OWNER" in proc.stderr, proc.stdout + proc.stderr
    proc = _ipcbench(fresh, "init-ci", "--install", str(fresh / "nothing-here.whl"))
    assert proc.returncode == 2 and "no such folder or wheel" in proc.stderr, proc.stdout + proc.stderr


def test_outside_a_project_exit_2_without_a_traceback(tmp_path: Path) -> None:
    """Issue 39 item 8: no pyproject.toml here."""
    proc = _ipcbench(tmp_path, "init-ci", "--install", GIT_URL)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no pyproject.toml in" in proc.stderr and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_local_checkout_installs_asv_here_and_a_checkout_inside_the_repository_in_ci(fresh: Path) -> None:
    """Issue 39 item 9: a local checkout works as written: asv installs from it; CI from one in the repository."""
    checkout = Path(__file__).resolve().parents[2]
    proc = _ipcbench(fresh, "init-ci", "--asv", "--no-workflow", "--install", str(checkout))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    conf = json.loads((fresh / "asv.conf.json").read_text())
    assert conf["install_command"][0] == f'in-dir={{env_dir}} python -m pip install "{checkout}[mpi]"'
    assert not (fresh / ".github").exists()
    vendored = fresh / "vendor" / "pytest_ipcbench-0.1.0-py3-none-any.whl"
    vendored.parent.mkdir()
    vendored.write_bytes(b"")
    proc = _ipcbench(fresh, "init-ci", "--asv", "--force", "--install", str(vendored))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workflows = fresh / ".github" / "workflows"
    assert 'IPCBENCH_INSTALL: "./vendor/pytest_ipcbench-0.1.0-py3-none-any.whl[mpi]"' in (workflows / "perf-gate.yml").read_text()
    comment = (workflows / "perf-gate-comment.yml").read_text()
    assert "actions/checkout@v4" in comment and "persist-credentials: false" in comment  # the default branch's wheel
    conf = json.loads((fresh / "asv.conf.json").read_text())
    assert '"{conf_dir}/vendor/pytest_ipcbench-0.1.0-py3-none-any.whl[mpi]"' in conf["install_command"][0]


@pytest.mark.timeout(600)
def test_the_written_files_run_in_a_fresh_consumer(fresh: Path, tmp_path: Path) -> None:
    env = _installed_from_git(tmp_path)
    proc = _ipcbench(fresh, "init-ci", "--asv", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    spec = f"pytest-ipcbench[mpi] @ git+{GIT_URL}@{COMMIT}"
    workflows = fresh / ".github" / "workflows"
    workflow = workflows / "perf-gate.yml"
    conf = fresh / "asv.conf.json"
    bench = fresh / "benchmarks" / "bench_ipcbench.py"
    written = sorted(workflows.iterdir())
    assert [p.name for p in written] == ["asv-history.yml", "perf-gate-comment.yml", "perf-gate.yml"]
    for path in (*written, conf):
        assert spec in path.read_text() and "OWNER" not in path.read_text(), path
    # the calibration is kept between runs (actions/cache of the user's cache folder, keyed by the runner
    # type and the pyproject) and measured only when the cache had none: the gate finds it there
    flow = workflow.read_text()
    assert "path: ~/.cache/pytest-ipcbench" in flow
    assert "key: ipcbench-calibration-${{ runner.os }}-${{ runner.arch }}-py3.12-${{ hashFiles('pyproject.toml') }}" in flow
    assert "if: steps.calibration.outputs.cache-hit != 'true'" in flow and "run: ipcbench calibrate" in flow
    assert flow.index("ipcbench calibrate") < flow.index("ipcbench gate")
    # the suite's comment names what the module really exports
    text = bench.read_text()
    assert "TimeDeclared" not in text and "MemDeclared" not in text and "Declared" in text
    assert "Declared" in asv_suite.__all__
    # what the gate and asv leave (hundreds of MB) is ignored, and the command says so
    assert {"/.ipcbench-gate/", "/.asv/", "/ipcbench-selfcheck/", "/ipcbench-results/"} <= \
        set((fresh / ".gitignore").read_text().splitlines())
    # the pull request's verdicts: measured with a read-only token, posted from workflow_run
    gate, comment = workflow.read_text(), (workflows / "perf-gate-comment.yml").read_text()
    assert "pull_request:" in gate and "contents: read" in gate and "/.ipcbench-gate/report/verdicts.json" in gate
    assert "write" not in gate.split("jobs:")[0] and "GITHUB_STEP_SUMMARY" in gate and "pull-request" in gate
    assert "workflow_run:" in comment and "pull-requests: write" in comment and "--head-sha" in comment
    assert "actions/checkout" not in comment  # a git URL: nothing of the repository is checked out
    history = (workflows / "asv-history.yml").read_text()
    assert "actions/deploy-pages" in history and "asv run" in history and "asv_suite plot" in history
    assert ".gitignore" in proc.stdout and ".ipcbench-gate/" in proc.stdout
    (fresh / ".ipcbench-gate" / "venvs").mkdir(parents=True)
    (fresh / ".ipcbench-gate" / "venvs" / "big").write_text("x")
    (fresh / "ipcbench-selfcheck" / "20260101-000000").mkdir(parents=True)
    (fresh / "ipcbench-selfcheck" / "20260101-000000" / "selfcheck.md").write_text("x")
    (fresh / ".asv" / "results").mkdir(parents=True)
    (fresh / ".asv" / "results" / "r.json").write_text("{}")
    _git(fresh, "add", "-A")
    staged = _git(fresh, "diff", "--cached", "--name-only").split()
    assert not [p for p in staged if p.startswith((".ipcbench-gate", ".asv", "ipcbench-selfcheck"))], staged
    _git(fresh, "commit", "-q", "-m", "adopt pytest-ipcbench")
    # a second run adds no second copy of the lines
    assert _ipcbench(fresh, "init-ci", "--asv", "--force", env=env).returncode == 0
    assert (fresh / ".gitignore").read_text().count("/.ipcbench-gate/") == 1

    # the workflow: actionlint
    lint = Path(sys.executable).with_name("actionlint")
    exe = os.environ.get("ACTIONLINT") or (str(lint) if lint.exists() else shutil.which("actionlint"))
    if exe is not None:
        proc = subprocess.run([exe, "-no-color", *map(str, written)], capture_output=True, text=True, timeout=100)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    # the gate's command of the workflow, as a dry run: both refs resolve, both sides declare the matrix
    proc = _ipcbench(fresh, "gate", "--base", "HEAD", "--skip-unadopted-base", "--dry-run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[gate] dry run" in proc.stdout and "[gate] base declares" in proc.stdout and "shm" in proc.stdout
    assert not (fresh / ".ipcbench-gate" / "report").exists()  # nothing installed or measured
    # the asv suite: asv check (imports the benchmarks, in this environment)
    home = tmp_path / "home"
    home.mkdir()
    asv_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    asv_env["HOME"] = str(home)
    asv = [sys.executable, "-m", "asv"]
    proc = subprocess.run([*asv, "machine", "--yes", "--machine", "ipcbench-test"], cwd=fresh, env=asv_env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = subprocess.run([*asv, "check", "--python=same"], cwd=fresh, env=asv_env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    if exe is None:
        pytest.skip("actionlint not found (make .venv/.installed-stamp builds it with Go); the rest passed")
