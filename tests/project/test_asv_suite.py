"""The asv suite: ``asv check`` passes, one quick benchmark runs, and the MPI job writes its lines.

Runs against the installed package (``--python=same``: nothing is built), with the configuration
copied to a temporary folder so that no result or machine file lands in the repository. Bounded:
each step has a timeout, the whole file takes well under a minute.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]

pytest.importorskip("asv", reason="asv is not installed (pip install -e '.[dev]')")


def _strip_comments(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))


@pytest.fixture(scope="module")
def asv_env(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A copy of asv.conf.json whose repo and benchmarks are ours, outputs in a temp folder."""
    tmp = tmp_path_factory.mktemp("asv")
    conf = json.loads(_strip_comments((REPO / "asv.conf.json").read_text()))
    conf.update(
        repo=str(REPO),
        benchmark_dir=str(REPO / "benchmarks"),
        env_dir=str(tmp / "env"),
        results_dir=str(tmp / "results"),
        html_dir=str(tmp / "html"),
    )
    path = tmp / "asv.conf.json"
    path.write_text(json.dumps(conf, indent=1))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HOME"] = str(tmp)  # asv keeps its machine file in ~/.asv-machine.json
    proc = subprocess.run([sys.executable, "-m", "asv", "machine", "--yes", "--machine", "ipcbench-test"],
                          cwd=tmp, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return path, env


def _asv(conf: Path, env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "asv", *args, "--config", str(conf)],
                          cwd=conf.parent, env=env, capture_output=True, text=True, timeout=timeout)


def test_asv_conf_settings() -> None:
    conf = json.loads(_strip_comments((REPO / "asv.conf.json").read_text()))
    assert conf["repo"] == "." and conf["environment_type"] == "virtualenv"
    assert conf["benchmark_dir"] == "benchmarks" and conf["branches"] == ["main"]
    assert any("[mpi]" in cmd for cmd in conf["install_command"])
    for key in ("results_dir", "html_dir", "env_dir"):
        assert conf[key].startswith(".asv/")  # .gitignore holds .asv/
    assert ".asv/" in (REPO / ".gitignore").read_text().split()


@pytest.mark.timeout(120)
def test_asv_check(asv_env: tuple[Path, dict[str, str]]) -> None:
    conf, env = asv_env
    proc = _asv(conf, env, "check", "--python=same")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No problems found" in proc.stdout


@pytest.mark.timeout(120)
def test_one_quick_benchmark_runs(asv_env: tuple[Path, dict[str, str]]) -> None:
    conf, env = asv_env
    proc = _asv(conf, env, "run", "--quick", "--python=same", "--dry-run", "--show-stderr",
                "--machine", "ipcbench-test", "--bench", r"Serialize.time_dumps\('ndarray-1MB', 'inband'")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "bench_serialization.Serialize.time_dumps" in out and "ok" in out
    assert "failed" not in out.lower(), out


def _job_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ipcbench_asv_job", REPO / "benchmarks" / "_job.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(120)
def test_mpi_job_writes_one_line_per_case(tmp_path: Path) -> None:
    """What every ``setup_cache`` does: one launch under mpiexec, one line per case, then done."""
    job = _job_module()
    if job.find_mpiexec() is None:
        pytest.skip("no mpiexec in this environment")
    out = tmp_path / "cases.jsonl"
    cache = job.launch(["transfer", "--backends", "shm,mpi-bcast", "--modes", "bytes", "--kinds", "ndarray",
                        "--sizes", "1KB", "--ranks", "2", "--budget", "0.05"], out, nprocs=2, timeout=100)
    assert cache.get("!done") is True, out.read_text() if out.exists() else "no output"
    for backend in ("shm", "mpi-bcast"):
        key = job.case_key(backend, "bytes", "ndarray", "1KB", 2)
        value = cache[key]
        # a number of seconds, or (on a commit without that backend) the reason it was skipped
        assert (isinstance(value, float) and 0 < value < 1) or value.startswith("skip: "), value
        if isinstance(value, float):
            assert job.lookup(cache, key) == value
        else:
            with pytest.raises(NotImplementedError):
                job.lookup(cache, key)


