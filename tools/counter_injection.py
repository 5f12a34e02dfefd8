"""Counter verdicts on injected costs: does compare (and the gate) flag exactly the cases that got
one more system call, copy or pickle per message, with the right explanation, and no other?

    .venv/bin/python tools/counter_injection.py [--variants syscall,copy,pickle] [--no-gate]
    .venv/bin/python tools/counter_injection.py --variants none,none,none,none,none   # 5 A/A pairs
    .venv/bin/python tools/counter_injection.py --variants syscall,copy,none --gate-only --phases --save DIR

For each variant, a temporary git repository of the consumer project tests/data/counter_consumer
(a plugin backend: pytest-ipcbench's shm store plus the injected cost, as ``inj`` in ipcbench
run's local phase and ``inj-mpi`` in its MPI phase at 4 ranks, the ``ranks`` its [tool.ipcbench]
declares; built-in ``shm`` as a control) with two commits: base clean, head the variant. Then

1. ``ipcbench run`` at base and at head (counted: the default; the project installed editable in
   a venv that shares this one's packages), and ``ipcbench compare base head`` (its exit code);
   ``--gate-only`` skips this;
2. ``ipcbench gate --base HEAD~1`` in that repository, with no other flag: the default gate (its
   rounds, confirming rounds, budget, stored calibration if any, one counting round a side), its
   report in the repository's .ipcbench-gate/report. ``--phases`` gates two repositories instead
   of one, each declaring one phase's backends (local: ``inj``; MPI at 4 ranks: ``inj-mpi`` and
   ``shm``), so that each phase has a gate, a last line and an exit code of its own.

and tabulates per variant and phase: affected cases (backends inj, inj-mpi) flagged by an exact
counter increase / affected cases, those whose explanation names the injected cost, unaffected
cases (shm) flagged. For each gate it prints its last line, its exit code, the counter words of the
affected cases, the ranks of the MPI cases and the counting pass's share of the gate's wall time
(each side's first round counts, its second measures the same cases uncounted: the share is the
two sides' (first - second) over the gate's wall time). Variant ``none`` is an A/A: its head
changes a comment only, and "explained" then counts the cases rightly not flagged. Nothing is left
behind (``--keep`` keeps the work folder; ``--save DIR`` copies each gate's output and report there).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pytest_ipcbench.comparison.counters import counter_verdict
from pytest_ipcbench.gate.consumer import share_packages
from pytest_ipcbench.results.results import ResultSet

REPO = Path(__file__).resolve().parents[1]
CONSUMER = REPO / "tests" / "data" / "counter_consumer"
BIN = Path(sys.executable).parent
AFFECTED = {"inj": "local", "inj-mpi": "mpi"}
CONTROL = {"shm": "mpi"}
#: what the explanation must say, and on which role (a ping-pong's echo writes too: either role)
EXPECTED = {
    "syscall": ("writer", "+1 write system call per message"),
    "copy": ("reader", "+1 copy of"),
    "pickle": ("writer", "+1 pickle round trip"),
    "none": ("", ""),  # A/A: the head commit changes a comment only; nothing may be flagged
}


def sh(cmd: list[str | Path], cwd: Path | None = None, log: Path | None = None, check: bool = True,
       env: dict[str, str] | None = None) -> int:
    with open(log, "a") if log else open(os.devnull, "w") as out:
        out.write(f"\n$ {' '.join(map(str, cmd))}\n")
        out.flush()
        code = subprocess.run([str(c) for c in cmd], cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
    if check and code != 0:
        raise SystemExit(f"failed ({code}): {' '.join(map(str, cmd))}; see {log}")
    return code


#: --phases: the backends each phase's repository declares
PHASES = {"local": ["inj"], "mpi": ["inj-mpi", "shm"]}


def make_repo(where: Path, variant: str, log: Path, backends: list[str] | None = None) -> Path:
    repo = where / "repo"
    shutil.copytree(CONSUMER, repo, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    if backends is not None:  # one phase's backends only
        toml = repo / "pyproject.toml"
        declared = 'backends = ["inj", "inj-mpi", "shm"]'
        assert declared in toml.read_text(), "the consumer's [tool.ipcbench] backends line moved"
        toml.write_text(toml.read_text().replace(declared, f"backends = {json.dumps(backends)}"))
    git: list[str | Path] = ["git", "-C", repo]
    sh([*git, "init", "-q", "-b", "main"], log=log)
    sh([*git, "config", "user.email", "t@example.invalid"], log=log)
    sh([*git, "config", "user.name", "t"], log=log)
    sh([*git, "add", "-A"], log=log)
    sh([*git, "commit", "-q", "-m", "clean"], log=log)
    v = repo / "src" / "inj_channel" / "variant.py"
    if variant == "none":
        v.write_text(v.read_text() + "# a comment: the same code\n")
    else:
        v.write_text(v.read_text().replace('VARIANT = "clean"', f'VARIANT = "{variant}"'))
    sh([*git, "commit", "-q", "-am", f"inject {variant}"], log=log)
    return repo


def verdicts(base: Path, head: Path, variant: str) -> dict[str, dict[str, int]]:
    """Per phase: affected, flagged, explained, control, control_flagged, control_changed."""
    old, new = ResultSet.load(base).by_key(), ResultSet.load(head).by_key()
    role, phrase = EXPECTED[variant]
    table: dict[str, dict[str, int]] = {}
    for key in sorted(old.keys() & new.keys()):
        b, h = old[key], new[key]
        phase = AFFECTED.get(h.backend) or CONTROL.get(h.backend)
        v = counter_verdict(b, h)
        if phase is None or v is None:
            continue
        row = table.setdefault(f"{phase} {h.mode}", dict.fromkeys(
            ("affected", "flagged", "explained", "control", "control_flagged", "control_changed"), 0))
        if h.backend in AFFECTED:
            row["affected"] += 1
            row["flagged"] += bool(v.regressions)
            if not phrase:  # A/A: right when nothing is flagged
                row["explained"] += not v.regressions
                if v.changes:
                    print(f"    changed: {key}: {v.lines}")
                continue
            ok = any(phrase in line and (line.startswith(role) or h.scenario == "pingpong") for line in v.regressions)
            row["explained"] += ok
            if not ok:
                print(f"    not explained: {key}: {v.regressions or v.lines}")
        else:
            row["control"] += 1
            row["control_flagged"] += bool(v.regressions)
            row["control_changed"] += v.changes > 0
            if v.changes:
                print(f"    control changed: {key}: {v.lines}")
    return table


#: the counters printed side by side (base -> head) for each affected case with --show
SHOWN = ("alloc.bytes", "alloc.peak_bytes", "faults.minor", "syscalls.mapping", "syscalls.data", "pickle.dumps",
         "pickle.loads", "io.rchar")


def side_by_side(base: Path, head: Path) -> None:
    """Per affected case and role: each of SHOWN per message, base -> head (the readers: their mean)."""
    from pytest_ipcbench.comparison.counters import readers_mean

    old, new = ResultSet.load(base).by_key(), ResultSet.load(head).by_key()
    for key in sorted(old.keys() & new.keys()):
        b, h = old[key].counters, new[key].counters
        if new[key].backend not in AFFECTED or b is None or h is None:
            continue
        for role in ("writer", "reader"):
            rb = readers_mean([r for r in b.ranks if r.role == role])
            rh = readers_mean([r for r in h.ranks if r.role == role])
            cells = [f"{n.split('.', 1)[1]} {rb.value(n):,.0f}->{rh.value(n):,.0f}" for n in SHOWN
                     if rb.has(n) and rh.has(n)]
            print(f"    {key} {role}: {'; '.join(cells)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default="syscall,copy,pickle,none")
    parser.add_argument("--no-gate", action="store_true", help="only the two runs and compare")
    parser.add_argument("--gate-only", action="store_true", help="only the gate (no separate runs and compare)")
    parser.add_argument("--phases", nargs="?", const="local,mpi", default="",
                        help="a repository (and gate) per phase: local (inj), mpi (inj-mpi, shm at 4 ranks); "
                             "a comma list (default both)")
    parser.add_argument("--save", metavar="DIR", help="copy each gate's output and report into DIR/VARIANT-PHASE")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--show", action="store_true", help="print the counters of each affected case, base -> head")
    parser.add_argument("--again", metavar="WORK",
                        help="tabulate a kept work folder again with this checkout's verdict (compare run anew on "
                             "the kept results; the gate's exit code is then compare's on its base.json and head.json)")
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    bad = [v for v in variants if v not in EXPECTED]
    if bad:
        print(f"unknown variant(s) {bad}; known: {', '.join(EXPECTED)}", file=sys.stderr)
        return 2
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    rows = []
    if args.again:
        work = Path(args.again)
        for variant in variants:
            where = work / variant
            for how, base, head in (("compare", where / "base" / "results.json", where / "head" / "results.json"),
                                    ("gate", where / "gate" / "base.json", where / "gate" / "head.json")):
                if not head.is_file():
                    continue
                code = sh([BIN / "ipcbench", "compare", base, head, "--calibration", "none"], check=False, env=env)
                if args.show:
                    side_by_side(base, head)
                for phase, r in sorted(verdicts(base, head, variant).items()):
                    rows.append((variant, how, phase, r, code))
        return table(rows)
    work = Path(tempfile.mkdtemp(prefix="ipcb-injection-"))
    try:
        log = work / "log.txt"
        print(f"work folder {work}, log {log}; load {os.getloadavg()[0]:.1f}", flush=True)
        venv = work / "venv"
        if not args.gate_only:
            sh([sys.executable, "-m", "venv", venv], log=log)
            share_packages(venv / "bin" / "python")
        for i, variant in enumerate(variants):
            started = time.monotonic()
            name = variant if variants.count(variant) == 1 else f"{variant}-{i}"  # none,none,...: A/A pairs
            phases = [(p, PHASES[p]) for p in args.phases.split(",")] if args.phases else [("all", None)]
            for phase, backends in phases:
                where = work / name / phase
                where.mkdir(parents=True)
                repo = make_repo(where, variant, log, backends)
                if not args.gate_only:
                    rows += runs_and_compare(venv, repo, where, variant, log, env, args.show)
                if not args.no_gate:
                    save = Path(args.save) / f"{name}-{phase}" if args.save else None
                    rows += gate(repo, variant, log, env, save)
            print(f"{variant}: {time.monotonic() - started:.0f} s", flush=True)
        print(f"\nload at the end {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        return table(rows)
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def runs_and_compare(venv: Path, repo: Path, where: Path, variant: str, log: Path, env: dict[str, str],
                     show: bool) -> list:
    """``ipcbench run`` (counted by default) at base and head, then ``ipcbench compare``: the table's rows."""
    py = venv / "bin" / "python"
    sh([py, "-m", "pip", "install", "--quiet", "--no-deps", "-e", repo], log=log, env=env)
    runs = {}
    for side, ref in (("base", "HEAD~1"), ("head", "main")):
        sh(["git", "-C", repo, "checkout", "-q", ref], log=log)
        out = where / side
        sh([py, "-m", "pytest_ipcbench", "run", "--results-only", "--progress", "none",
            "--config", repo / "pyproject.toml", "--out", out], cwd=where, log=log, env=env)
        runs[side] = out / "results.json"
    code = sh([BIN / "ipcbench", "compare", runs["base"], runs["head"], "--calibration", "none"],
              log=log, check=False, env=env)
    print(f"{variant}: compare exit {code} (load {os.getloadavg()[0]:.1f})", flush=True)
    if show:
        side_by_side(runs["base"], runs["head"])
    return [(variant, "compare", phase, r, code) for phase, r in sorted(verdicts(runs["base"], runs["head"],
                                                                                  variant).items())]


