"""Reports of a results file: CSV summaries, PNG plots and markdown tables.

:func:`write_report` (``ipcbench report RESULTS.json --out DIR``, ``pytest --ipc-report DIR``)
writes into one folder ``summary.md`` (:mod:`.markdown`); the CSVs ``write_summary``,
``read_summary``, ``throughput_summary``, ``latency_summary``, ``stream_summary``,
``granularity_summary``, ``copy_bandwidth`` and ``all_results`` (seconds in ``_s`` columns, MB =
10**6 bytes); the PNGs ``write_performance``, ``read_performance``, ``completion``,
``throughput``, ``efficiency``, ``latency``, ``stream``, ``granularity`` (matplotlib Agg); and,
when the results hold ``mpi-method`` cases, ``mpi-methods.md`` / ``.png`` (:mod:`.mpi_methods`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from ..core.csvfile import write_csv
from ..results.results import ResultSet
from .csv_files import csv_rows
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
