"""How far one case's median moves between separate runs of the same code.

    for i in 1 2 3 4 5; do ipcbench run --quick --out spread/run$i; done
    python tools/run_spread.py spread/run*/results.json                 # broadcast cases
    python tools/run_spread.py --scenario pingpong spread/run*/results.json

Per case of the scenario: the median of its primary metric in each run, and max / min across the
runs. Prints the cases from the widest, then min / median / max of the spreads and how many are
within ``--target`` (1.3x by default: issue 26's bound for broadcast). Each run's load average
and the host's state at its start and end (a 1 MiB copy from another CPU's cache,
``core/cpu_pair.py``) are printed too: a spread means little without them.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from pytest_ipcbench.core.units import format_time
from pytest_ipcbench.results.results import ResultSet


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="results.json of separate runs of the same code")
    parser.add_argument("--scenario", default="broadcast")
    parser.add_argument("--metric", default=None, help="default: each case's primary metric")
    parser.add_argument("--target", type=float, default=1.3)
    parser.add_argument("--show", type=int, default=15, help="widest cases to list")
    args = parser.parse_args(argv)
    runs = [ResultSet.load(f) for f in args.files]
    if len(runs) < 2:
        parser.error("need at least two runs")
    for f, rs in zip(args.files, runs):
        cross = rs.env.get("cross_cpu_copy_s") or []
        host = f"; 1 MiB from another CPU's cache {' / '.join(format_time(x) for x in cross if x)}" if cross else ""
        print(f"{f}: load {rs.env.get('load_start', '?')} at start, {rs.env.get('load_end', '?')} at the end{host}")
    medians: dict[str, list[float]] = {}
    for rs in runs:
        for key, r in rs.by_key().items():
            if r.scenario != args.scenario:
                continue
            samples = r.samples.get(args.metric or r.primary)
            if samples:
                medians.setdefault(key, []).append(statistics.median(samples))
    spreads = {k: max(v) / min(v) for k, v in medians.items() if len(v) == len(runs) and min(v) > 0}
    if not spreads:
        print(f"no {args.scenario} case in all {len(runs)} runs", file=sys.stderr)
        return 2
    ordered = sorted(spreads, key=spreads.get, reverse=True)
    print(f"\n{args.scenario}: median of each run, max / min across {len(runs)} runs (widest first)")
    for k in ordered[:args.show]:
        print(f"  {spreads[k]:5.2f}x  {k}: " + ", ".join(format_time(x) for x in medians[k]))
    values = sorted(spreads.values())
    within = sum(v <= args.target for v in values)
    print(f"\n{len(values)} cases: spread min {values[0]:.2f}x / median {statistics.median(values):.2f}x / "
          f"max {values[-1]:.2f}x; {within} of {len(values)} within {args.target:g}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
