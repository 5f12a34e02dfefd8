"""Measure what ``ipcbench compare`` of two separate runs can see on this machine.

    # a consumer's plugin backend (installed in PYTHON's environment), 5 rounds, local groups:
    python tools/compare_power.py run --out cp --python .venv-c/bin/python --cwd examples/consumer \
        --rounds 5 --plan fifo=2 --plan fifo=1.5 --plan fifo=2@1MiB -- --no-mpi --ranks 4
    python tools/compare_power.py table cp          # verdicts per case, A/A and injected

``run`` first makes ``--calibrate`` runs of identical code (default 4) and calibrates from them
(``ipcbench calibrate --from``: the noise each case showed between runs), then ``--rounds``
rounds, each: two plain runs (A, B) and one run per ``--plan`` with ``$IPCBENCH_INJECT`` set
(harness/inject.py), their order rotated from round to round. Every run is a separate
``PYTHON -m pytest_ipcbench run --results-only`` in ``--cwd`` (its [tool.ipcbench] table, if
any), with the arguments after ``--``. The calibration runs are never compared: an A/A pair
judged by a noise measured on itself would look better than it is.

``table --runs-a-side K`` merges K consecutive rounds' runs of each kind into one side (as
``ipcbench compare`` of two folders of runs does) and compares those blocks instead.

``table`` compares, with the calibration, A against B of each round (A/A: every "slower" or
"faster" is false) and A against each injected run (the cases the plan slowed: how many were
flagged "slower"; the others: false verdicts), counts verdicts per case (slower / faster /
unchanged / inconclusive) and writes ``summary.json`` beside them.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from statistics import NormalDist

from pytest_ipcbench.comparison.calibration import Calibration
from pytest_ipcbench.comparison.compare import compare_sets
from pytest_ipcbench.comparison.run_sets import RUN_QUANTILE, merge_runs
from pytest_ipcbench.comparison.verdict import CaseVerdict
from pytest_ipcbench.core.injection import Slowdown, parse_injection
from pytest_ipcbench.results.results import ResultSet

STATUSES = ("slower", "faster", "unchanged", "inconclusive")


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _run(python: str, cwd: Path | None, out: Path, run_args: list[str], inject: str, log: Path) -> float:
    """One ``ipcbench run`` into ``out`` (skipped when it is there); its wall time."""
    if (out / "results.json").is_file():
        return 0.0
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("IPCBENCH_INJECT", "PYTHONPATH")}
    if inject:
        env["IPCBENCH_INJECT"] = inject
    cmd = [python, "-m", "pytest_ipcbench", "run", "--results-only", "--progress", "none", "--out", str(out), *run_args]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    took = time.monotonic() - t0
    log.write_text(proc.stdout)
    # exit 1 with a results file: some case failed (e.g. the physics check on a loaded machine);
    # the others are compared, the failed one is not in the file
    if proc.returncode not in (0, 1) or not (out / "results.json").is_file():
        raise SystemExit(f"[compare-power] {out.name}: ipcbench run exited {proc.returncode}; see {log}")
    failed = [line.strip() for line in proc.stdout.splitlines() if line.strip().startswith("failed:")]
    print(f"[compare-power] {out.parent.name}/{out.name}{f' ({inject})' if inject else ''}: {took:.0f} s, "
          f"load {_load()}{f'; {len(failed)} case(s) failed: {failed[0][:160]}' if failed else ''}", flush=True)
    return took


def run(args: argparse.Namespace, run_args: list[str]) -> int:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    cwd = Path(args.cwd).resolve() if args.cwd else None
    if "/" in args.python:  # a path: from here, not from --cwd where the runs start
        args.python = str(Path(args.python).absolute())
    plans = [p for p in args.plan]
    for spec in plans:
        parse_injection(spec, "--plan")  # a bad plan fails before anything runs
    (out / "plan.json").write_text(json.dumps({"plans": plans, "run_args": run_args, "python": args.python,
                                               "cwd": str(cwd or "")}) + "\n")
    calib = [out / "calibration" / f"run{i + 1}" for i in range(args.calibrate)]
    for folder in calib:
        folder.parent.mkdir(exist_ok=True)
        _run(args.python, cwd, folder, run_args, "", folder.parent / f"{folder.name}.log")
    cal_file = out / "calibration.json"
    if calib and not cal_file.is_file():
        cmd = [args.python, "-m", "pytest_ipcbench", "calibrate", "--from", *(str(f / "results.json") for f in calib),
               "--out", str(cal_file), "--markdown", str(out / "calibration.md")]
        proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        (out / "calibrate.log").write_text(proc.stdout)
        if proc.returncode != 0:
            raise SystemExit(f"[compare-power] calibrate exited {proc.returncode}; see {out / 'calibrate.log'}")
    for r in range(args.rounds):
        folder = out / f"round{r + 1}"
        folder.mkdir(exist_ok=True)
        runs = [("A", "")] + ([] if args.skip_b else [("B", "")]) + [(f"inj{i + 1}", spec) for i, spec in enumerate(plans)]
        shift = r % len(runs)  # the order rotates: no side is always first after a pause
        for name, inject in runs[shift:] + runs[:shift]:
            _run(args.python, cwd, folder / name, run_args, inject, folder / f"{name}.log")
        meta = folder / "round.json"
        if not meta.is_file():
            meta.write_text(json.dumps({"load_end": _load(), "order": [n for n, _ in runs[shift:] + runs[:shift]]}) + "\n")
    return 0


def _slowed(key: str, inject: dict[str, Slowdown], size: int) -> bool:
    """Did the plan slow this case? Not a granularity case whose echo side works (harness/inject.py)."""
    if key.startswith("granularity/") and not key.endswith("/work=0"):
        return False
    backend = key.split("/")[1] if key.count("/") >= 2 else ""
    slowdown = inject.get(backend)
    return slowdown is not None and size >= slowdown.min_bytes


def _predicted_false(case: CaseVerdict, calibration: Calibration | None, threshold: float) -> float:
    """The chance the calibration's own noise model gives this A/A case a false verdict: its log
    head/base ~ N(0, sigma of the case), flagged beyond log(1 + threshold) + the interval's half-width."""
    noise = calibration.cases.get(case.key) if calibration is not None else None
    if noise is None or noise.sigma <= 0 or not math.isfinite(case.noise):
        return 0.0
    return 2 * (1 - NormalDist().cdf((math.log(1 + threshold) + case.noise) / noise.sigma))


