"""The gate, the workflow and the asv suite in another project (one with ``[tool.ipcbench]``).

Fast: what happens when the base predates the adoption, when the head declares nothing, the
workflow ``ipcbench init-ci`` writes (actionlint), the asv suite's case keys against a real run.
Slow (``IPCBENCH_SLOW_TESTS=1``): the gate in the example consumer's history, one commit of which
injects a slowdown into its backend's write.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_ipcbench.commands import main
from pytest_ipcbench.runner import asv_suite

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "consumer"

PYPROJECT = """\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "tiny-consumer"
version = "0.1.0"
dependencies = ["pytest-ipcbench", "numpy"]

[tool.setuptools.packages.find]
where = ["src"]
"""

TABLE = """
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


def _commit(repo: Path, message: str) -> None:
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)


@pytest.fixture
def consumer(tmp_path: Path) -> Path:
    """A project that is not pytest-ipcbench; its first commit has no [tool.ipcbench] table."""
    repo = tmp_path / "consumer"
    (repo / "src" / "tiny").mkdir(parents=True)
    (repo / "src" / "tiny" / "__init__.py").write_text("")
    (repo / "pyproject.toml").write_text(PYPROJECT)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "t@example.invalid")
    _git(repo, "config", "user.name", "t")
    _commit(repo, "before the adoption")
    return repo


