#!/usr/bin/env python
"""The fault pass of issue 24, rerunnable: bad inputs and faults, and for each what became of it.

    nice -n 10 .venv/bin/python tools/fault_pass.py [--only SUBSTRING] [--json FILE]

A measurement, not a unit test. Every case runs a command of ours (``ipcbench ...`` or
``pytest``, under ``mpiexec`` where it says so) in a session of its own; a thread records every
process below it and what they use (our ``ipcb-<pid>n<ns>-*`` names, MPICH's ``mpich_shm_*``
segments, Hydra's ``/tmp/hydra_hwloc_xmlfile_*``). Faults are injected while it runs (a signal
to a rank, to ``ipcbench run``, to ``mpiexec``, to the whole process group as a terminal's
Ctrl-C, to the whole session as ``pkill -s`` or a CI job's end; a full /dev/shm or temp folder in
a private mount namespace; a hung rank). For each case:

- exit code, and whether the output holds a Python traceback;
- left: any recorded process still running, any name of ours of a recorded pid, any recorded
  MPICH segment or Hydra file still there, ``SETTLE`` s after the command ended (the time it took
  to be clean is kept too); whatever is left is then removed, so the next case starts clean;
- hang: the command did not end within the case's bound (it is then killed, with its processes);
- corrupt: a results file written by the case holds a failed verification.

Bad inputs expect exit 2 (a usage error) and no traceback; an accepted bad value is listed.
Other users' jobs on the machine are not blamed: only what the case's own processes used counts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pytest_ipcbench.core import names, procs

PY = sys.executable
MPIEXEC = procs.find_mpiexec() or "mpiexec"
MAIN = "import sys; from pytest_ipcbench.commands import main; sys.exit(main(sys.argv[1:]))"
SETTLE = 20.0  # seconds after the end for the job to be gone and clean ("within seconds")
TRACEBACK = re.compile(r"Traceback \(most recent call last\)")


def ipcbench(*args: str) -> list[str]:
    return [PY, "-c", MAIN, *args]


@dataclass
class Outcome:
    name: str
    group: str  # "bad input" | "fault"
    rc: int | None = None
    took: float = 0.0
    bound: float = 0.0
    hang: bool = False
    traceback: bool = False
    left: list[str] = field(default_factory=list)
    clean_after: float = 0.0  # seconds from the end until nothing of it was left
    corrupt: int = 0
    expected: str = ""
    ok: bool = False
    note: str = ""
    tail: str = ""


class Watch:
    """Every process below ``root`` and what it uses, looked at every 30 ms."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.pids: dict[int, str] = {root: procs.comm(root)}
        self.files: set[Path] = set()
        self.ours: set[Path] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.look()
            except Exception:  # /proc races
                pass
            self._stop.wait(0.03)

    def look(self) -> None:
        for pid in [self.root, *procs.children_tree(self.root)]:  # the root too: a plain pytest's rank 0
            name = procs.comm(pid)
            if name and self.pids.get(pid) != name:  # the name after exec
                self.pids[pid] = name
            self.files |= set(procs.mapped_files(pid, "/dev/shm/mpich_shm_"))
            self.files |= set(procs.mapped_files(pid, "/dev/shm/sem.mp-"))  # multiprocessing's, of its queues
            self.files |= set(procs.open_files(pid, "hydra_hwloc_xmlfile_"))
            self.ours |= {item.path for item in names.find_ours(pid=pid)}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)

    def ranks(self) -> list[int]:
        """Live ranks (children of Hydra's proxies), by PMI rank."""
        out = []
        for pid in list(self.pids):
            if procs.comm(pid).startswith("hydra_pmi_prox"):  # now: a pid seen before its exec had another name
                out.extend(procs.children(pid))
        return [p for p in out if procs.running(p)]

    def mid_run(self) -> bool:
        return bool(self.ours) and any(f.name.startswith("mpich_shm_") for f in self.files)

    def left(self) -> list[str]:
        out = [f"process {p} ({c})" for p, c in self.pids.items() if procs.running(p)]
        out += [str(p) for p in sorted(self.ours) if p.exists()]
        out += [str(item.path) for p in self.pids for item in names.find_ours(pid=p)
                if item.path not in self.ours]
        out += [str(f) for f in sorted(self.files) if f.exists()]
        return sorted(set(out))

    def scrub(self) -> None:
        for pid in self.pids:
            if procs.running(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        time.sleep(0.3)
        for p in [*self.ours, *self.files, *(i.path for q in self.pids for i in names.find_ours(pid=q)),
                  *self.pytest_temp()]:
            if p.exists():
                names.remove(p)

    def pytest_temp(self) -> list[Path]:
        """Temp folders (``pytest-N``) of the case's pytest processes that were killed: their ``.lock``
        names one of them. Not counted as left (pytest expires a killed session's folder itself,
        keeping the last three), but removed, so that the pass leaves the machine as it found it."""
        import getpass

        root = Path(tempfile.gettempdir()) / f"pytest-of-{getpass.getuser()}"
        roots = [root, *(r / root.name for r in root.glob("rank*"))]
        found = []
        for folder in (f for r in roots for f in r.glob("pytest-*")):
            try:
                if int((folder / ".lock").read_text()) in self.pids:
                    found.append(folder)
            except (OSError, ValueError):
                continue
        return found


def _pmi_rank(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return next((int(x[9:]) for x in f.read().split(b"\0") if x.startswith(b"PMI_RANK=")), None)
    except (OSError, ValueError):
        return None


Fault = Callable[[subprocess.Popen, Watch], str]


def run_case(name: str, group: str, cmd: list[str], *, bound: float, expected: str = "2", cwd: Path | None = None,
             env: dict[str, str] | None = None, fault: Fault | None = None, results: Path | None = None,
             victims: dict[Path, bytes] | None = None, must_say: str = "", never_say: str = "") -> Outcome:
    """``must_say``: a regex the output must match (the field a refusal names); ``never_say``: one it
    must not (a verdict); either missed counts as a wrong exit."""
    out = Outcome(name, group, bound=bound, expected=expected)
    log = tempfile.TemporaryFile(mode="w+")
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, text=True)
    watch = Watch(proc.pid)
    try:
        if fault is not None:
            out.note = fault(proc, watch)
        proc.wait(timeout=max(0.1, bound - (time.monotonic() - t0)))
    except subprocess.TimeoutExpired:
        out.hang = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        watch.scrub()
        proc.wait()
    out.took = round(time.monotonic() - t0, 2)
    out.rc = proc.returncode
    end = time.monotonic()
    while time.monotonic() - end < SETTLE and watch.left():
        time.sleep(0.1)
    watch.stop()
    out.clean_after = round(time.monotonic() - end, 2)
    out.left = watch.left()
    watch.scrub()
    log.seek(0)
    text = log.read()
    out.traceback = bool(TRACEBACK.search(text))
    out.tail = text[-600:]
    if results is not None and results.is_file():
        try:
            data = json.loads(results.read_text())
            out.corrupt = sum(int((r.get("verified") or {}).get("failed") or 0) for r in data.get("results", []))
        except (OSError, ValueError, AttributeError):
            out.note += " (results unreadable)"
    for victim, content in (victims or {}).items():  # a file the command was given no right to touch
        if not victim.is_file() or victim.read_bytes() != content:
            out.corrupt += 1
            out.note += f" {victim} changed or gone"
    rc_ok = expected == "any" or str(out.rc) in expected.split("|")
    if must_say and not re.search(must_say, text):
        rc_ok, out.note = False, (out.note + f" did not say {must_say!r}").strip()
    if never_say and re.search(never_say, text):
        rc_ok, out.note = False, (out.note + f" said {never_say!r}").strip()
    out.ok = rc_ok and not out.traceback and not out.left and not out.hang and not out.corrupt
    return out


# ------------------------------------------------------------------------------------ bad inputs


def good_results(path: Path) -> Path:
    from pytest_ipcbench.results.results import Result, ResultSet

    rs = ResultSet(env={"python": "3"})
    for size in (1000, 10**6):
        for backend in ("shm", "zmq"):
            rs.add(Result("broadcast", backend, "bytes", "ndarray", size, 2,
                          {"completion": [size / 1e9 * (1 + i / 100) for i in range(20)]}, nbytes=size))
    return rs.save(path)


def hostile_files(folder: Path) -> dict[str, Path]:
    """Name -> a hostile results file (or something that is not a file)."""
    base = json.loads(good_results(folder / "good.json").read_text())
    out: dict[str, Path] = {}

    def write(name: str, data: str | bytes) -> None:
        p = folder / f"{name}.json"
        p.write_bytes(data if isinstance(data, bytes) else data.encode())
        out[name] = p

    write("deep-nesting", "[" * 200_000 + "]" * 200_000)
    write("deep-in-a-field", json.dumps({**base, "results": [{**base["results"][0], "samples": None}]})
          .replace("null", "[" * 100_000 + "]" * 100_000))
    write("results-not-a-list", json.dumps({**base, "results": "x"}))
    write("record-not-an-object", json.dumps({**base, "results": [1, 2]}))
    write("top-level-list", "[1, 2, 3]")
    write("size-10**400", json.dumps({**base, "results": [{**base["results"][0], "size": 0}]}).replace(
        '"size": 0', '"size": 1' + "0" * 400))
    write("sample-1e400", json.dumps(base).replace(str(base["results"][0]["samples"]["completion"][0]), "1e400", 1))
    write("ranks-string", json.dumps({**base, "results": [{**base["results"][0], "ranks": "four"}]}))
    write("samples-wrong-type", json.dumps({**base, "results": [{**base["results"][0], "samples": [1, 2]}]}))
    write("300000-samples", json.dumps({**base, "results": [{**base["results"][0],
                                                             "samples": {"completion": [1e-6] * 300_000}}]}))
    write("empty", "")
    write("truncated", json.dumps(base)[: len(json.dumps(base)) // 2])
    write("binary", os.urandom(4096))
    write("nul-bytes", b"\0" * 1000)
    d = folder / "a-folder.json"
    d.mkdir()
    out["directory"] = d
    fifo = folder / "fifo.json"
    os.mkfifo(fifo)
    out["fifo"] = fifo
    link = folder / "link.json"
    link.symlink_to("/etc/passwd")
    out["symlink-to-elsewhere"] = link
    out["/dev/zero"] = Path("/dev/zero")
    out["missing"] = folder / "missing.json"
    return out


def bad_input_cases(work: Path) -> list[tuple[str, list[str], dict]]:
    cases: list[tuple[str, list[str], dict]] = []
    files = work / "files"
    files.mkdir()
    good = good_results(files / "base.json")
    for kind, path in hostile_files(files).items():
        cases.append((f"compare head={kind}", ipcbench("compare", str(good), str(path)), {}))
        cases.append((f"report {kind}", ipcbench("report", str(path), "--no-plots", "--out", str(work / "rep")), {}))
        cases.append((f"compare --calibration {kind}",
                      ipcbench("compare", "--calibration", str(path), str(good), str(good)), {}))
    values = ["nan", "inf", "-inf", "-1", "0", "1" + "0" * 400, "1e400", "1.5B", "bogus", ""]
    run_flags = ["--ranks", "--backends", "--modes", "--kinds", "--scenarios", "--sizes", "--only", "--time-budget",
                 "--case-timeout", "--progress", "--wait", "--mpiexec"]
    for flag in run_flags:
        for v in values:
            cases.append((f"run {flag} {v!r}", ipcbench("run", "--list", "--no-mpi", flag, v), {"accept": True}))
    cases.append(("run --out /dev/null/x", ipcbench("run", "--quick", "--no-mpi", "--backends", "mp-queue", "--sizes",
                                                   "1KB", "--out", "/dev/null/x"), {}))
    cases.append(("run --sizes 10GiB --ranks 4 (does not fit with copies)",
                  ipcbench("run", "--no-mpi", "--backends", "shm", "--sizes", "10GiB", "--ranks", "4",
                           "--out", str(work / "big")), {}))
    # [tool.ipcbench]
    toml_values = {"nan": "nan", "inf": "inf", "-1": "-1", "0": "0", "huge": "1" + "0" * 400, "'1.5B'": "'1.5B'",
                   "'bogus'": "'bogus'", "true": "true", "[1]": "[1]", "{a=1}": "{a = 1}"}
    for key in ["level", "ranks", "backends", "modes", "kinds", "payloads", "scenarios", "sizes", "only",
                "time-budget", "case-timeout", "count", "extras", "no-such-key"]:
        for label, v in toml_values.items():
            d = work / f"toml-{key}-{len(cases)}"
            d.mkdir()
            (d / "pyproject.toml").write_text(f"[tool.ipcbench]\n{key} = {v}\n")
            cases.append((f"[tool.ipcbench] {key} = {label}", ipcbench("run", "--list", "--no-mpi"),
                          {"cwd": d, "accept": True}))
    d = work / "toml-syntax"
    d.mkdir()
    (d / "pyproject.toml").write_text("[tool.ipcbench\nranks = \n")
    cases.append(("pyproject.toml syntax error", ipcbench("run", "--list", "--no-mpi"), {"cwd": d}))
    # pytest options (a trivial test: the options are checked at start)
    d = work / "pytest-opts"
    d.mkdir()
    (d / "test_x.py").write_text("def test_x(ipc_group):\n    pass\n")
    for flag in ["--ipc-sizes", "--ipc-ranks", "--ipc-timeout", "--ipc-backends", "--ipc-wait", "--ipc-count"]:
        for v in ["nan", "inf", "-1", "1.5B", "1" + "0" * 400, "bogus"]:
            cases.append((f"pytest {flag} {v!r}", [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--co",
                                                  f"{flag}={v}", "test_x.py"], {"cwd": d, "accept": True,
                                                                               "expected": "2|4"}))
    return cases


# ----------------------------------------------------------------------------------------- faults

LOOP = textwrap.dedent("""
    import shutil, time
    import pytest
    from pytest_ipcbench import BackendSpec, PayloadSpec, assert_delivered, deliver
    from pytest_ipcbench.core import names

    def run_deliver(group, spec, payload):
        return deliver(group, spec, payload)

    @pytest.mark.mpi(min_size=2)
    @pytest.mark.parametrize("backend", ["shm", "lmdb", "zmq"])
    def test_deliver(ipc_group, backend):
        spec, payload = BackendSpec(backend, "native"), PayloadSpec("ndarray", 100_000)
        mine = names.private_dir("loop")  # a folder of ours for the whole test (the backends' come and go)
        deadline = time.monotonic() + 8
        while ipc_group.bcast(time.monotonic() < deadline):  # rank 0's clock: every rank stops together
            assert_delivered(ipc_group.run(run_deliver, spec, payload))
        shutil.rmtree(mine)
""")

HANG = textwrap.dedent("""
    import time
    import pytest

    @pytest.mark.mpi(min_size=2)
    def test_rank_1_hangs(ipc_group):
        if ipc_group.rank == 1:
            time.sleep(600)
        ipc_group.barrier()
""")

# the same loop in a plain run over local workers: no mpi marker (pytest-mpi skips those without
# --with-mpi), and rank 0's clock alone (a local group's collectives run only inside group.run)
PLAIN_LOOP = LOOP.replace("@pytest.mark.mpi(min_size=2)\n", "").replace(
    "ipc_group.bcast(time.monotonic() < deadline)", "time.monotonic() < deadline")

SHM_WRITE = textwrap.dedent("""
    def test_write(ipc_bench, ipc_backend, ipc_payload):
        ipc_bench(ipc_backend, ipc_payload, time_budget=0.2)
""")


def when_mid_run(sig: int, who: str, limit: float = 90, mpi: bool = True) -> Fault:
    """Once the job has resources of ours (and, ``mpi``, MPICH segments): ``sig`` to ``who`` (rank1 |
    run | mpiexec | group | session)."""

    def fault(proc: subprocess.Popen, watch: Watch) -> str:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline and proc.poll() is None and not (watch.mid_run() if mpi else watch.ours):
            time.sleep(0.03)
        time.sleep(0.5)
        return _send(proc, watch, sig, who)

    return fault


def after(delay: float, sig: int, who: str) -> Fault:
    def fault(proc: subprocess.Popen, watch: Watch) -> str:
        time.sleep(delay)
        return _send(proc, watch, sig, who)

    return fault


def when_child(sig: int, who: str, limit: float = 90, grace: float = 1.0) -> Fault:
    """``grace`` s after the command has started a child (calibrate's ``ipcbench run``): a fixed delay
    raced the whole calibration on a quiet machine, which ended first."""

    def fault(proc: subprocess.Popen, watch: Watch) -> str:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline and proc.poll() is None and not procs.children(proc.pid):
            time.sleep(0.03)
        time.sleep(grace)
        return _send(proc, watch, sig, who)

    return fault


def _send(proc: subprocess.Popen, watch: Watch, sig: int, who: str) -> str:
    if proc.poll() is not None:
        return f"ended before the {signal.Signals(sig).name}"
    if who == "group":
        os.killpg(proc.pid, sig)
        return f"{signal.Signals(sig).name} to the process group"
    if who == "session":  # every process of the case's session (Hydra's proxies and ranks have their own)
        subprocess.run(["pkill", f"-{signal.Signals(sig).name[3:]}", "-s", str(proc.pid)], check=False)
        return f"{signal.Signals(sig).name} to the session (pkill -s)"
    if who == "run":
        target = proc.pid
    elif who == "mpiexec":
        target = next((p for p in list(watch.pids) if procs.comm(p) == "mpiexec" and procs.running(p)), 0)
    else:
        target, deadline = 0, time.monotonic() + 5  # between two jobs of a run: the next one's rank 1
        while not target and time.monotonic() < deadline and proc.poll() is None:
            target = next((p for p in watch.ranks() if _pmi_rank(p) == 1), 0)
            time.sleep(0.05)
    if not target:
        return f"no {who} to signal (ranks {[(p, _pmi_rank(p)) for p in watch.ranks()]})"
    os.kill(target, sig)
    return f"{signal.Signals(sig).name} to {who} (pid {target})"


def fault_cases(work: Path) -> list[tuple[str, list[str], dict]]:
    cases: list[tuple[str, list[str], dict]] = []

    def run_cmd(tag: str) -> tuple[list[str], Path]:
        out = work / f"run-{tag}"
        return ipcbench("run", "--quick", "--no-extras", "--scenarios", "broadcast", "--backends", "lmdb,zmq,shm",
                        "--kinds", "ndarray", "--modes", "bytes", "--ranks", "3", "--sizes", "1MB", "--time-budget",
                        "1", "--progress", "none", "--out", str(out)), out / "results.json"

    plan = [
        ("ipcbench run: SIGKILL rank 1 mid-run", when_mid_run(signal.SIGKILL, "rank1"), "0|1"),
        ("ipcbench run: SIGKILL ipcbench run mid-run", when_mid_run(signal.SIGKILL, "run"), "-9"),
        ("ipcbench run: SIGKILL ipcbench run at 1 s", after(1.0, signal.SIGKILL, "run"), "-9"),
        ("ipcbench run: SIGKILL mpiexec mid-run", when_mid_run(signal.SIGKILL, "mpiexec"), "0|1"),
        ("ipcbench run: SIGTERM ipcbench run mid-run", when_mid_run(signal.SIGTERM, "run"), "any"),
        ("ipcbench run: SIGTERM mpiexec mid-run", when_mid_run(signal.SIGTERM, "mpiexec"), "0|1"),
        # an interrupted run keeps what it measured (results.json, the report) and exits 1: "run: interrupted"
        ("ipcbench run: Ctrl-C (SIGINT to the group) mid-run", when_mid_run(signal.SIGINT, "group"), "1|2|130"),
        ("ipcbench run: Ctrl-C at 1 s", after(1.0, signal.SIGINT, "group"), "1|2|130"),
        ("ipcbench run: SIGINT rank 1 mid-run", when_mid_run(signal.SIGINT, "rank1"), "0|1"),
    ]
    for i, (name, fault, expected) in enumerate(plan):
        cmd, results = run_cmd(str(i))
        cases.append((name, cmd, {"fault": fault, "expected": expected, "bound": 150, "results": results}))
    d = work / "mpi-loop"
    d.mkdir()
    (d / "test_loop.py").write_text(LOOP)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI", "MPI", "HYDRA", "PYTEST_"))}
    mpi = [MPIEXEC, "-n", "3", PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--with-mpi", "test_loop.py"]
    for name, fault, expected in [
        ("mpiexec pytest: SIGKILL rank 1 mid-run", when_mid_run(signal.SIGKILL, "rank1"), "any"),
        ("mpiexec pytest: SIGKILL mpiexec mid-run", when_mid_run(signal.SIGKILL, "mpiexec"), "-9"),
        ("mpiexec pytest: SIGTERM mpiexec mid-run", when_mid_run(signal.SIGTERM, "mpiexec"), "any"),
        ("mpiexec pytest: Ctrl-C (SIGINT to the group) mid-run", when_mid_run(signal.SIGINT, "group"), "any"),
        ("mpiexec pytest: SIGTERM rank 1 mid-run", when_mid_run(signal.SIGTERM, "rank1"), "any"),
        ("mpiexec pytest: SIGTERM to the session mid-run", when_mid_run(signal.SIGTERM, "session"), "any"),
        ("mpiexec pytest: SIGHUP to the session mid-run", when_mid_run(signal.SIGHUP, "session"), "any"),
    ]:
        cases.append((name, mpi, {"fault": fault, "expected": expected, "bound": 120, "cwd": d, "env": env}))
    # a plain run has no reapers: pytest and its local workers must clean up themselves (exit 128 + signal)
    (d / "test_plain_loop.py").write_text(PLAIN_LOOP)
    plain = [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--ipc-ranks", "3", "test_plain_loop.py"]
    for name, fault, expected in [
        ("pytest: SIGTERM to the session mid-run", when_mid_run(signal.SIGTERM, "session", mpi=False), "143"),
        ("pytest: SIGHUP to the session mid-run", when_mid_run(signal.SIGHUP, "session", mpi=False), "129"),
        ("pytest: Ctrl-C (SIGINT to the group) mid-run", when_mid_run(signal.SIGINT, "group", mpi=False), "2"),
    ]:
        cases.append((name, plain, {"fault": fault, "expected": expected, "bound": 60, "cwd": d, "env": env}))
    d = work / "mpi-hang"
    d.mkdir()
    (d / "test_hang.py").write_text(HANG)
    cases.append(("mpiexec pytest: rank 1 hangs, --ipc-timeout 5",
                  [MPIEXEC, "-n", "3", PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--with-mpi",
                   "--ipc-timeout", "5", "test_hang.py"], {"expected": "any", "bound": 90, "cwd": d, "env": env}))
    # a full /dev/shm, a full temp folder: small tmpfs mounts in a private mount namespace (root)
    if os.geteuid() == 0 and subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0:
        d = work / "full"
        d.mkdir()
        (d / "test_w.py").write_text(SHM_WRITE)
        small = d / "small"
        small.mkdir()
        for name, mount, backend, size, expected in [
            ("full /dev/shm (4 MB tmpfs): shm 8MB", "/dev/shm", "shm", "8MB", "2|4"),
            ("full /dev/shm (4 MB tmpfs): shm 3MB (admitted, then too big with its copies)", "/dev/shm", "shm", "3MB", "0|1"),
            ("full temp folder (4 MB tmpfs): lmdb 8MB", str(small), "lmdb", "8MB", "0|1"),
        ]:
            script = (f"mount -t tmpfs -o size=4m tmpfs {mount} && cd {d} && TMPDIR={small} {PY} -m pytest -q "
                      f"-p no:cacheprovider --ipc-backends {backend} --ipc-sizes {size} --ipc-payloads ndarray "
                      f"--ipc-ranks 2 --ipc-modes bytes test_w.py")
            cases.append((name, ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                          {"expected": expected, "bound": 120, "env": env}))
    return cases


# ------------------------------------------------------------------------------- round three (issue 42)

EXITS = "import os, pytest\n@pytest.mark.mpi\ndef test_reader_ends_its_process():\n    os._exit(0)\n"
NOBODY = 65534


def _nobody_link(folder: Path, name: str, victim: Path) -> Path:
    link = folder / name
    link.symlink_to(victim)
    if os.geteuid() == 0:
        os.lchown(link, NOBODY, NOBODY)  # planted by another user (as uid 65534 itself: its own link)
    return link


def round_three_inputs(work: Path) -> list[tuple[str, list[str], dict]]:
    """Issue 42's bad inputs: lookalike digits, refused zeros, outputs that are FIFOs, links of another
    user, read-only or too long, a gate report folder holding a user's file, a duplicated case."""
    cases: list[tuple[str, list[str], dict]] = []
    good = good_results(work / "good.json")
    for flag in ("--ranks", "--time-budget", "--case-timeout", "--sizes"):
        for v in ("１０", "٣"):
            cases.append((f"run {flag} {v}", ipcbench("run", "--list", "--no-mpi", flag, v), {}))
    for key, v in (("ranks", '"１０"'), ("sizes", str(list(range(1, 100_000)))), ("time-budget", '"٣"')):
        d = work / f"toml3-{key}"
        d.mkdir()
        (d / "pyproject.toml").write_text(f"[tool.ipcbench]\n{key} = {v}\n")
        cases.append((f"[tool.ipcbench] {key} = {v[:20]}", ipcbench("run", "--list", "--no-mpi"), {"cwd": d}))
    d = work / "pytest3"
    d.mkdir()
    (d / "test_x.py").write_text("def test_x(ipc_group):\n    pass\n")
    pytest_cmd = [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--co", "test_x.py"]
    for label, extra, env in (("--ipc-timeout 0", ["--ipc-timeout=0"], {}), ("IPCBENCH_TIMEOUT=0", [], {"IPCBENCH_TIMEOUT": "0"}),
                              ("IPCBENCH_INJECT=bogus=2", [], {"IPCBENCH_INJECT": "bogus=2"}),
                              ("IPCBENCH_NODE=nan", [], {"IPCBENCH_NODE": "nan"}),
                              ("IPCBENCH_RANKS=٣", [], {"IPCBENCH_RANKS": "٣"})):
        cases.append((f"pytest {label}", pytest_cmd + extra, {"cwd": d, "env": {**os.environ, **env}, "expected": "4"}))
    cases.append(("compare --metric ''", ipcbench("compare", str(good), str(good), "--metric", ""), {}))
    dup = json.loads(good.read_text())
    dup["results"].append(dup["results"][0])
    (work / "dup.json").write_text(json.dumps(dup))
    cases.append(("compare of a file with a case twice", ipcbench("compare", str(good), str(work / "dup.json")), {}))
    victim = work / "victim.txt"
    victim.write_text("precious\n")
    keep = {victim: victim.read_bytes()}
    for i, (label, argv) in enumerate((
            ("compare --markdown", ["compare", str(good), str(good), "--calibration", "none", "--markdown"]),
            ("calibrate --out", ["calibrate", "--from", str(good), str(good), str(good), "--plot", "none", "--out"]),
            ("calibrate --markdown", ["calibrate", "--from", str(good), str(good), str(good), "--plot", "none",
                                      "--out", str(work / "c-md.json"), "--markdown"]),
            ("selfcheck --json", ["selfcheck", "--json"]))):
        fifo = work / f"fifo{i}"
        os.mkfifo(fifo)
        cases.append((f"{label} FIFO", ipcbench(*argv, str(fifo)), {"bound": 60}))
        if os.geteuid() == 0:  # only root can plant a link of another user (one's own link is followed)
            link = _nobody_link(work, f"link{i}.md", victim)
            cases.append((f"{label} another user's symlink", ipcbench(*argv, str(link)), {"victims": keep, "bound": 60}))
        cases.append((f"{label} name too long", ipcbench(*argv, str(work / ("x" * 300) / "f")), {"bound": 60}))
        if os.geteuid() != 0:
            ro = work / f"ro{i}"
            ro.mkdir(mode=0o555)
            cases.append((f"{label} read-only folder", ipcbench(*argv, str(ro / "f")), {"bound": 60}))
    report = work / "report"
    report.mkdir()
    (report / "thesis.tex").write_text("years of work\n")
    cases.append(("gate --out a folder holding a user's file", ipcbench("gate", "--base", "HEAD", "--out", str(report)),
                  {"cwd": Path(__file__).resolve().parents[1], "victims": {report / "thesis.tex": b"years of work\n"},
                   "bound": 120}))
    if os.geteuid() == 0:
        link = _nobody_link(work, "gate-out", report)
        cases.append(("gate --out another user's symlink", ipcbench("gate", "--base", "HEAD", "--out", str(link)),
                      {"cwd": Path(__file__).resolve().parents[1],
                       "victims": {report / "thesis.tex": b"years of work\n"}, "bound": 120}))
    cases += hostile_calibrations(work / "cal", good)
    return cases


VERDICT = r"REGRESSION|INCONCLUSIVE|\bOK\b|\bslower\b|\bfaster\b|\bunchanged\b"


def hostile_calibrations(work: Path, good: Path) -> list[tuple[str, list[str], dict]]:
    """Issue 42's first hole: a calibration that would decide verdicts. Each hostile file is planted
    where compare finds it (the per-user store, XDG_CACHE_HOME a folder of the case's own) and also
    passed with --calibration; compare of identical code must exit 2 naming the field, never a
    verdict. A valid one planted the same way is the control (it must be found and used). Root
    also plants the store folder as uid 65534's symlink, and as a folder of that user."""
    from pytest_ipcbench.comparison import calibration as cal, calibration_store as store
    from pytest_ipcbench.results.results import ResultSet

    work.mkdir()
    rs = ResultSet.load(good)
    keys = store.matrix_keys(rs)
    name = store.store_name(rs.env, keys)
    key, group = keys[0], "broadcast r2"
    valid = {"schema": cal.SCHEMA, "env": {"created": "2026-11-28T00:00:00"}, "runs": 5, "threshold": 0.1,
             "groups": {group: 0.05}, "held_out": {group: [0, 10, 0.05]},
             "cases": {k: {"sigma": 0.05, "upper": 0.06, "runs": 5, "group": group, "ratios": [1.0, 1.02, 0.98]}
                       for k in keys}}

    def case_field(field: str, value: object) -> tuple[dict, str]:
        data = json.loads(json.dumps(valid))
        data["cases"][key][field] = value
        return data, f"field cases[{key!r}].{field}"

    def top(path: list[str], value: object, label: str) -> tuple[dict, str]:
        data = json.loads(json.dumps(valid))
        target = data
        for p in path[:-1]:
            target = target[p]
        target[path[-1]] = value
        return data, f"field {label}"

    hostile: dict[str, tuple[dict, str]] = {
        "sigma 0": case_field("sigma", 0),
        "sigma and upper 0": top(["cases", key], {**valid["cases"][key], "sigma": 0.0, "upper": 0.0},
                                 f"cases[{key!r}].sigma"),
        "sigma NaN": case_field("sigma", float("nan")),
        "upper Infinity": case_field("upper", float("inf")),
        "sigma -0.05": case_field("sigma", -0.05),
        "sigma 1e9": case_field("sigma", 1e9),
        "sigma a string": case_field("sigma", "0.05"),
        "sigma true": case_field("sigma", True),
        "case runs -5": case_field("runs", -5),
        "case runs 2.5": case_field("runs", 2.5),
        "case group 5": case_field("group", 5),
        "ratios a string": case_field("ratios", "1,1,1"),
        "a ratio -1": case_field("ratios", [1.0, -1.0, 1.0]),
        "a ratio null": case_field("ratios", [1.0, None]),
        "group noise 0": top(["groups", group], 0, f"groups[{group!r}]"),
        "group noise NaN": top(["groups", group], float("nan"), f"groups[{group!r}]"),
        "group noise -1": top(["groups", group], -1, f"groups[{group!r}]"),
        "runs -3": top(["runs"], -3, "'runs'"),
        "runs '5'": top(["runs"], "5", "'runs'"),
        "threshold NaN": top(["threshold"], float("nan"), "'threshold'"),
        "held_out [-1, 10]": top(["held_out", group], [-1, 10], f"held_out[{group!r}]"),
        "held_out false > pairs": top(["held_out", group], [11, 10], f"held_out[{group!r}]"),
        "cases a list": top(["cases"], [1, 2], "'cases'"),
        "a case null": top(["cases", key], None, f"cases[{key!r}]"),
    }
    compare = ipcbench("compare", str(good), str(good))
    cases: list[tuple[str, list[str], dict]] = []

    def plant(data: dict) -> tuple[dict[str, str], Path]:
        xdg = work / f"xdg-{len(cases)}"
        folder = xdg / store.APP
        folder.mkdir(parents=True, mode=0o700)
        path = folder / name
        path.write_text(json.dumps(data))  # NaN and Infinity as Python's json writes them
        return {**os.environ, "XDG_CACHE_HOME": str(xdg)}, path

    env, path = plant(valid)
    cal.Calibration.load(path)  # the control must be a good file, or every refusal below proves nothing
    # identical code is not slower (exit 0), or not decided by one run a side (3); never 1
    cases.append(("compare, identical code, a valid calibration in the store (control)", compare,
                  {"env": env, "expected": "0|3", "must_say": re.escape(str(path))}))
    for label, (data, named) in hostile.items():
        env, path = plant(data)
        for how, argv in (("in the store", compare), ("--calibration", [*compare, "--calibration", str(path)])):
            cases.append((f"compare, identical code, calibration {label} ({how})", argv,
                          {"env": env, "must_say": re.escape(named), "never_say": VERDICT}))
    zero, _ = case_field("sigma", 0.0)
    zero["cases"] = {k: {**v, "sigma": 1e-9, "upper": 1e-9} for k, v in zero["cases"].items()}  # valid, not 0
    if os.geteuid() == 0:
        # the store folder: uid 65534's symlink to its folder holding a near-zero-noise calibration
        elsewhere = work / "nobody-store"
        elsewhere.mkdir(mode=0o700)
        planted = elsewhere / name
        planted.write_text(json.dumps(zero))
        os.chown(elsewhere, NOBODY, NOBODY)
        os.chown(planted, NOBODY, NOBODY)
        xdg = work / "xdg-link"
        xdg.mkdir()
        _nobody_link(xdg, store.APP, elsewhere)
        env = {**os.environ, "XDG_CACHE_HOME": str(xdg)}
        keep = {planted: planted.read_bytes()}
        cases.append(("compare, identical code, the store folder another user's symlink", compare,
                      {"env": env, "must_say": "is a symlink", "never_say": VERDICT, "victims": keep}))
        cases.append(("calibrate into a store folder that is another user's symlink",
                      ipcbench("calibrate", "--from", str(good), str(good), str(good), "--plot", "none"),
                      {"env": env, "must_say": "is a symlink", "victims": keep}))
        # the store folder itself a folder of uid 65534 (not a link)
        xdg = work / "xdg-theirs"
        (xdg / store.APP).mkdir(parents=True, mode=0o700)
        (xdg / store.APP / name).write_text(json.dumps(zero))
        os.chown(xdg / store.APP / name, NOBODY, NOBODY)
        os.chown(xdg / store.APP, NOBODY, NOBODY)
        cases.append(("compare, identical code, the store folder belongs to uid 65534", compare,
                      {"env": {**os.environ, "XDG_CACHE_HOME": str(xdg)}, "must_say": "belongs to uid 65534",
                       "never_say": VERDICT}))
    # the stored file (in a folder of ours) a symlink to a calibration elsewhere
    xdg = work / "xdg-filelink"
    (xdg / store.APP).mkdir(parents=True, mode=0o700)
    (work / "elsewhere.json").write_text(json.dumps(zero))
    _nobody_link(xdg / store.APP, name, work / "elsewhere.json")
    cases.append(("compare, identical code, the stored calibration a symlink", compare,
                  {"env": {**os.environ, "XDG_CACHE_HOME": str(xdg)}, "must_say": "symlink", "never_say": VERDICT}))
    return cases


def _small_tmpfs(mount: str, size: str, cmd: list[str]) -> list[str]:
    """``cmd`` in a mount namespace of its own where ``mount`` is a tmpfs of ``size`` (root only)."""
    return ["unshare", "-m", "sh", "-c", f'mount -t tmpfs -o size={size} tmpfs {mount} && exec "$@"', "sh", *cmd]


#: a plugin backend whose close() leaves its writer's segment, named by a pattern it declares
LEAKY_PLUGIN = """\
import os
import secrets
from pathlib import Path

from storeplugin import FileStore


class Leaky(FileStore):
    name = "leakyplug"
    resources = ("{shm}/leakyplug-{pid}-*",)

    def _create(self):
        self._owner = True
        path = Path("/dev/shm") / f"leakyplug-{os.getpid()}-{secrets.token_hex(4)}"
        path.mkdir()
        return str(path)

    def close(self):
        self.path = None  # the leak: the folder stays
"""


def round_three_faults(work: Path) -> list[tuple[str, list[str], dict]]:
    """Issue 42's faults: a killed calibrate, ranks that os._exit(0) mid-test, a full /dev/shm and disk."""
    tiny = ["--quick", "--no-extras", "--scenarios", "broadcast", "--backends", "shm", "--kinds", "tiny", "--modes",
            "bytes", "--ranks", "2", "--progress", "none", "--no-config"]
    cases: list[tuple[str, list[str], dict]] = [
        ("calibrate SIGKILL mid-run (its run child)",
         ipcbench("calibrate", "--runs", "3", "--run-args", " ".join([*tiny, "--no-mpi", "--time-budget", "600"]),
                  "--out", str(work / "cal.json")),
         {"fault": when_child(signal.SIGKILL, "run", grace=2.0), "expected": "-9", "bound": 120}),
    ]
    cases.append(("ipcbench run --no-mpi (mp-queue) SIGKILL to its process group (the resource tracker too)",
                  ipcbench("run", "--quick", "--no-extras", "--scenarios", "broadcast", "--backends", "mp-queue",
                           "--modes", "bytes", "--ranks", "3", "--progress", "none", "--no-config", "--no-mpi",
                           "--time-budget", "600", "--out", str(work / "mpq-out")),
                  {"fault": after(15, signal.SIGKILL, "group"), "expected": "-9", "bound": 120}))
    site = work / "leaky-site"
    (site / "ipcbench_leaky-1.0.dist-info").mkdir(parents=True)
    (site / "ipcbench_leaky-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: ipcbench-leaky\nVersion: 1.0\n")
    (site / "ipcbench_leaky-1.0.dist-info" / "entry_points.txt").write_text("[pytest_ipcbench.backends]\nleakyplug = leakyplug:Leaky\n")
    (site / "leakyplug.py").write_text(LEAKY_PLUGIN)
    (site / "storeplugin.py").write_text((Path(__file__).resolve().parents[1] / "tests" / "plugin_support.py").read_text())
    # the plugin's folder first, the pass's own path kept (how uid 65534 finds the package)
    plugin_env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    cases.append(("ipcbench run --no-mpi of a plugin whose close() leaves a declared segment",
                  ipcbench("run", "--quick", "--no-extras", "--scenarios", "broadcast", "--backends", "leakyplug",
                           "--modes", "bytes", "--ranks", "2", "--progress", "none", "--no-config", "--no-mpi",
                           "--kinds", "dict", "--sizes", "1KB", "--results-only", "--out", str(work / "leaky-out")),
                  {"env": plugin_env, "expected": "1", "bound": 120}))
    d = work / "exits"
    d.mkdir()
    (d / "test_e.py").write_text(EXITS)
    cases.append(("mpiexec -n 2 pytest: every rank os._exit(0) mid-test",
                  [MPIEXEC, "-n", "2", PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--with-mpi", "test_e.py"],
                  {"cwd": d, "expected": "1", "bound": 120}))
    if os.geteuid() == 0:
        cases.append(("ipcbench run with a 3 MiB /dev/shm",
                      _small_tmpfs("/dev/shm", "3m", ipcbench("run", *tiny, "--out", str(work / "shm-out"))),
                      {"expected": "2", "bound": 120}))
        disk = work / "disk"
        disk.mkdir()
        cases.append(("ipcbench run --out on a 4 MiB disk",
                      _small_tmpfs(str(disk), "4m", ipcbench("run", *tiny, "--no-mpi", "--out", str(disk / "out"))),
                      {"expected": "2", "bound": 120}))
    return cases


def batch(spec: Path, sink: Path) -> int:
    """In one process: ``ipcbench`` main() of each ``[name, argv, cwd]`` in ``spec``; one JSON line each
    (its exit code, whether an exception escaped main: a traceback, its time). 20 s alarm a case."""
    import contextlib
    import io
    import traceback

    from pytest_ipcbench.commands import main as ipcbench_main

    def alarm(*_: object) -> None:
        raise TimeoutError("case bound")

    signal.signal(signal.SIGALRM, alarm)
    home = os.getcwd()
    for name, argv, cwd in json.loads(spec.read_text()):
        os.chdir(cwd or home)
        buf = io.StringIO()
        t0 = time.monotonic()
        tb = hang = False
        signal.alarm(20)
        try:
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                rc = ipcbench_main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 2
        except TimeoutError:
            rc, hang = None, True
        except BaseException:
            rc, tb = 1, True
            buf.write(traceback.format_exc())
        finally:
            signal.alarm(0)
        tb = tb or bool(TRACEBACK.search(buf.getvalue()))
        with open(sink, "a") as f:
            f.write(json.dumps({"name": name, "rc": rc, "traceback": tb, "hang": hang,
                                "took": round(time.monotonic() - t0, 2), "tail": buf.getvalue()[-400:]}) + "\n")
    return 0


def run_batch(cases: list[tuple[str, list[str], dict]], work: Path) -> list[Outcome]:
    """The ``ipcbench`` command-line cases in one watched process (see :func:`batch`); what the
    batch left (nothing is expected: these cases start no job) is charged to each of its cases."""
    spec, lines = work / "batch.json", work / "batch.out"
    spec.write_text(json.dumps([[n, c[3:], str(o.get("cwd") or "")] for n, c, o in cases]))
    whole = run_case("batch", "bad input", [PY, __file__, "--batch", str(spec), "--batch-out", str(lines)],
                     bound=30 * len(cases) + 60, expected="0")
    got = {}
    for line in lines.read_text().splitlines() if lines.exists() else []:
        row = json.loads(line)
        got[row["name"]] = row
    out = []
    for name, _, opts in cases:
        row = got.get(name)
        o = Outcome(name, "bad input", bound=20, expected=opts.get("expected", "2"))
        if row is None:
            o.note, o.hang = "the batch never got to it", whole.hang
        else:
            o.rc, o.traceback, o.hang, o.took, o.tail = row["rc"], row["traceback"], row["hang"], row["took"], row["tail"]
        o.left = whole.left
        o.ok = (str(o.rc) in o.expected.split("|")) and not o.traceback and not o.hang and not o.left
        if opts.get("accept") and o.rc == 0 and not o.traceback and not o.hang and not o.left:
            o.ok, o.note = True, "accepted"
        out.append(o)
    return out


def _say(o: Outcome) -> None:
    flag = "ok " if o.ok else "BAD"
    print(f"{flag} {o.group:9} rc={o.rc!s:4} {o.took:6.1f}s clean+{o.clean_after:4.1f}s"
          f"{' TRACEBACK' if o.traceback else ''}{' HANG' if o.hang else ''}"
          f"{' CORRUPT' if o.corrupt else ''}{' LEFT ' + ','.join(o.left) if o.left else ''}  {o.name[:120]}"
          f"{'  [' + o.note + ']' if o.note else ''}", flush=True)
    if not o.ok and (o.traceback or o.note == ""):
        print("    " + o.tail.strip().replace("\n", "\n    ")[-400:], flush=True)


def terminal_signals() -> None:
    """Every case starts with SIGINT as a terminal gives it. Started from a background job, this
    process inherits SIGINT ignored, and so did its commands: the Ctrl-C cases' signal never
    reached them (they ran to the end, exit 0). A handler, unlike SIG_IGN, is reset to the
    default by exec."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


def private_homes(work: Path) -> None:
    """The per-user folders the commands write besides their outputs, in the pass's temp folder, so
    that it leaves nothing in the user's home: calibrate's store (``XDG_CACHE_HOME``) and
    matplotlib's config and cache (``MPLCONFIGDIR``; as uid 65534 with HOME=/tmp a calibrate's plot
    left ``/tmp/.config/matplotlib``)."""
    os.environ["XDG_CACHE_HOME"] = str(work / "cache")
    os.environ["MPLCONFIGDIR"] = str(work / "matplotlib")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="run the cases whose name holds this")
    ap.add_argument("--json", type=Path, help="write every outcome here")
    ap.add_argument("--skip-faults", action="store_true")
    ap.add_argument("--skip-inputs", action="store_true")
    ap.add_argument("--round-three", action="store_true", help="only issue 42's cases")
    ap.add_argument("--batch", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--batch-out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    terminal_signals()
    if args.batch:
        return batch(args.batch, args.batch_out)
    outcomes: list[Outcome] = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fault-pass-") as tmp:
        work = Path(tmp)
        private_homes(work)
        plan: list[tuple[str, str, list[str], dict]] = []
        if not args.skip_inputs and not args.round_three:
            (work / "in").mkdir()
            plan += [("bad input", *c) for c in bad_input_cases(work / "in")]
        if not args.skip_faults and not args.round_three:
            (work / "faults").mkdir()
            plan += [("fault", *c) for c in fault_cases(work / "faults")]
        (work / "r3").mkdir()
        (work / "r3f").mkdir()
        if not args.skip_inputs:
            plan += [("bad input", *c) for c in round_three_inputs(work / "r3")]
        if not args.skip_faults:
            plan += [("fault", *c) for c in round_three_faults(work / "r3f")]
        plan = [row for row in plan if not args.only or args.only in row[1]]
        # the command-line cases of ipcbench that need no process of their own run in one batch
        quick = [(n, c, o) for g, n, c, o in plan if c[:3] == [PY, "-c", MAIN] and "--list" in c]
        if quick:
            for o in run_batch(quick, work):
                outcomes.append(o)
                _say(o)
        plan = [row for row in plan if not (row[2][:3] == [PY, "-c", MAIN] and "--list" in row[2])]
        for group, name, cmd, opts in plan:
            accept = opts.pop("accept", False)
            expected = opts.pop("expected", "2")
            o = run_case(name, group, cmd, bound=opts.pop("bound", 60 if group == "fault" else 30),
                         expected=expected, **opts)
            if accept and o.rc == 0 and not o.traceback and not o.left and not o.hang:
                o.note = (o.note + " accepted").strip()
                o.ok = True
            outcomes.append(o)
            _say(o)
    for group in ("bad input", "fault"):
        rows = [o for o in outcomes if o.group == group]
        if not rows:
            continue
        print(f"\n{group}s: {len(rows)}; tracebacks {sum(o.traceback for o in rows)}; "
              f"left something {sum(bool(o.left) for o in rows)}; hangs {sum(o.hang for o in rows)}; "
              f"corruptions {sum(bool(o.corrupt) for o in rows)}; accepted {sum('accepted' in o.note for o in rows)}; "
              f"other exit code than expected {sum(not o.ok and not o.traceback and not o.left and not o.hang for o in rows)}; "
              f"longest {max(o.took for o in rows):.1f} s, longest cleanup {max(o.clean_after for o in rows):.1f} s")
    print(f"the pass took {time.monotonic() - t0:.0f} s; load average now {procs.load_average()}")
    if args.json:
        args.json.write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
