"""A/A for counter verdicts: separate runs of identical code, every pair compared (docs/method.md rule 22).

    .venv/bin/python tools/counter_aa.py --runs 6 --out ipcbench-results/aa [-- RUN ARGS]
    .venv/bin/python tools/counter_aa.py --files A/results.json B/results.json C/results.json ...

With ``--runs N``, N runs of ``ipcbench run --count --results-only`` one after the other (default
run arguments: ``--quick --no-extras --backends shm,mpi-p2p,mpi-buffer,zmq,lmdb,mp-queue``), then
every pair of them compared with comparison/counters.counter_verdict, as compare and the gate do.
Prints each counter verdict (an exact counter that changed: it would fail the gate) and each
statistical change (a note), then: pairs, case comparisons, verdicts, notes by counter, and the
load the runs met. Exit 1 when there was a verdict.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from statistics import median

from pytest_ipcbench.comparison.counters import counter_changes
from pytest_ipcbench.results.results import ResultSet

DEFAULT_RUN = ["--quick", "--no-extras", "--backends", "shm,mpi-p2p,mpi-buffer,zmq,lmdb,mp-queue"]


def run(n: int, out: Path, args: list[str]) -> list[Path]:
    files = []
    for i in range(1, n + 1):
        dest = out / f"run{i}"
        cmd = [str(Path(sys.executable).parent / "ipcbench"), "run", "--count", "--results-only", "--progress", "none",
               *args, "--out", str(dest)]
        print(f"run {i}/{n}: load {os.getloadavg()[0]:.1f}", flush=True)
        with open(out / f"run{i}.log", "w") as log:
            code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
        if code not in (0, 1) or not (dest / "results.json").is_file():
            raise SystemExit(f"run {i} failed ({code}); see {out / f'run{i}.log'}")
        files.append(dest / "results.json")
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=0)
    parser.add_argument("--out", default="ipcbench-results/aa")
    parser.add_argument("--files", nargs="*", default=[])
    parser.add_argument("--quiet-notes", action="store_true", help="do not print each statistical change")
    parser.add_argument("run_args", nargs="*", help="after --: arguments of each ipcbench run")
    args = parser.parse_args()
    files = [Path(f) for f in args.files]
    if args.runs:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        files += run(args.runs, out, args.run_args or DEFAULT_RUN)
    if len(files) < 2:
        print("need at least two results files (--files) or --runs N >= 2", file=sys.stderr)
        return 2
    sets = [ResultSet.load(f) for f in files]
    loads = [float(x) for rs in sets for x in (rs.env.get("load_start"), rs.env.get("load_end"))
             if isinstance(x, (int, float))]
    pairs = cases = verdicts = 0
    notes: Counter[str] = Counter()
    by_counter: Counter[str] = Counter()
    for (i, a), (j, b) in itertools.combinations(enumerate(sets), 2):
        pairs += 1
        old, new = a.by_key(), b.by_key()
        for key in sorted(old.keys() & new.keys()):
            if old[key].counters is None or new[key].counters is None:
                continue
            cases += 1
            for c in counter_changes(old[key], new[key]):
                if c.exact:
                    verdicts += 1
                    by_counter[c.counter] += 1
                    print(f"VERDICT run{i + 1} vs run{j + 1} {key}: {c.text}")
                else:
                    notes[c.counter] += 1
                    if not args.quiet_notes:
                        print(f"note run{i + 1} vs run{j + 1} {key}: {c.text}")
    load = f"load {min(loads):.1f} / {median(loads):.1f} / {max(loads):.1f} (min/median/max)" if loads else "load ?"
    print(f"{len(sets)} runs, {pairs} pairs, {cases} case comparisons: {verdicts} counter verdicts"
          f"{' (' + ', '.join(f'{k} {v}' for k, v in by_counter.most_common()) + ')' if by_counter else ''}, "
          f"{sum(notes.values())} statistical notes ({', '.join(f'{k} {v}' for k, v in notes.most_common())}); {load}")
    return 1 if verdicts else 0


if __name__ == "__main__":
    sys.exit(main())