def test_base_that_predates_the_adoption_exits_2_and_says_what_to_do(
        consumer: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (consumer / "pyproject.toml").write_text(PYPROJECT + TABLE)
    _commit(consumer, "adopt pytest-ipcbench")
    monkeypatch.chdir(consumer)
    cache = consumer.parent / "cache"
    assert main(["gate", "--base", "HEAD~1", "--cache-dir", str(cache)]) == 2
    err = capsys.readouterr().err
    assert "predates the adoption" in err and "no [tool.ipcbench] table" in err
    assert "--skip-unadopted-base" in err and "git log -1" in err
    # the adoption's own pull request: not gated, with a notice in the job summary
    md = consumer.parent / "summary.md"
    assert main(["gate", "--base", "HEAD~1", "--cache-dir", str(cache), "--skip-unadopted-base",
                 "--markdown", str(md)]) == 0
    assert "not gated" in capsys.readouterr().out and "predates the adoption" in md.read_text()
    assert not (cache / "venvs").exists()  # nothing was installed


def test_project_in_a_subfolder_is_read_there_at_each_side(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "mono"
    (repo / "app" / "src" / "tiny").mkdir(parents=True)
    (repo / "app" / "src" / "tiny" / "__init__.py").write_text("")
    (repo / "app" / "pyproject.toml").write_text(PYPROJECT)
    (repo / "pyproject.toml").write_text("[project]\nname = 'the-monorepo'\nversion = '0'\n")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "t@example.invalid")
    _git(repo, "config", "user.name", "t")
    _commit(repo, "before")
    (repo / "app" / "pyproject.toml").write_text(PYPROJECT + TABLE)  # the working tree adopts it
    monkeypatch.chdir(repo / "app")
    assert main(["gate", "--base", "HEAD", "--cache-dir", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err
    assert "predates the adoption" in err and "its app/pyproject.toml has no [tool.ipcbench]" in err


def test_head_without_a_table_declares_nothing(consumer: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(consumer)
    assert main(["gate", "--base", "HEAD", "--cache-dir", str(consumer.parent / "cache")]) == 2
    err = capsys.readouterr().err
    assert "declares nothing to measure" in err and "[tool.ipcbench]" in err


def test_bad_table_at_head_is_named(consumer: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    (consumer / "pyproject.toml").write_text(PYPROJECT + TABLE.replace("ranks = 2", "rank = 2"))
    monkeypatch.chdir(consumer)
    assert main(["gate", "--base", "HEAD", "--cache-dir", str(consumer.parent / "cache")]) == 2
    assert "unknown key(s) rank" in capsys.readouterr().err


def test_the_heads_waivers_are_checked_before_anything_is_installed(
        consumer: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """An expired waiver in the head's [tool.ipcbench] stops the gate with exit 2 naming it; a bad
    threshold too; a valid waiver lets the dry run say what it would do (docs/thresholds.md)."""
    waiver = '\n[[tool.ipcbench.waivers]]\ncase = "pingpong/shm/*"\nreason = "known"\nexpires = {}\n'
    (consumer / "pyproject.toml").write_text(PYPROJECT + TABLE)
    _commit(consumer, "adopt pytest-ipcbench")
    monkeypatch.chdir(consumer)
    cache = consumer.parent / "cache"
    (consumer / "pyproject.toml").write_text(PYPROJECT + TABLE + waiver.format("2020-01-31"))
    assert main(["gate", "--base", "HEAD", "--cache-dir", str(cache), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "expired waiver(s): case = 'pingpong/shm/*' (expired 2020-01-31: known)" in err
    (consumer / "pyproject.toml").write_text(PYPROJECT + TABLE + '[tool.ipcbench.thresholds]\n"x/[" = 0.2\n')
    assert main(["gate", "--base", "HEAD", "--cache-dir", str(cache), "--dry-run"]) == 2
    assert "unclosed '['" in capsys.readouterr().err
    (consumer / "pyproject.toml").write_text(PYPROJECT + TABLE + waiver.format("2999-01-31"))
    assert main(["gate", "--base", "HEAD", "--cache-dir", str(cache), "--dry-run"]) == 0
    assert not (cache / "venvs").exists()  # nothing was installed


def _actionlint() -> str | None:
    beside = Path(sys.executable).parent / "actionlint"
    return os.environ.get("ACTIONLINT") or (str(beside) if beside.exists() else shutil.which("actionlint"))


def test_init_ci_writes_an_actionlint_clean_workflow_and_the_asv_suite(
        consumer: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (consumer / "pyproject.toml").write_text(PYPROJECT + TABLE)
    monkeypatch.chdir(consumer)
    assert main(["init-ci", "--asv", "--install", "pytest-ipcbench[mpi] @ git+https://example.invalid/x/pytest-ipcbench@v0.1"]) == 0
    workflow = consumer / ".github" / "workflows" / "perf-gate.yml"
    text = workflow.read_text()
    assert "pull_request" in text and "fetch-depth: 0" in text and "continue-on-error" not in text
    assert 'ipcbench gate --base "origin/${BASE_REF}" --skip-unadopted-base' in text
    assert "git+https://example.invalid/x/pytest-ipcbench@v0.1" in text and "GITHUB_STEP_SUMMARY" in text
    assert "pip install pytest-ipcbench\n" not in text  # never from PyPI: it is not published
    assert (consumer / "asv.conf.json").is_file()
    assert "from pytest_ipcbench.runner.asv_suite import *" in (consumer / "benchmarks" / "bench_ipcbench.py").read_text()
    assert main(["init-ci", "--install", "pytest-ipcbench @ git+https://example.invalid/x/pytest-ipcbench"]) == 2  # exists: not overwritten without --force
    assert "--force" in capsys.readouterr().err
    exe = _actionlint()
    if exe is None:
        pytest.skip("actionlint not found (make .venv/.installed-stamp builds it with Go)")
    proc = subprocess.run([exe, "-no-color", str(workflow)], capture_output=True, text=True, timeout=100)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_example_declares_its_matrix_and_ships_the_written_files() -> None:
    if not (EXAMPLE / "pyproject.toml").is_file():
        pytest.skip("examples/consumer is not here yet")
    from pytest_ipcbench.core.project import read_config

    config = read_config(EXAMPLE / "pyproject.toml")
    assert config is not None and "fifo" in config.options["backends"]
    workflow = EXAMPLE / ".github" / "workflows" / "perf-gate.yml"
    assert "--skip-unadopted-base" in workflow.read_text()
    assert (EXAMPLE / "asv.conf.json").is_file() and (EXAMPLE / "benchmarks" / "bench_ipcbench.py").is_file()
    exe = _actionlint()
    if exe is None:
        pytest.skip("actionlint not found (make .venv/.installed-stamp builds it with Go)")
    proc = subprocess.run([exe, "-no-color", str(workflow)], capture_output=True, text=True, timeout=100)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.timeout(600)
def test_asv_suite_times_every_declared_case(consumer: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (consumer / "pyproject.toml").write_text(PYPROJECT + TABLE.replace('scenarios = ["pingpong"]',
                                                                       'scenarios = ["pingpong", "broadcast"]'))
    monkeypatch.setenv("IPCBENCH_CONFIG", str(consumer / "pyproject.toml"))
    monkeypatch.chdir(consumer)
    keys = asv_suite.declared_keys()
    assert keys and any(k.startswith("pingpong/shm/bytes/buffer/1000/r2") for k in keys)
    monkeypatch.setenv("IPCBENCH_ASV_REPEATS", "2")
    cache = asv_suite.setup_cache()
    bench = asv_suite.Declared()
    for key in keys:  # every predicted key is a case the runs measured, each commit's point with an interval
        assert len(cache[key]) == 2, key
        point = bench.track_median(cache, key)  # the runs' medians as asv's samples: asv gives the interval
        assert point["samples"] == cache[key] and point["number"] == 1, key
        assert min(point["samples"]) > 0, key
    # one benchmark per case (its runs' tails as benchmarks of their own made asv compare flag noise)
    assert [m for m in dir(bench) if m.startswith("track_")] == ["track_median"]
    monkeypatch.setenv("IPCBENCH_ASV_REPEATS", "0")
    with pytest.raises(ValueError, match="IPCBENCH_ASV_REPEATS"):
        asv_suite.repeats()
    with pytest.raises(NotImplementedError):
        bench.track_median(cache, "broadcast/none/bytes/x/1/r2")


# -------------------------------------------------------------------- the example's history


def _copy_example(dest: Path) -> Path:
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__", ".ipcbench-gate", ".asv", "ipcbench-results"))
    _git(dest, "init", "-q", "-b", "main")
    _git(dest, "config", "user.email", "t@example.invalid")
    _git(dest, "config", "user.name", "t")
    _commit(dest, "the example consumer")
    return dest


def inject_slowdown(backend_py: Path, seconds: float = 0.002) -> None:
    """A sleep at the top of the backend's write(): every case of that backend gets slower."""
    text = backend_py.read_text()
    match = re.search(r"\n(\s+)def write\(self[^)]*\)[^:]*:\n", text)
    assert match, f"no write() in {backend_py}"
    indent = match.group(1) + "    "
    at = match.end()
    backend_py.write_text(text[:at] + f"{indent}import time as _t; _t.sleep({seconds})  # injected slowdown\n"
                          + text[at:])


@pytest.mark.skipif(os.environ.get("IPCBENCH_SLOW_TESTS") != "1", reason="slow: set IPCBENCH_SLOW_TESTS=1")
@pytest.mark.timeout(3600)
def test_gate_in_the_example_history_catches_an_injected_slowdown(tmp_path: Path) -> None:
    """examples/consumer in a repository of its own: an unchanged pair passes (0, or 3 undecided), a commit that
    slows its backend's write fails (1) and the report names that backend's cases, not shm's."""
    if not (EXAMPLE / "pyproject.toml").is_file():
        pytest.skip("examples/consumer is not here yet")
    repo = _copy_example(tmp_path / "example")
    assert "[tool.ipcbench]" in (repo / "pyproject.toml").read_text()
    backend = next(p for p in (repo / "src").rglob("backend.py"))
    (repo / "NOTES.md").write_text("a change that does not touch the code\n")
    _commit(repo, "unchanged")
    inject_slowdown(backend)
    _commit(repo, "slow write")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cache = tmp_path / "cache"

    def gate(base: str, head: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pytest_ipcbench", "gate", "--base", base, "--head", head,
                               "--cache-dir", str(cache), "--out", str(tmp_path / f"report-{head}")],
                              cwd=repo, capture_output=True, text=True, env=env, timeout=1700)

    same = gate("HEAD~2", "HEAD~1")
    print(same.stdout[-3000:])
    # unchanged: OK, or INCONCLUSIVE (3) when the budget left cases undecided; never a regression
    assert same.returncode in (0, 3), same.stdout[-4000:] + same.stderr[-2000:]
    assert same.stdout.strip().splitlines()[-1].split(":")[0] == ("OK" if same.returncode == 0 else "INCONCLUSIVE")
    slow = gate("HEAD~1", "HEAD")
    print(slow.stdout[-3000:])
    assert slow.returncode == 1, slow.stdout[-4000:] + slow.stderr[-2000:]
    verdict = next(line for line in slow.stdout.splitlines() if line.startswith("REGRESSION"))
    slowed = re.findall(r"[a-z0-9-]+/([a-z0-9-]+)/(?:bytes|native)/", verdict)
    name = re.search(r'^(\w[\w-]*) = "', (repo / "pyproject.toml").read_text().split("pytest_ipcbench.backends")[1],
                     re.M)
    assert name is not None
    assert slowed and set(slowed) == {name.group(1)}, verdict
    assert not [w for w in _git(repo, "worktree", "list").splitlines()[1:] if "gate-" in w]
