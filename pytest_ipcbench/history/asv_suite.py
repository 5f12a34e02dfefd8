"""The asv suite for another project, at the path its ``benchmarks/bench_ipcbench.py`` imports.

The code is :mod:`pytest_ipcbench.runner.asv_suite` (it runs ``ipcbench run``'s matrix, a floor
above history); this path stays because adopters' asv suites name it (``ipcbench init-ci --asv``
writes ``from pytest_ipcbench.history.asv_suite import *``).
"""

from ..runner.asv_suite import Declared, DeclaredCounters, config_path, declared_keys, setup_cache  # noqa: F401

__all__ = ["Declared", "DeclaredCounters", "setup_cache", "declared_keys", "config_path"]
