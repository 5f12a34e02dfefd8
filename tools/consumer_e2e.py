"""A fresh consumer project, end to end, as a new user meets pytest-ipcbench (issue 39).

Installs pytest-ipcbench from this checkout (non-editable, ``.[mpi]``) and the fixture project
``tests/data/consumer3`` (three transports of its own by entry point: a UNIX socket channel, POSIX
message queues through posix-ipc, a shared-memory store made before the ranks start) into a fresh
venv, then runs what the README says, in a copy of the project:

1. plain ``pytest``;
2. ``mpiexec -n 4 python -m pytest --with-mpi -m mpi``;
3. a bare ``ipcbench selfcheck``;
4. ``ipcbench run --quick`` (the matrix the project declares in ``[tool.ipcbench]``);
5. ``ipcbench clean --dry-run``.

Each step must exit 0 with no traceback, and nothing of ours may be left in /dev/shm or the temp
folder. Prints one line per step (status, seconds) and exits 1 if any step failed.

    python tools/consumer_e2e.py                 # a few minutes; in a temporary folder, removed after
    python tools/consumer_e2e.py --keep DIR      # keep the venv, the project copy and the logs in DIR
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "tests" / "data" / "consumer3"
STEP_TIMEOUT = 1200  # seconds: a step that takes longer hangs


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def ours() -> set[str]:
    """Leftovers now: ipcb-<pid>-* in /dev/shm and the temp folder whose owner is gone (another
    job's live resources on a shared machine are not ours to count)."""
    found = set()
    for folder in (Path("/dev/shm"), Path(tempfile.gettempdir())):
        for path in folder.glob("ipcb-*"):
            owner = re.match(r"ipcb-(\d+)", path.name)
            if owner and not _alive(int(owner.group(1))):
                found.add(str(path))
    return found


def step(name: str, cmd: list[str], cwd: Path, log: Path, env: dict[str, str]) -> tuple[bool, str]:
    start = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code: int | None = proc.wait(timeout=STEP_TIMEOUT)
        except subprocess.TimeoutExpired:
            code = None
        finally:  # a hung step, Ctrl-C or SIGTERM: its whole session (mpiexec and its ranks) goes too
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
    took = time.monotonic() - start
    text = log.read_text(errors="replace")
    problems = []
    if code != 0:
        problems.append(f"exit {code}" if code is not None else f"hung (> {STEP_TIMEOUT} s)")
    if "Traceback (most recent call last)" in text:
        problems.append("a traceback")
    status = "ok" if not problems else "FAILED: " + ", ".join(problems)
    print(f"{status:>10}  {took:6.0f} s  {name}  ({log.name})", flush=True)
    return not problems, text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (venv, project copy, logs)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # as Ctrl-C: the running step is ended
    work = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix="ipcbench-consumer-e2e-"))
    work.mkdir(parents=True, exist_ok=True)
    before = ours()
    try:
        return run(work, before)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def run(work: Path, before: set[str]) -> int:
    venv, project, logs = work / "venv", work / "project", work / "logs"
    logs.mkdir(exist_ok=True)
    shutil.rmtree(project, ignore_errors=True)
    shutil.copytree(PROJECT, project)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "OMPI_", "IPCBENCH_"))}
    env.pop("PYTHONPATH", None)
    py = venv / "bin" / "python"
    steps: list[tuple[str, list[str]]] = []
    if not py.exists():
        steps.append(("python -m venv", [sys.executable, "-m", "venv", str(venv)]))
    steps += [
        ("pip install pytest-ipcbench[mpi] (this checkout, non-editable)",
         [str(py), "-m", "pip", "install", "--quiet", f"{ROOT}[mpi]"]),
        ("pip install the project", [str(py), "-m", "pip", "install", "--quiet", str(project)]),
        ("pytest", [str(py), "-m", "pytest", "-q"]),
        ("mpiexec -n 4 pytest --with-mpi -m mpi",
         [str(venv / "bin" / "mpiexec"), "-n", "4", str(py), "-m", "pytest", "--with-mpi", "-m", "mpi", "-q"]),
        ("ipcbench selfcheck", [str(venv / "bin" / "ipcbench"), "selfcheck"]),
        ("ipcbench run --quick", [str(venv / "bin" / "ipcbench"), "run", "--quick", "--progress", "plain"]),
        ("ipcbench clean --dry-run", [str(venv / "bin" / "ipcbench"), "clean", "--dry-run"]),
    ]
    ok = True
    for number, (name, cmd) in enumerate(steps, 1):
        good, text = step(name, cmd, project if "pip" not in name else work, logs / f"{number:02d}.log", env)
        ok = ok and good
        if not good:
            print("\n".join("    " + line for line in text.splitlines()[-25:]))
            if name.startswith(("python -m venv", "pip")):
                break  # nothing after it can run
    left = sorted(ours() - before)
    if left:
        ok = False
        print(f"FAILED: left behind: {left}")
    print("all steps passed, nothing left behind" if ok else "FAILED (logs in " + str(logs) + ")")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
