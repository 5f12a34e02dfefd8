"""The environment record printed and stored with every result (docs/method.md rule 14).

MPI vendor and version, ranks, cores, oversubscription, Python, package versions, git commit,
mode and units (MB = 10**6 bytes, times in seconds). Collected on rank 0 only; nothing here
initialises MPI: the MPI library is asked only if this process already imported ``mpi4py.MPI``.
"""

from __future__ import annotations

import contextlib
import os
import platform
import socket
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from .procs import cores  # kept here: envinfo.cores is its older home
from .wait import default_wait, resolve_wait

PACKAGES = (
    "pytest-ipcbench",
    "numpy",
    "pyzmq",
    "lmdb",
    "mpi4py",
    "mpich",
    "pytest",
    "pytest-benchmark",
    "pytest-mpi",
    "matplotlib",
)
UNITS = {"time": "s", "size": "B", "MB": 10**6, "GB": 10**9, "throughput": "MB/s (10**6 B/s)"}


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def git_commit(where: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Commit of the work tree holding this package (or ``where``), with a dirty flag; {} if none."""
    folder = Path(where) if where else Path(__file__).resolve().parent
    try:
        head = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"commit": head, "dirty": bool(dirty)}


def mpi_info() -> dict[str, Any]:
    """MPI vendor and version if this process runs MPI already; else what is installed."""
    info: dict[str, Any] = {}
    mod = sys.modules.get("mpi4py.MPI")
    if mod is not None and mod.Is_initialized():
        vendor, (major, minor, micro) = mod.get_vendor()
        library = mod.Get_library_version().strip().splitlines()
        info.update(
            vendor=vendor,
            vendor_version=f"{major}.{minor}.{micro}",
            standard=".".join(map(str, mod.Get_version())),
            library=library[0] if library else "",
            world_size=mod.COMM_WORLD.Get_size(),
        )
    versions = package_versions(("mpi4py", "mpich"))
    if versions:
        info["packages"] = versions
    return info


INJECT_ENV = "IPCBENCH_INJECT"  # slowdowns injected on purpose (harness/inject.py)


def collect(ranks: int | None = None, *, group_kind: str = "", mode: str = "", extra: dict[str, Any] | None = None,
            node_sizes: list[int] | None = None) -> dict[str, Any]:
    """The environment record; ``ranks`` is the number of processes of the measurement,
    ``node_sizes`` the ranks on each node (an MPI group's ``node_sizes``; one node if not given)."""
    n_cores = cores()
    env: dict[str, Any] = {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cores": n_cores,
        "memory_bytes": _memory_bytes(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "executable": sys.executable,
        "packages": package_versions(),
        "git": git_commit(),
        "mpi": mpi_info(),
        "units": dict(UNITS),
    }
    if ranks is not None:
        env["ranks"] = ranks
        env["oversubscribed"] = ranks > n_cores
    if node_sizes is not None:
        env["nodes"] = len(node_sizes)
        env["ranks_per_node"] = list(node_sizes)
    env["wait"] = _wait_record(ranks, n_cores)
    if os.environ.get(INJECT_ENV, "").strip():  # slowed on purpose (harness/inject.py): not the code's speed
        env["injected"] = os.environ[INJECT_ENV].strip()
    if group_kind:
        env["group"] = group_kind
    if mode:
        env["mode"] = mode
    if extra:
        env.update(extra)
    return env


def _wait_record(ranks: int | None, n_cores: int) -> dict[str, Any]:
    """The readers' wait strategy asked for (auto/block/backoff) and what it means at ``ranks``."""
    asked = default_wait()
    record: dict[str, Any] = {"asked": asked}
    if ranks is not None:
        record["resolved"] = resolve_wait(asked, ranks, n_cores)
    return record


def describe(env: dict[str, Any]) -> list[str]:
    """Short human lines for a header (report, console)."""
    lines = []
    mpi = env.get("mpi") or {}
    if mpi.get("vendor"):
        lines.append(f"MPI: {mpi['vendor']} {mpi.get('vendor_version', '')} (MPI {mpi.get('standard', '?')})")
    elif mpi.get("packages"):
        lines.append("MPI packages: " + ", ".join(f"{k} {v}" for k, v in mpi["packages"].items()))
    if "ranks" in env:
        over = "yes" if env.get("oversubscribed") else "no"
        lines.append(f"ranks: {env['ranks']} on {env.get('cores', '?')} cores (oversubscribed: {over})")
        if "nodes" in env:
            lines.append(
                f"nodes: {env['nodes']} (ranks per node: {', '.join(map(str, env.get('ranks_per_node', [])))})"
            )
    else:
        lines.append(f"cores: {env.get('cores', '?')}")
    lines.append(f"CPU: {env.get('cpu', '?')}; Python: {env.get('python', '?')}")
    pk = env.get("packages") or {}
    if pk:
        lines.append("packages: " + ", ".join(f"{k} {v}" for k, v in sorted(pk.items())))
    git = env.get("git") or {}
    if git.get("commit"):
        lines.append(f"commit: {git['commit'][:12]}{' (dirty)' if git.get('dirty') else ''}")
    if env.get("copy_bandwidth_MBps"):
        lines.append(f"copy bandwidth (numpy, {env.get('copy_bandwidth_size', '?')} B): "
                     f"{env['copy_bandwidth_MBps']:.0f} MB/s")
    for where, floor in (env.get("harness_floor") or {}).items():  # harness/floor.py
        if isinstance(floor, dict) and floor.get("seconds"):
            lines.append(f"harness floor ({where}, nothing moved, 1 B): "
                         + ", ".join(f"{s} {v * 1e6:.2f} µs" for s, v in floor["seconds"].items())
                         + " per message (no case can show a smaller change)")
    if env.get("mode"):
        lines.append(f"mode: {env['mode']}")
    wait = env.get("wait") or {}
    if wait:
        lines.append(
            f"wait strategy: {wait.get('asked', '?')}"
            + (f" ({wait['resolved']} at {env['ranks']} ranks)" if "resolved" in wait and "ranks" in env else "")
        )
    lines.append("units: times in seconds (tables in ms/µs as labelled), MB = 10^6 bytes")
    return lines


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0
