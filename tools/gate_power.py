"""Measure what ``ipcbench gate`` can see on this machine: its power table.

    python tools/gate_power.py run --out gate-power          # 5 A/A gates, then 5 with slowdowns
    python tools/gate_power.py table gate-power/*/           # the table of docs/performance-history.md
    python tools/gate_power.py table --calibration .ipcbench/calibration.json gate-power/*/
    python tools/gate_power.py table --fast-tail 0.5 gate-power/*/   # the rounds' medians alone
    # a consumer project's plugin backend, slowed 2x, 1.5x, and 2x only from 1 MB:
    python tools/gate_power.py run --project examples/consumer --out gp --aa 2 \
        --plan fifo=2 --plan fifo=1.5 --plan fifo=2@1MB -- --run-args "--sizes 1KB,1MB --ranks 4"   # 1MB = 10^6 B < 1 MiB

``run`` calls ``ipcbench gate --base HEAD`` (head: the working tree, i.e. the same code) again and
again: first with nothing changed (A/A: every case it flags is a false alarm), then with slowdowns
injected into the head's runs (``--inject``, harness/inject.py), three backends at a time at
2x, 1.5x and 1.25x, a different three each run. Other gate options pass through after ``--``.

``--project DIR`` measures another project (a consumer such as examples/consumer): it is copied
into a git repository of its own under ``--out`` (one commit), and every gate runs there. ``--plan
SPEC`` (repeatable) replaces the rotation: one gate per plan, ``SPEC`` as ``--inject`` takes it.

``slowed`` measures what a user's commit does to the default gate (no budget flags): a copy of
``tests/data/consumer3`` declaring a 72-case matrix is committed as the base, then a head whose
``uds`` transport spends twice its CPU time per message (a spin as long as the work's thread CPU
time, in its write and its read: time only, nothing else changes), then gates the slowed head
``--runs`` times and the base's own code (identical content) ``--aa`` times; per gate it records the
last line, the exit code, the rounds, the wall time and the 1-minute load every 10 s
(``slowed.json``):

    python tools/gate_power.py slowed --out gp70 --runs 3 --aa 1

``table`` reads the gates' report folders (base.json, head.json, gate.json) and prints, per
injected factor, how often the gate caught it (exit 1 naming a case of that backend) and how
many of its cases it flagged; and the false alarms: cases of backends nobody slowed that it
flagged.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from pytest_ipcbench.comparison.calibration import Calibration
from pytest_ipcbench.comparison.compare import compare_sets
from pytest_ipcbench.comparison.run_sets import RUN_QUANTILE
from pytest_ipcbench.core.injection import Slowdown, parse_injection
from pytest_ipcbench.results.results import ResultSet

ROTATION = [  # (2x, 1.5x, 1.25x): every backend meets every factor once or twice
    ("shm", "zmq", "mpi-p2p"),
    ("mpi-bcast", "lmdb", "mp-queue"),
    ("mpi-pkl5", "mpi-buffer", "shm"),
    ("zmq", "mpi-shm-win", "mpi-bcast"),
    ("lmdb", "mpi-p2p", "mpi-pkl5"),
    ("mp-queue", "shm", "mpi-buffer"),
    ("mpi-buffer", "mpi-pkl5", "zmq"),
]
FACTORS = (2.0, 1.5, 1.25)


def _project_repo(project: Path, out: Path) -> Path:
    """A copy of ``project`` in a git repository of its own (one commit): where its gates run."""
    repo = out / "project"
    if (repo / ".git").is_dir():
        return repo
    shutil.copytree(project, repo, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__", ".ipcbench-gate", ".asv", "ipcbench-results", ".venv*"))
    for cmd in (["init", "-q", "-b", "main"], ["add", "-A"],
                ["-c", "user.email=power@example.invalid", "-c", "user.name=power", "commit", "-q", "-m", "project"]):
        subprocess.run(["git", "-C", str(repo), *cmd], check=True, capture_output=True)
    return repo


def run(args: argparse.Namespace, gate_args: list[str]) -> int:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    cwd = _project_repo(Path(args.project).resolve(), out) if args.project else None
    plans: list[tuple[str, dict[str, str]]] = [(f"aa{i + 1}", {}) for i in range(args.aa)]
    if args.plan:
        plans += [(f"inj{i + 1}", {k: str(v) for k, v in parse_injection(spec, "--plan").items()})
                  for i, spec in enumerate(args.plan)]
    else:
        plans += [(f"inj{i + 1}", {b: f"{f:g}" for b, f in zip(ROTATION[i % len(ROTATION)], FACTORS)})
                  for i in range(args.injected)]
    for name, inject in plans:
        dest = out / name
        if (dest / "gate.json").is_file():
            continue  # done in an earlier call
        cmd = [sys.executable, "-m", "pytest_ipcbench", "gate", "--base", "HEAD", "--out", str(dest), *gate_args]
        for backend, spec in inject.items():
            cmd += ["--inject", f"{backend}={spec}"]
        print(f"[power] {name}: {' '.join(cmd[2:])}", flush=True)
        t0 = time.monotonic()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd)
        took = time.monotonic() - t0
        (out / f"{name}.log").write_text(proc.stdout)
        if proc.returncode not in (0, 1):
            print(f"[power] {name}: gate exited {proc.returncode}; see {out / f'{name}.log'}", flush=True)
            return 2
        load = Path("/proc/loadavg").read_text().split()[:3]
        (dest / "gate.json").write_text(json.dumps({"exit": proc.returncode, "wall_s": round(took, 1),
                                                    "inject": inject, "loadavg_end": load}) + "\n")
        print(f"[power] {name}: exit {proc.returncode} in {took:.0f} s (load {' '.join(load)})", flush=True)
    return 0


#: the 72-case matrix (3 transports x (3 payloads x 6 sizes broadcast + 6 ping-pong)) in place of consumer3's
MATRIX = ('payloads = ["ndarray"]\nsizes = ["1KB", "100KB"]',
          'payloads = ["ndarray", "dict", "array1d"]\nsizes = ["1KB", "10KB", "100KB", "300KB", "1MB", "3MB"]')
#: uds.py's write and read, each followed by a spin as long as its own thread CPU time (2x the CPU)
SPIN = [("import struct\n", "import struct\nimport time\n"),
        ("    def write(self, obj: Any) -> None:\n", "    def write(self, obj: Any) -> None:\n        t0 = time.thread_time()\n"),
        ("        self._send(frame)\n", "        self._send(frame)\n        _spin(time.thread_time() - t0)\n"),
        ("            body = _recv_exact(sock, length)\n",
         "            t0 = time.thread_time()\n            body = _recv_exact(sock, length)\n"),
        ("        return loads(body)\n", "        obj = loads(body)\n        _spin(time.thread_time() - t0)\n        return obj\n"),
        ("def _recv_exact(", "def _spin(seconds: float) -> None:\n    end = time.thread_time() + seconds\n"
                           "    while time.thread_time() < end:\n        pass\n\n\ndef _recv_exact(")]


def _edit(path: Path, edits: list[tuple[str, str]]) -> None:
    text = path.read_text()
    for old, new in edits:
        if old not in text:
            raise SystemExit(f"gate_power: {path} has no {old!r} (consumer3 changed?)")
        text = text.replace(old, new, 1)
    path.write_text(text)


def _git(repo: Path, *args: str) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.email=power@example.invalid", "-c", "user.name=power", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


def slowed(args: argparse.Namespace) -> int:
    out = Path(args.out).resolve()
    repo = out / "project"
    if not (repo / ".git").is_dir():
        repo = _project_repo(Path(__file__).resolve().parents[1] / "tests" / "data" / "consumer3", out)
        _edit(repo / "pyproject.toml", [MATRIX])
        (repo / ".gitignore").write_text(".ipcbench-gate/\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", "base: 72 cases")
        _git(repo, "tag", "base")
        _edit(repo / "src" / "trio_transports" / "uds.py", SPIN)
        _git(repo, "commit", "-q", "-am", "head: uds twice its CPU time per message")
        _git(repo, "tag", "slowed")
    summary = out / "slowed.json"
    done = json.loads(summary.read_text()) if summary.is_file() else {}
    plans = [f"slowed{i + 1}" for i in range(args.runs)] + [f"aa{i + 1}" for i in range(args.aa)]
    for name in plans:
        if name in done:
            continue
        _git(repo, "checkout", "-q", "slowed" if name.startswith("slowed") else "base")
        loads: list[float] = []
        cmd = [sys.executable, "-m", "pytest_ipcbench", "gate", "--base", "base", "--out", str(out / name)]
        print(f"[power] {name}: {' '.join(cmd[2:])} (head: {'slowed' if name.startswith('slowed') else 'base'})",
              flush=True)
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=repo)
        while True:
            loads.append(float(Path("/proc/loadavg").read_text().split()[0]))
            try:
                text = proc.communicate(timeout=10)[0]
                break
            except subprocess.TimeoutExpired:
                continue
        took = time.monotonic() - t0
        (out / f"{name}.log").write_text(text)
        lines = text.strip().splitlines()
        rounds_dir = out / name / "rounds"
        rounds = sorted((p.name for p in rounds_dir.iterdir()), key=lambda n: (int(n.split("-")[0]), n)) if rounds_dir.is_dir() else []
        loads.sort()
        done[name] = {"exit": proc.returncode, "wall_s": round(took), "last_line": lines[-1] if lines else "",
                      "rounds": rounds, "load_min_median_max": [loads[0], loads[len(loads) // 2], loads[-1]]}
        summary.write_text(json.dumps(done, indent=1) + "\n")
        print(f"[power] {name}: exit {proc.returncode}, {took / 60:.1f} min, rounds {' '.join(rounds)}, load "
              f"{loads[0]:.1f}/{loads[len(loads) // 2]:.1f}/{loads[-1]:.1f}\n[power] {done[name]['last_line']}",
              flush=True)
    return 0


def table(args: argparse.Namespace) -> int:
    caught: dict[Slowdown, list[bool]] = defaultdict(list)  # slowdown -> per run: the gate named the backend
    cases: dict[Slowdown, list[int]] = defaultdict(lambda: [0, 0])  # slowdown -> [flagged, cases]
    ratios: dict[Slowdown, list[float]] = defaultdict(list)
    excluded: dict[Slowdown, int] = defaultdict(int)
    rows = []
    calibration = Calibration.load(args.calibration) if args.calibration else None
    inconclusive = 0
    for folder in map(Path, args.folders):
        if not (folder / "gate.json").is_file():
            print(f"({folder}: no gate.json, not finished: left out)", file=sys.stderr)
            continue
        meta = json.loads((folder / "gate.json").read_text())
        inject = {b: parse_injection(f"{b}={v}")[b] for b, v in meta["inject"].items()}
        base, head = ResultSet.load(folder / "base.json"), ResultSet.load(folder / "head.json")
        comparison = compare_sets(base, head, paired=True, calibration=calibration,
                                  fast_tail=None if args.fast_tail == 0.5 else args.fast_tail)
        inconclusive += len(comparison.with_status("inconclusive"))
        by_backend: dict[str, list[bool]] = defaultdict(list)
        false_alarms, false_faster = [], 0
        for c in comparison.cases:
            if c.interval is None or c.status == "reference":
                continue
            backend = c.key.split("/")[1]
            slower = c.status == "slower"
            if backend in inject and _with_work(c.key):
                excluded[inject[backend]] += 1  # not slowed by the factor (harness/inject.py); left out
                continue
            if backend in inject and _size(c.key) >= inject[backend].min_bytes:
                by_backend[backend].append(slower)
                ratios[inject[backend]].append(c.interval.ratio)
            elif slower:
                false_alarms.append(c.key)
            elif c.status == "faster":
                false_faster += 1
        for backend, flags in by_backend.items():
            factor = inject[backend]
            caught[factor].append(any(flags) and meta["exit"] == 1)
            cases[factor][0] += sum(flags)
            cases[factor][1] += len(flags)
        compared = sum(1 for c in comparison.cases if c.interval is not None and c.status != "reference"
                       and not _affected(c.key, inject))
        rows.append((folder.name, meta["wall_s"], meta["exit"], inject, compared, len(false_alarms), false_alarms[:3],
                     false_faster))
    print("| gate | wall time | exit | slowed | cases not slowed | of them flagged slower (false alarms) | "
          "flagged faster |")
    print("|---|---|---|---|---|---|---|")
    for name, wall, code, inject, compared, n_false, examples, n_faster in rows:
        slowed = ", ".join(f"{b} {f.describe()}" for b, f in inject.items()) or "nothing (A/A)"
        print(f"| {name} | {wall / 60:.1f} min | {code} | {slowed} | {compared} | "
              f"{n_false}{' ' + str(examples) if n_false else ''} | {n_faster} |")
    print()
    print("| slowdown injected | gates that caught it | its cases flagged | head/base of its cases, median [min-max] |")
    print("|---|---|---|---|")
    for factor in sorted(caught, key=lambda f: (f.factor, f.min_bytes), reverse=True):
        got, r = caught[factor], sorted(ratios[factor])
        print(f"| {factor.describe()} | {sum(got)} of {len(got)} | {cases[factor][0]} of {cases[factor][1]} | "
              f"{r[len(r) // 2]:.2f} [{r[0]:.2f}-{r[-1]:.2f}] |")
    print(f"\nInconclusive verdicts (the measured noise could not decide): {inconclusive}"
          + (f"; noise from {calibration.describe()}" if calibration else "; no calibration"))
    if excluded:
        print(f"\nLeft out: {sum(excluded.values())} granularity cases with work of slowed backends (an injection "
              f"cannot slow them by its factor: harness/inject.py).")
    return 0


def _size(key: str) -> int:
    parts = key.split("/")
    return int(parts[4]) if len(parts) > 4 and parts[4].isdigit() else 0


def _affected(key: str, inject: dict[str, Slowdown]) -> bool:
    backend = key.split("/")[1] if "/" in key else ""
    return backend in inject and _size(key) >= inject[backend].min_bytes


def _with_work(key: str) -> bool:
    """A granularity case whose echo side works (``.../work=1ms``)."""
    return key.startswith("granularity/") and not key.endswith("/work=0")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    gate_args: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, gate_args = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="run the A/A gates, then the gates with slowdowns")
    p.add_argument("--out", default="gate-power")
    p.add_argument("--aa", type=int, default=5, help="gates with nothing changed (default 5)")
    p.add_argument("--injected", type=int, default=5, help="gates with three backends slowed (default 5)")
    p.add_argument("--project", default=None, help="measure this project (e.g. examples/consumer) in a copy")
    p.add_argument("--plan", action="append", default=[], metavar="SPEC",
                   help="one injected gate per SPEC (as --inject takes it, e.g. fifo=2@1MiB) instead of the rotation")
    p = sub.add_parser("slowed", help="the default gate on a 72-case consumer whose uds is slowed 2x, and A/A")
    p.add_argument("--out", default="gate-power-70")
    p.add_argument("--runs", type=int, default=3, help="gates of the slowed head (default 3)")
    p.add_argument("--aa", type=int, default=1, help="gates of identical code (default 1)")
    p = sub.add_parser("table", help="tabulate gate report folders")
    p.add_argument("--calibration", default=None, help="decide with this calibration file (ipcbench calibrate)")
    p.add_argument("--fast-tail", type=float, default=RUN_QUANTILE, metavar="Q",
                   help="the quantile of each round the gate judges by beside its medians (default 0.1; 0.5: medians alone)")
    p.add_argument("folders", nargs="+")
    args = parser.parse_args(argv)
    if args.command == "slowed":
        return slowed(args)
    return run(args, gate_args) if args.command == "run" else table(args)


if __name__ == "__main__":
    sys.exit(main())