def gate(repo: Path, variant: str, log: Path, env: dict[str, str], save: Path | None) -> list:
    """The default gate, ``ipcbench gate --base HEAD~1`` and no other flag, in ``repo``: its last
    line, exit code, counter words and counting share printed; the table's rows returned."""
    output = repo.parent / "gate-output.txt"
    started, load = time.monotonic(), os.getloadavg()
    with open(output, "w") as out:
        code = subprocess.run([BIN / "ipcbench", "gate", "--base", "HEAD~1"], cwd=repo, stdout=out,
                              stderr=subprocess.STDOUT, env=env).returncode
    took, load_end = time.monotonic() - started, os.getloadavg()
    text = output.read_text(errors="replace").splitlines()
    report = repo / ".ipcbench-gate" / "report"
    print(f"{variant} gate in {repo.parent.name}: exit {code}, {took:.0f} s, load {load[0]:.1f} -> {load_end[0]:.1f}")
    print(f"    last line: {text[-1] if text else '(none)'}")
    if save is not None:
        save.mkdir(parents=True, exist_ok=True)
        shutil.copy(output, save / "gate-output.txt")
        for item in ("compare.txt", "compare.md", "verdicts.json", "base.json", "head.json"):
            if (report / item).is_file():
                shutil.copy(report / item, save / item)
    if not (report / "head.json").is_file():
        print(f"    the gate wrote no results; see {output}")
        return []
    head = ResultSet.load(report / "head.json")
    ranks = sorted({r.ranks for r in head.results if r.backend in ("inj-mpi", "shm")})
    if ranks:
        print(f"    MPI phase ranks: {ranks}")
    for line in text:
        if any(f" {b}/" in line or f"{b} " in line for b in AFFECTED) and "per message" in line:
            print(f"    {line.strip()}")
    print(f"    {counting_share(text, took)}", flush=True)
    passes = [sum(sum(r.counters.seconds) for r in ResultSet.load(report / f"{side}.json").results if r.counters)
              for side in ("base", "head")]
    print(f"    the counting passes' own seconds (rank 0, counters.seconds): base {passes[0]:.1f} s, head "
          f"{passes[1]:.1f} s, {100 * sum(passes) / took:.1f}% of the gate's {took:.0f} s", flush=True)
    return [(variant, "gate", phase, r, code)
            for phase, r in sorted(verdicts(report / "base.json", report / "head.json", variant).items())]