def test_lookup_skips_what_was_not_measured() -> None:
    job = _job_module()
    with pytest.raises(NotImplementedError, match="not measured by this commit"):
        job.lookup({}, "shm|bytes|dict|1KB|2")
    with pytest.raises(NotImplementedError, match="no harness"):
        job.lookup({"*": "skip: no harness"}, "shm|bytes|dict|1KB|2")
    assert job.lookup({"a": 0.5}, "a") == 0.5


@pytest.mark.timeout(120)
def test_local_job_measures_mp_queue(tmp_path: Path) -> None:
    """Backends that cannot cross MPI ranks (mp-queue) are measured by a plain launch in a local world."""
    job = _job_module()
    out = tmp_path / "local.jsonl"
    cache = job.launch(["transfer", "--local", "--backends", "mp-queue", "--modes", "bytes", "--kinds", "tiny",
                        "--ranks", "2", "--budget", "0.05"], out, nprocs=None, timeout=100)
    assert cache.get("!done") is True, out.read_text() if out.exists() else "no output"
    value = cache[job.case_key("mp-queue", "bytes", "tiny", job.SIZES[0], 2)]
    assert isinstance(value, float) and 0 < value < 1, value


def _suite_counts(full: bool) -> dict[str, int]:
    """Measured cases per class of the suite selected by IPCBENCH_ASV_FULL (fresh interpreter)."""
    code = (
        "import json, math, sys; sys.path.insert(0, sys.argv[1])\n"
        "import benchmarks._job as j\n"
        "pairs = len(j.suite_pairs())\n"
        "print(json.dumps({'backends': len(j.BACKENDS),\n"
        "                  'transfer': len(j.BACKENDS) * len(j.MODES) * pairs * len(j.SUITE_RANKS),\n"
        "                  'methods': 9 * len(j.SUITE_METHOD_CONFIGS) * len(j.SHAPES) * len(j.SUITE_RANKS),\n"
        "                  'full': j.FULL}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "IPCBENCH_ASV_FULL"}
    if full:
        env["IPCBENCH_ASV_FULL"] = "1"
    out = subprocess.run([sys.executable, "-c", code, str(REPO)], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_default_suite_is_small_and_the_full_matrix_is_behind_an_option() -> None:
    default, full = _suite_counts(False), _suite_counts(True)
    assert default["full"] is False and full["full"] is True
    n = default["backends"]  # every built-in backend (nine with mpi-shm-win)
    assert n >= 9 and full["backends"] == n
    assert default["transfer"] == n * 2 * 4 * 1 and default["methods"] == 9 * 2 * 2 * 1
    assert full["transfer"] == n * 2 * 9 * 2 and full["methods"] == 9 * 3 * 2 * 2


def test_one_setup_cache_serves_every_mpi_benchmark(monkeypatch: pytest.MonkeyPatch) -> None:
    """asv keys a setup_cache by its function's module and line: both MPI modules share one."""
    asv_base = pytest.importorskip("asv_runner.benchmarks._base")
    monkeypatch.syspath_prepend(str(REPO))  # the `pytest` script does not put the checkout on sys.path
    import benchmarks._job as job
    import benchmarks.bench_mpi_methods as methods
    import benchmarks.bench_transfer as transfer

    assert transfer.setup_cache is methods.setup_cache is job.setup_cache
    keys = {asv_base.get_setup_cache_key(m.setup_cache) for m in (transfer, methods)}
    assert len(keys) == 1


@pytest.mark.timeout(120)
def test_all_job_measures_both_parts_in_one_launch(tmp_path: Path) -> None:
    job = _job_module()
    if job.find_mpiexec() is None:
        pytest.skip("no mpiexec in this environment")
    out = tmp_path / "all.jsonl"
    cache = job.launch(["all", "--backends", "shm", "--modes", "bytes", "--pairs", "tiny@1KB", "--ranks", "2",
                        "--configs", "Small", "--budget", "0.05"], out, nprocs=2, timeout=100)
    assert cache.get("!done") is True, out.read_text() if out.exists() else "no output"
    transfer = cache[job.case_key("shm", "bytes", "tiny", "1KB", 2)]
    method = cache[job.case_key("p2p", "Small", "1d", 2)]
    for value in (transfer, method):
        assert (isinstance(value, float) and 0 < value < 1) or value.startswith("skip: "), value
    assert not [k for k in cache if "ndarray" in k]  # --pairs restricts the transfer cases