def table(args: argparse.Namespace) -> int:
    # what several runs a side are judged by beside their medians (0.5: their medians alone)
    tail = {"fast_tail": None if args.run_quantile == 0.5 else args.run_quantile}
    out = Path(args.folder)
    plan = json.loads((out / "plan.json").read_text())
    cal_path = Path(args.calibration) if args.calibration else out / "calibration.json"
    calibration = Calibration.load(cal_path) if cal_path.is_file() and args.calibration != "none" else None
    aa: Counter[str] = Counter()
    aa_false: list[str] = []
    injected: dict[str, Counter[str]] = defaultdict(Counter)  # plan -> statuses of the slowed cases
    untouched: Counter[str] = Counter()
    ratios: dict[str, list[float]] = defaultdict(list)
    predicted = 0.0  # false A/A verdicts the calibration's noise model expects
    rounds = sorted((p for p in out.glob("round*") if (p / "A" / "results.json").is_file()),
                    key=lambda p: int(p.name[5:]))
    k = args.runs_a_side
    blocks = [rounds[i:i + k] for i in range(0, len(rounds) - k + 1, k)]

    def side(block: list[Path], name: str) -> ResultSet | None:
        files = [f / name / "results.json" for f in block]
        if not all(f.is_file() for f in files):
            return None
        sets = [ResultSet.load(f) for f in files]
        return sets[0] if k == 1 else merge_runs(sets, [str(f) for f in files])

    for block in blocks:
        folder = block[0] if k == 1 else Path(f"{block[0].name}-{block[-1].name}")
        a = side(block, "A")
        b = side(block, "B")
        if b is not None:
            comparison = compare_sets(a, b, calibration=calibration, **tail)
            for c in comparison.cases:
                if c.status in STATUSES:
                    aa[c.status] += 1
                    predicted += _predicted_false(c, calibration, comparison.threshold)
                    if c.status in ("slower", "faster"):
                        aa_false.append(f"{folder.name}: {c.key} {c.status}")
        for i, spec in enumerate(plan["plans"]):
            h = side(block, f"inj{i + 1}")
            if h is None:
                continue
            inject = parse_injection(spec)
            sizes = {r.key: r.size for r in h.results}
            for c in compare_sets(a, h, calibration=calibration, **tail).cases:
                if c.status not in STATUSES:
                    continue
                if _slowed(c.key, inject, sizes.get(c.key, 0)):
                    backend = c.key.split("/")[1]
                    label = f"{backend} {inject[backend].describe()}"  # each backend's slowdown apart
                    injected[label][c.status] += 1
                    if c.interval is not None:
                        ratios[label].append(c.interval.ratio)
                elif not (c.key.split("/")[1] in inject and c.key.startswith("granularity/")):
                    untouched[c.status] += 1  # (a slowed backend's granularity with work: left out, as gate_power)
    summary = {
        "rounds": len(rounds), "runs_a_side": k, "comparisons": len(blocks), "calibration": str(cal_path) if calibration else None,
        "aa": dict(aa), "aa_false": aa_false, "aa_false_predicted": round(predicted, 3),
        "injected": {spec: dict(c) for spec, c in injected.items()},
        "injected_untouched": dict(untouched),
        "injected_ratio_median": {spec: sorted(v)[len(v) // 2] for spec, v in ratios.items() if v},
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    row = "{:<28} {:>7} {:>7} {:>10} {:>13} {:>9}"
    print(f"{len(rounds)} rounds, {len(blocks)} comparisons of {k} run(s) a side; calibration: {summary['calibration'] or 'none (every case inconclusive)'}")
    print(row.format("pairs", "slower", "faster", "unchanged", "inconclusive", "flagged"))
    print(row.format("A/A", *(aa[s] for s in STATUSES), f"{aa['slower'] + aa['faster']} false")
          + (f"  (the calibration predicts {predicted:.2f})" if calibration else ""))
    for spec, c in injected.items():
        total = sum(c.values())
        ratio = summary["injected_ratio_median"].get(spec)
        print(row.format(f"{spec}", *(c[s] for s in STATUSES), f"{c['slower']}/{total}")
              + (f"  median head/base {ratio:.2f}x" if ratio else ""))
    if untouched:
        print(row.format("injected, cases not slowed", *(untouched[s] for s in STATUSES),
                         f"{untouched['slower'] + untouched['faster']} false"))
    for line in aa_false:
        print("  A/A false:", line)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    run_args: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, run_args = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="the calibration runs, then rounds of A, B and each injected run")
    p.add_argument("--out", required=True)
    p.add_argument("--python", default=sys.executable, help="the interpreter whose pytest-ipcbench runs (default this one)")
    p.add_argument("--cwd", help="where each run starts (a project's folder: its [tool.ipcbench] table)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calibrate", type=int, default=4, help="runs to calibrate from (>= 3; 0: none)")
    p.add_argument("--plan", action="append", default=[], help="a slowdown as --inject takes it (repeatable)")
    p.add_argument("--skip-b", action="store_true",
                   help="no second plain run B a round (A/A verdicts then come from the cases no plan slowed)")
    t = sub.add_parser("table", help="verdicts per case of the rounds in FOLDER; writes FOLDER/summary.json")
    t.add_argument("folder")
    t.add_argument("--calibration", help="a calibration file (default FOLDER/calibration.json; 'none')")
    t.add_argument("--run-quantile", type=float, metavar="Q", default=RUN_QUANTILE,
                   help="the fast-tail quantile compare judges several runs a side by, beside their medians (default 0.1; 0.5: medians alone)")
    t.add_argument("--runs-a-side", type=int, default=1, metavar="K",
                   help="compare blocks of K consecutive rounds, each side its K runs merged (as "
                        "`ipcbench compare` of two folders of runs does); default 1: run against run")
    args = parser.parse_args(argv)
    if args.command == "run":
        if args.calibrate and args.calibrate < 3:
            parser.error("--calibrate needs at least 3 runs (or 0)")
        return run(args, run_args)
    return table(args)


if __name__ == "__main__":
    sys.exit(main())
