"""Reports of a results file: CSV summaries, PNG plots and markdown tables.

:func:`write_report` (also ``ipcbench report RESULTS.json --out DIR`` and ``pytest --ipc-report
DIR``) writes into one folder:

* ``summary.md``: the environment, then the tables people expect: per payload kind the backends
  ranked by broadcast completion with their relative speed, write and read time
  against size, ping-pong latency, stream and granularity tables, copy bandwidth;
* CSV: ``write_summary.csv``, ``read_summary.csv``, ``throughput_summary.csv``,
  ``latency_summary.csv``, ``stream_summary.csv``, ``granularity_summary.csv``,
  ``copy_bandwidth.csv`` and ``all_results.csv`` (every metric of every case);
* PNG (matplotlib, Agg, no display needed): ``write_performance.png``, ``read_performance.png``,
  ``completion.png``, ``throughput.png``, ``efficiency.png``, ``latency.png``, ``stream.png``,
  ``granularity.png``; log axes with units;
* the MPI method tables and plot (``mpi-methods.md`` / ``.png``) when the results hold
  ``mpi-method`` cases (:mod:`.mpi_methods`).

Units: times in seconds in the CSV (``_s`` columns), MB = 10**6 bytes, MB/s = 10**6 bytes/s.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from ..results.results import ResultSet
from .csv_files import csv_rows, write_csv
from .markdown import headline, markdown
from .mpi_methods import write_mpi_method_report
from .plots import write_plots

__all__ = ["headline", "markdown", "write_report"]


def write_report(resultset: ResultSet, out_dir: str | Path, plots: bool = True) -> Path:
    """Write CSVs, PNGs (unless ``plots`` is False), summary.md (and the MPI methods' report if there
    are MPI method cases) into ``out_dir``; return the path of summary.md.

    Everything is written into a temporary folder inside ``out_dir`` first and moved in at the
    end: a report that fails half-way leaves no file of it behind.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".ipcbench-report-", dir=out))
    try:
        results = list(resultset.results)
        files: list[Path] = []
        for name, rows in csv_rows(results).items():
            p = write_csv(staging / name, rows)
            if p:
                files.append(p)
        if plots:
            files.extend(write_plots(results, staging))
        if plots and any(r.scenario == "mpi-method" for r in results):
            files.extend(Path(p) for p in write_mpi_method_report(results, staging))
        summary = staging / "summary.md"
        summary.write_text(markdown(resultset, sorted(set(files), key=lambda p: (p.suffix, p.name))) + "\n")
        for entry in sorted(staging.iterdir()):
            os.replace(entry, out / entry.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out / "summary.md"
