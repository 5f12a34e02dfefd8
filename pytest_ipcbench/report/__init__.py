"""Reports of a results file: CSV summaries, PNG plots and markdown tables.

:func:`write_report` (``ipcbench report``, ``pytest --ipc-report``) writes into one folder
``summary.md`` (:mod:`.markdown`), the CSVs of :mod:`.csv_files`, the PNGs of :mod:`.plots` and,
with ``mpi-method`` cases, ``mpi-methods.md`` / ``.png`` (:mod:`.mpi_methods`).
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
    """Write the report into ``out_dir`` (no PNG unless ``plots``); the path of summary.md. It is
    staged in a temporary folder there and moved in at the end: a failed report leaves no file."""
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