def counting_share(output: list[str], gate_s: float) -> str:
    """The counting pass's share of the gate's wall time, from the gate's own output: each side's
    counted first round minus its uncounted second round (when that one ran every case too)."""
    rounds: dict[tuple[int, str], tuple[float, str]] = {}
    current: tuple[int, str] | None = None
    for line in output:
        m = re.match(r"\[gate\] round (\d+): (base|head), (.*)", line)
        if m:
            current = (int(m[1]), m[2])
            what = m[3]
            continue
        m = re.match(r"\[gate\]   (base|head): ([\d.]+) s", line)
        if m and current is not None:
            rounds[current] = (float(m[2]), what)
    extra, parts = 0.0, []
    for side in ("base", "head"):
        first, second = rounds.get((1, side)), rounds.get((2, side))
        if first is None or second is None or second[1] != "every case":
            return "share: no uncounted round of every case to compare with"
        extra += first[0] - second[0]
        parts.append(f"{side} counted {first[0]:.1f} s, uncounted {second[0]:.1f} s")
    return (f"counting share: {extra:.1f} s of the gate's {gate_s:.0f} s = {100 * extra / gate_s:.1f}% "
            f"({'; '.join(parts)}; {len(rounds)} rounds)")

def table(rows: list) -> int:
    """The table (markdown); 0 when every affected case was flagged and explained and no control was."""
    print("| variant | how | phase, mode | affected flagged | explained | unaffected flagged (any change) | exit |")
    print("|---|---|---|---|---|---|---|")
    for variant, how, phase, r, code in rows:
        where, mode = phase.split()
        phase_text = ("local" if where == "local" else "MPI, 4 ranks") + f", {mode}"
        print(f"| {variant} | {how} | {phase_text} | {r['flagged']}/{r['affected']} | {r['explained']}/{r['affected']} "
              f"| {r['control_flagged']}/{r['control']} ({r['control_changed']}) | {code} |")
    ok = all((r["flagged"] == r["explained"] == r["affected"] if v != "none" else r["flagged"] == 0)
             and not r["control_flagged"] for v, _h, _p, r, _c in rows)
    return 0 if ok and rows else 1

if __name__ == "__main__":
    sys.exit(main())
